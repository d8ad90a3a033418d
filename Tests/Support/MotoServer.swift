import Foundation
import Publishing

/// moto's S3 server on 127.0.0.1, verifying SigV4: one per test process, started on first use.
///
/// Needs `pip install "moto[server]"` (`.ci/run` installs it). The server runs `moto_server.py`, which
/// spends moto's four unauthenticated calls on an IAM user with an `s3:*` policy and prints its key:
/// from then on every request must carry a valid signature, so the tests check our signer against a
/// second implementation.
public struct MotoServer: Sendable {
    public let port: Int
    /// The IAM user's key: signatures made with it are accepted.
    public let credentials: SigV4Signer.Credentials

    public var endpoint: String { "http://127.0.0.1:\(port)" }

    /// The server of this test process, started by the first caller and shared by every test.
    public static func shared() async throws -> MotoServer {
        try await launcher.server()
    }

    private static let launcher = Launcher()

    /// Starts the script once; the pipe to its standard input stays open until the process exits.
    private actor Launcher {
        private var started: Task<MotoServer, any Error>?
        private var process: Process?
        private var input: Pipe?

        func server() async throws -> MotoServer {
            if let started { return try await started.value }
            let process = Process()
            let input = Pipe()
            let output = Pipe()
            let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("moto_server.py")
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = ["python3", script.path]
            process.standardInput = input
            process.standardOutput = output
            process.standardError = FileHandle.nullDevice
            try process.run()
            (self.process, self.input) = (process, input)
            let task = Task { try await Self.readHandshake(output.fileHandleForReading) }
            started = task
            return try await task.value
        }

        private struct Handshake: Decodable {
            var port: Int
            var accessKeyID: String
            var secretAccessKey: String
        }

        /// The script's one JSON line, read on a thread of its own (it blocks until moto is up).
        private static func readHandshake(_ handle: FileHandle) async throws -> MotoServer {
            let line: Data = await withCheckedContinuation { continuation in
                Thread.detachNewThread {
                    var line = Data()
                    while true {
                        let byte = handle.readData(ofLength: 1)
                        if byte.isEmpty || byte == Data("\n".utf8) { break }
                        line.append(byte)
                    }
                    continuation.resume(returning: line)
                }
            }
            guard let handshake = try? JSONDecoder().decode(Handshake.self, from: line) else {
                throw MotoUnavailable(output: String(decoding: line, as: UTF8.self))
            }
            return MotoServer(
                port: handshake.port,
                credentials: .init(accessKeyID: handshake.accessKeyID, secretAccessKey: handshake.secretAccessKey)
            )
        }
    }
}

/// moto did not start: most likely it is not installed.
public struct MotoUnavailable: Error, CustomStringConvertible {
    public let output: String
    public var description: String {
        "moto's S3 server did not start (pip install \"moto[server]\"); it printed: '\(output)'"
    }
}
