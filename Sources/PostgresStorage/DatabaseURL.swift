import Foundation
import NIOSSL
public import PostgresNIO

/// Where Herald's PostgreSQL database is, as `--database` gives it: `postgres://USER[:PASSWORD]@HOST[:PORT]/DB`, with
/// `?sslmode=disable|prefer|require` and, for a Unix socket, `?host=/socket/directory` (libpq's spelling of both).
public struct DatabaseURL: Sendable, Equatable, CustomStringConvertible {
    /// Whether to speak TLS, with libpq's meanings: `prefer` tries it and falls back, `require` insists; neither checks
    /// the server's certificate (libpq's `verify-full` would).
    public enum TLSMode: String, Sendable, CaseIterable {
        case disable, prefer, require
    }

    public var host: String
    public var port: Int
    /// The directory of the server's Unix socket, when connecting through one (`?host=/path`).
    public var socketDirectory: String?
    public var user: String
    public var password: String?
    public var database: String
    public var tls: TLSMode

    /// Parses `text`; the error says what is wrong in a line, never the password.
    public init(parsing text: String) throws(DatabaseURLError) {
        guard let components = URLComponents(string: text), let scheme = components.scheme else {
            throw DatabaseURLError("not a URL: expected postgres://USER[:PASSWORD]@HOST[:PORT]/DB")
        }
        guard scheme == "postgres" || scheme == "postgresql" else {
            throw DatabaseURLError("the scheme is '\(scheme)': expected postgres:// or postgresql://")
        }
        guard let user = components.percentEncodedUser.flatMap({ $0.removingPercentEncoding }), !user.isEmpty else {
            throw DatabaseURLError("no user: expected postgres://USER[:PASSWORD]@HOST[:PORT]/DB")
        }
        let database = String(components.path.drop { $0 == "/" })
        guard !database.isEmpty, !database.contains("/") else {
            throw DatabaseURLError("no database name: expected postgres://USER[:PASSWORD]@HOST[:PORT]/DB")
        }
        var tls = TLSMode.prefer
        var socketDirectory: String?
        for item in components.queryItems ?? [] {
            switch item.name {
            case "sslmode":
                guard let mode = item.value.flatMap(TLSMode.init(rawValue:)) else {
                    throw DatabaseURLError("sslmode must be disable, prefer or require, got '\(item.value ?? "")'")
                }
                tls = mode
            case "host":
                guard let path = item.value, path.hasPrefix("/") else {
                    throw DatabaseURLError("host= must be the absolute path of the server's socket directory")
                }
                socketDirectory = path
            default:
                throw DatabaseURLError("unknown parameter '\(item.name)': only sslmode and host are understood")
            }
        }
        let host = components.host ?? ""
        guard !host.isEmpty || socketDirectory != nil else {
            throw DatabaseURLError("no host: expected postgres://USER[:PASSWORD]@HOST[:PORT]/DB, or ?host=/socket/directory")
        }
        let port = components.port ?? 5432
        guard (1...65535).contains(port) else { throw DatabaseURLError("the port must be 1 to 65535, got \(port)") }
        self.host = host
        self.port = port
        self.socketDirectory = socketDirectory
        self.user = user
        self.password = components.percentEncodedPassword.flatMap { $0.removingPercentEncoding }
        self.database = database
        self.tls = tls
    }

    /// The URL with its password hidden: what logs and errors may show.
    public var description: String {
        let secret = password == nil ? "" : ":***"
        let place = socketDirectory.map { "\(host)/\(database)?host=\($0)" } ?? "\(host):\(port)/\(database)"
        return "postgres://\(user)\(secret)@\(place)" + (socketDirectory == nil ? "?sslmode=\(tls.rawValue)" : "")
    }

    /// The socket file libpq would use: `<directory>/.s.PGSQL.<port>`.
    private var socketPath: String? { socketDirectory.map { "\($0)/.s.PGSQL.\(port)" } }

    /// The pool's configuration.
    public var clientConfiguration: PostgresClient.Configuration {
        if let socketPath {
            return PostgresClient.Configuration(unixSocketPath: socketPath, username: user, password: password, database: database)
        }
        let tls: PostgresClient.Configuration.TLS =
            switch self.tls {
            case .disable: .disable
            case .prefer: .prefer(Self.unverified)
            case .require: .require(Self.unverified)
            }
        return PostgresClient.Configuration(host: host, port: port, username: user, password: password, database: database, tls: tls)
    }

    /// A single connection's configuration (the migrations', the listener's, the blocking reads').
    public func connectionConfiguration() throws -> PostgresConnection.Configuration {
        if let socketPath {
            return PostgresConnection.Configuration(unixSocketPath: socketPath, username: user, password: password, database: database)
        }
        let tls: PostgresConnection.Configuration.TLS =
            switch self.tls {
            case .disable: .disable
            case .prefer: .prefer(try NIOSSLContext(configuration: Self.unverified))
            case .require: .require(try NIOSSLContext(configuration: Self.unverified))
            }
        return PostgresConnection.Configuration(host: host, port: port, username: user, password: password, database: database, tls: tls)
    }

    /// TLS as libpq's `prefer` and `require` speak it: encrypted, the certificate not checked.
    private static var unverified: TLSConfiguration {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.certificateVerification = .none
        return configuration
    }
}

/// What is wrong with a `--database` URL, in a line that never holds its password.
public struct DatabaseURLError: Error, CustomStringConvertible, Equatable {
    public let description: String
    init(_ description: String) { self.description = "--database: \(description)" }
}
