import Foundation
import Logging
public import PostgresNIO
import Synchronization

/// A PostgreSQL 15 server on 127.0.0.1 for the tests: one per test process, started on first use, stopped when it ends.
///
/// `postgres_server.py` runs Debian's PostgreSQL (`apt-get install postgresql`; `.ci/run` installs it) on a temporary
/// directory with fsync off. Each test takes a database of its own (``makeDatabase()``), so tests run side by side.
public struct PostgresServer: Sendable {
    public let port: Int
    public let user: String

    /// The server of this test process, started by the first caller and shared by every test.
    public static func shared() async throws -> PostgresServer {
        let handshake = try await script.handshake()
        return PostgresServer(port: handshake.port, user: handshake.user)
    }

    private struct Handshake: Decodable, Sendable {
        var port: Int
        var user: String
    }

    private static let script = ScriptServer<Handshake>(script: "postgres_server.py")

    /// A client's configuration for `database` on this server (no TLS on loopback).
    public func configuration(database: String) -> PostgresClient.Configuration {
        PostgresClient.Configuration(host: "127.0.0.1", port: port, username: user, password: nil, database: database, tls: .disable)
    }

    /// The `--database` URL of `database` on this server.
    public func url(database: String) -> String {
        "postgres://\(user)@127.0.0.1:\(port)/\(database)?sslmode=disable"
    }

    /// A new, empty database: its name.
    public func makeDatabase() async throws -> String {
        let name = "herald_\(UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: ""))"
        let logger = Logger(label: "postgres-server", factory: { _ in SwiftLogNoOpLogHandler() })
        let connection = try await PostgresConnection.connect(
            configuration: .init(host: "127.0.0.1", port: port, username: user, password: nil, database: "postgres", tls: .disable),
            id: 1, logger: logger)
        do {
            // CREATE DATABASE takes no parameters; the name is made here of hex digits.
            try await connection.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(name)"), logger: logger)
        } catch {
            try? await connection.close()
            throw error
        }
        try await connection.close()
        return name
    }
}

/// A PostgreSQL 15 server of one test's own, which the test stops and starts again (the shared one stays up for the
/// others): `postgres_server.py`, driven line by line.
///
/// `@unchecked Sendable`: the process and its pipes are driven by the one test that owns them, one call at a time.
public final class DedicatedPostgres: @unchecked Sendable {
    public let server: PostgresServer
    private let process: Process
    private let input: FileHandle
    private let lines: AsyncStream<String>
    /// Ends when the script has exited (set before it starts).
    private let exited: AsyncStream<Void>

    private init(server: PostgresServer, process: Process, input: FileHandle, lines: AsyncStream<String>, exited: AsyncStream<Void>) {
        self.server = server
        self.process = process
        self.input = input
        self.lines = lines
        self.exited = exited
    }

    /// Starts a server; stop it with ``close()``.
    public static func start() async throws -> DedicatedPostgres {
        let process = Process()
        let input = Pipe()
        let output = Pipe()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = [
            "python3", URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("postgres_server.py").path,
        ]
        process.standardInput = input
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        let (lines, continuation) = AsyncStream.makeStream(of: String.self)
        // The script's lines, as its output becomes readable (a dispatch source: no thread of the test process waits
        // on the pipe, so nothing keeps the process alive if a test ends without closing the script).
        let pending = Mutex(Data())
        output.fileHandleForReading.readabilityHandler = { handle in
            let chunk = handle.availableData
            guard !chunk.isEmpty else {
                handle.readabilityHandler = nil
                continuation.finish()
                return
            }
            let complete = pending.withLock { data -> [String] in
                data.append(chunk)
                var lines: [String] = []
                while let end = data.firstIndex(of: UInt8(ascii: "\n")) {
                    lines.append(String(decoding: data[data.startIndex..<end], as: UTF8.self))
                    data = Data(data[data.index(after: end)...])
                }
                return lines
            }
            for line in complete { continuation.yield(line) }
        }
        let (exited, exit) = AsyncStream.makeStream(of: Void.self)
        process.terminationHandler = { _ in exit.finish() }
        try process.run()
        var iterator = lines.makeAsyncIterator()
        let first = await iterator.next() ?? ""
        struct Handshake: Decodable {
            var port: Int
            var user: String
        }
        guard let handshake = try? JSONDecoder().decode(Handshake.self, from: Data(first.utf8)) else {
            process.terminate()
            throw ScriptServerUnavailable(script: "postgres_server.py", output: first)
        }
        return DedicatedPostgres(
            server: PostgresServer(port: handshake.port, user: handshake.user), process: process, input: input.fileHandleForWriting,
            lines: lines, exited: exited)
    }

    /// Stops the server (a fast shutdown: connections are cut), returning once it is down.
    public func stop() async throws { try await send("stop", expecting: "stopped") }

    /// Starts it again on the same port and data, returning once it accepts connections.
    public func restart() async throws { try await send("start", expecting: "started") }

    /// Stops the server's processes (SIGSTOP) without closing anything: a server that no longer answers.
    public func pause() async throws { try await send("pause", expecting: "paused") }

    /// Lets the paused processes go on (SIGCONT).
    public func resume() async throws { try await send("resume", expecting: "resumed") }

    /// Stops the server and removes its data, returning once the script has exited (no thread waits for it).
    public func close() async {
        try? input.close()
        for await _ in exited {}
    }

    private func send(_ command: String, expecting key: String) async throws {
        input.write(Data((command + "\n").utf8))
        var iterator = lines.makeAsyncIterator()
        let answer = await iterator.next() ?? ""
        guard answer.contains("\"\(key)\": true") else { throw ScriptServerUnavailable(script: "postgres_server.py \(command)", output: answer) }
    }
}
