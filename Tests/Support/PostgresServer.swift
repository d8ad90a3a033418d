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
