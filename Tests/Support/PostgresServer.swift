import Foundation
import Logging
public import PostgresNIO

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

    private init(server: PostgresServer, process: Process, input: FileHandle, lines: AsyncStream<String>) {
        self.server = server
        self.process = process
        self.input = input
        self.lines = lines
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
        // The script's lines, read on a thread of their own: a read blocks until the server answers.
        let reading = output.fileHandleForReading
        Thread.detachNewThread {
            var line = Data()
            while true {
                let byte = reading.readData(ofLength: 1)
                if byte.isEmpty { break }
                if byte == Data("\n".utf8) {
                    continuation.yield(String(decoding: line, as: UTF8.self))
                    line = Data()
                } else {
                    line.append(byte)
                }
            }
            continuation.finish()
        }
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
            lines: lines)
    }

    /// Stops the server (a fast shutdown: connections are cut), returning once it is down.
    public func stop() async throws { try await send("stop", expecting: "stopped") }

    /// Starts it again on the same port and data, returning once it accepts connections.
    public func restart() async throws { try await send("start", expecting: "started") }

    /// Stops the server and removes its data.
    public func close() {
        try? input.close()
        process.waitUntilExit()
    }

    private func send(_ command: String, expecting key: String) async throws {
        input.write(Data((command + "\n").utf8))
        var iterator = lines.makeAsyncIterator()
        let answer = await iterator.next() ?? ""
        guard answer.contains("\"\(key)\": true") else { throw ScriptServerUnavailable(script: "postgres_server.py \(command)", output: answer) }
    }
}
