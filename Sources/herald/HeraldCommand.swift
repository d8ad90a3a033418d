import ArgumentParser
import AsyncHTTPClient
import CoreMetrics
import Foundation
import HeraldApp
import Logging
import NIOCore
import NIOHTTP1
import Prometheus
import Publishing

@main
struct HeraldCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "herald",
        abstract: "Herald: uploads media and publishes posts, each publish a job you can watch and cancel.",
        version: "0.1.0",
        subcommands: [Serve.self, Healthcheck.self],
        defaultSubcommand: Serve.self
    )
}

/// `herald serve`: every flag also reads a `HERALD_*` environment variable; the flag wins.
struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Run the HTTP service (the default).")

    @Option(help: "Address to listen on. [HERALD_HOST, default 127.0.0.1]") var host: String?
    @Option(help: "Port to listen on; 0 picks a free one. [HERALD_PORT, default 8080]") var port: Int?
    @Option(help: "Database and staging files. [HERALD_DATA_DIR, default ./data]") var dataDir: String?
    @Option(
        help: """
            Media store: file://PATH, or s3://BUCKET?endpoint=http://HOST:PORT&region=REGION (path-style, \
            signed with AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN). [HERALD_STORE, default file://<data-dir>/objects]
            """
    )
    var store: String?
    @Option(help: "Base URL for media URLs instead of the store's own. [HERALD_PUBLIC_BASE_URL]") var publicBaseURL: String?
    @Option(help: "Jobs running at once. [HERALD_WORKERS, default 8]") var workers: Int?
    @Option(help: "Uploads at once within one job. [HERALD_UPLOAD_CONCURRENCY, default 4]") var uploadConcurrency: Int?
    @Option(help: "Tries per upload for transient errors. [HERALD_UPLOAD_ATTEMPTS, default 3]") var uploadAttempts: Int?
    @Option(help: "Seconds per upload attempt. [HERALD_UPLOAD_TIMEOUT, default 60]") var uploadTimeout: Int?
    @Option(help: "Largest media body in bytes. [HERALD_MAX_MEDIA_BYTES, default 104857600]") var maxMediaBytes: Int?
    @Option(help: "Media per post. [HERALD_MAX_MEDIA_PER_POST, default 10]") var maxMediaPerPost: Int?
    @Option(help: "Seconds running jobs get on shutdown. [HERALD_SHUTDOWN_GRACE, default 20]") var shutdownGrace: Int?
    @Option(help: "trace, debug, info, notice, warning, error or critical. [HERALD_LOG_LEVEL, default info]") var logLevel: String?
    @Option(help: "text, or json for one JSON object a line. [HERALD_LOG_FORMAT, default text]") var logFormat: String?
    @Option(help: "libmicrohttpd polling threads, one status-read connection each. [HERALD_HTTP_THREADS, default 1]") var httpThreads: Int?
    @Option(help: "Open connections at most. [HERALD_MAX_CONNECTIONS, default 1000]") var maxConnections: Int?
    @Option(help: "Open connections per client address. [HERALD_MAX_CONNECTIONS_PER_IP, default 256]") var maxConnectionsPerIP: Int?
    @Option(help: "Idle seconds before a connection is closed. [HERALD_CONNECTION_TIMEOUT, default 30]") var connectionTimeout: Int?

    func run() async throws {
        let configuration = try resolve(Environment())
        LoggingSystem.bootstrap { label in
            var handler: any LogHandler =
                switch configuration.logFormat {
                case .text: StreamLogHandler.standardOutput(label: label)
                case .json: JSONLogHandler(label: label)
                }
            handler.logLevel = configuration.logLevel
            return handler
        }
        // Once per process, as logging: the routes, the server and the runner record into this registry.
        let metrics = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: metrics))
        var logger = Logger(label: "herald")
        logger.logLevel = configuration.logLevel
        let application = try Application.build(configuration: configuration, logger: logger, metrics: metrics)
        try await application.run()
    }

    /// Flags first, then the environment, then the contract's defaults.
    func resolve(_ environment: Environment) throws -> HeraldConfiguration {
        let defaults = HeraldConfiguration()
        let level = try logLevel ?? environment.string("HERALD_LOG_LEVEL")
        guard let logLevel = level.map({ Logger.Level(rawValue: $0.lowercased()) }) ?? defaults.logLevel else {
            throw ValidationError("log level '\(level ?? "")' is not one of trace, debug, info, notice, warning, error, critical")
        }
        let format = try logFormat ?? environment.string("HERALD_LOG_FORMAT")
        guard let logFormat = format.map({ LogFormat(name: $0) }) ?? defaults.logFormat else {
            throw ValidationError("log format '\(format ?? "")' is not one of \(LogFormat.names)")
        }
        let configuration = HeraldConfiguration(
            host: try host ?? environment.string("HERALD_HOST") ?? defaults.host,
            port: try port ?? environment.int("HERALD_PORT") ?? defaults.port,
            dataDirectory: try dataDir ?? environment.string("HERALD_DATA_DIR") ?? defaults.dataDirectory,
            store: try store ?? environment.string("HERALD_STORE"),
            publicBaseURL: try publicBaseURL ?? environment.string("HERALD_PUBLIC_BASE_URL"),
            storeCredentials: try environment.awsCredentials(),
            workers: try workers ?? environment.int("HERALD_WORKERS") ?? defaults.workers,
            uploadConcurrency: try uploadConcurrency ?? environment.int("HERALD_UPLOAD_CONCURRENCY") ?? defaults.uploadConcurrency,
            uploadAttempts: try uploadAttempts ?? environment.int("HERALD_UPLOAD_ATTEMPTS") ?? defaults.uploadAttempts,
            uploadTimeout: try uploadTimeout ?? environment.int("HERALD_UPLOAD_TIMEOUT") ?? defaults.uploadTimeout,
            maxMediaBytes: try maxMediaBytes ?? environment.int("HERALD_MAX_MEDIA_BYTES") ?? defaults.maxMediaBytes,
            maxMediaPerPost: try maxMediaPerPost ?? environment.int("HERALD_MAX_MEDIA_PER_POST") ?? defaults.maxMediaPerPost,
            shutdownGrace: try shutdownGrace ?? environment.int("HERALD_SHUTDOWN_GRACE") ?? defaults.shutdownGrace,
            logLevel: logLevel,
            logFormat: logFormat,
            httpThreads: try httpThreads ?? environment.int("HERALD_HTTP_THREADS") ?? defaults.httpThreads,
            maxConnections: try maxConnections ?? environment.int("HERALD_MAX_CONNECTIONS") ?? defaults.maxConnections,
            maxConnectionsPerIP: try maxConnectionsPerIP ?? environment.int("HERALD_MAX_CONNECTIONS_PER_IP") ?? defaults.maxConnectionsPerIP,
            connectionTimeout: try connectionTimeout ?? environment.int("HERALD_CONNECTION_TIMEOUT") ?? defaults.connectionTimeout
        )
        try validate(configuration)
        return configuration
    }

    private func validate(_ configuration: HeraldConfiguration) throws {
        let positive: [(String, Int)] = [
            ("workers", configuration.workers), ("upload-concurrency", configuration.uploadConcurrency),
            ("upload-attempts", configuration.uploadAttempts), ("upload-timeout", configuration.uploadTimeout),
            ("max-media-bytes", configuration.maxMediaBytes), ("max-media-per-post", configuration.maxMediaPerPost),
            ("http-threads", configuration.httpThreads), ("max-connections", configuration.maxConnections),
            ("max-connections-per-ip", configuration.maxConnectionsPerIP), ("connection-timeout", configuration.connectionTimeout),
        ]
        for (name, value) in positive where value < 1 { throw ValidationError("--\(name) must be at least 1, not \(value)") }
        guard (0...65535).contains(configuration.port) else { throw ValidationError("--port must be 0 to 65535") }
        guard configuration.shutdownGrace >= 0 else { throw ValidationError("--shutdown-grace must not be negative") }
    }
}

/// `herald healthcheck`: exit 0 when `/healthz` answers 200 (the container's HEALTHCHECK; no curl needed).
struct Healthcheck: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Exit 0 if the service answers GET /healthz with 200, else 1.")

    @Option(help: "URL to probe. [default http://127.0.0.1:$HERALD_PORT/healthz]") var url: String?
    @Option(help: "Seconds to wait for the answer.") var timeout: Int = 3

    func run() async throws {
        let port = (try? Environment().int("HERALD_PORT")) ?? nil
        let target = url ?? "http://127.0.0.1:\(port ?? 8080)/healthz"
        do {
            let response = try await HTTPClient.shared.execute(HTTPClientRequest(url: target), timeout: .seconds(Int64(timeout)))
            guard response.status == .ok else {
                print("unhealthy: \(target) answered \(response.status.code)")
                throw ExitCode(1)
            }
            print("healthy: \(target)")
        } catch let exit as ExitCode {
            throw exit
        } catch {
            print("unhealthy: \(target): \(error)")
            throw ExitCode(1)
        }
    }
}

/// The process environment, parsed with errors that name the variable.
struct Environment {
    let values = ProcessInfo.processInfo.environment

    func string(_ name: String) throws -> String? {
        guard let value = values[name], !value.isEmpty else { return nil }
        return value
    }

    /// The standard AWS variables, for an `s3://` store; `nil` unless both the key id and the secret are set.
    func awsCredentials() throws -> SigV4Signer.Credentials? {
        guard let id = try string("AWS_ACCESS_KEY_ID"), let secret = try string("AWS_SECRET_ACCESS_KEY") else { return nil }
        return SigV4Signer.Credentials(accessKeyID: id, secretAccessKey: secret, sessionToken: try string("AWS_SESSION_TOKEN"))
    }

    func int(_ name: String) throws -> Int? {
        guard let text = try string(name) else { return nil }
        guard let value = Int(text) else { throw ValidationError("\(name)='\(text)' is not an integer") }
        return value
    }
}
