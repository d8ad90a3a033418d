import Foundation

/// A server a script in `Tests/Support` starts for this test process: it prints one JSON line once the server is up,
/// and stops the server when its standard input closes, which is when the test process ends.
final class ScriptServer<Handshake: Decodable & Sendable>: Sendable {
    private let script: String
    private let launched: Launched

    /// `script`: a file beside this one, run by `python3`.
    init(script: String) {
        self.script = script
        launched = Launched()
    }

    /// The handshake of the running script, started by the first caller and shared by every test.
    func handshake() async throws -> Handshake {
        try await launched.handshake(script: script)
    }

    private actor Launched {
        private var started: Task<Handshake, any Error>?
        /// Kept open for as long as the process runs: its end tells the script to stop its server.
        private var input: Pipe?

        func handshake(script: String) async throws -> Handshake {
            if let started { return try await started.value }
            let process = Process()
            let input = Pipe()
            let output = Pipe()
            let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent(script)
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = ["python3", path.path]
            process.standardInput = input
            process.standardOutput = output
            process.standardError = FileHandle.nullDevice
            try process.run()
            self.input = input
            let task = Task { try await Self.readLine(output.fileHandleForReading, script: script) }
            started = task
            return try await task.value
        }

        /// The script's one JSON line, read on a thread of its own (it blocks until the server is up).
        private static func readLine(_ handle: FileHandle, script: String) async throws -> Handshake {
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
                throw ScriptServerUnavailable(script: script, output: String(decoding: line, as: UTF8.self))
            }
            return handshake
        }
    }
}

/// A test server's script did not start it: most likely what it runs is not installed (`.ci/run` installs it all).
public struct ScriptServerUnavailable: Error, CustomStringConvertible {
    public let script: String
    public let output: String
    public var description: String { "\(script) did not start its server; it printed: '\(output)'" }
}
