import ArgumentParser
import AsyncHTTPClient
import CoreMetrics
import Foundation
import HeraldApp
import HeraldCore
import Logging
import MicroHTTP
import NIOCore
import NIOHTTP1
import NIOSSL
import Prometheus
import Publishing

@main
struct HeraldCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "herald",
        abstract: "Herald: uploads media and publishes posts, each publish a job you can watch and cancel.",
        version: HeraldConfiguration.version,
        subcommands: [Serve.self, Publish.self, Jobs.self, Posts.self, Keys.self, Backup.self, Check.self, Healthcheck.self],
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
    @Option(help: "libmicrohttpd polling threads. [HERALD_HTTP_THREADS, default 1]") var httpThreads: Int?
    @Option(help: "Open connections at most; past it an idle one is closed for a new one. [HERALD_MAX_CONNECTIONS, default 1000]")
    var maxConnections: Int?
    @Option(help: "Open connections per client address. [HERALD_MAX_CONNECTIONS_PER_IP, default 256]") var maxConnectionsPerIP: Int?
    @Option(help: "Idle seconds before a connection is closed; also the time a whole head may take. [HERALD_CONNECTION_TIMEOUT, default 30]")
    var connectionTimeout: Int?
    @Option(help: "keys: /v1/ calls need an API key; off: none (loopback hosts only). [HERALD_AUTH, default keys]") var auth: String?
    @Option(help: "Requests a second per key, burst twice that; 0: no limit. [HERALD_RATE_LIMIT, default 100]") var rateLimit: Int?
    @Option(help: "Failed authentications a minute per client address; 0: no limit. [HERALD_AUTH_FAILURE_LIMIT, default 20]")
    var authFailureLimit: Int?
    @Option(name: .customLong("tls-cert"), help: "PEM certificate chain: serve HTTPS (with --tls-key). [HERALD_TLS_CERT]") var tlsCert: String?
    @Option(name: .customLong("tls-key"), help: "PEM private key of --tls-cert. [HERALD_TLS_KEY]") var tlsKey: String?
    @Option(help: "Comma-separated CIDRs of proxies whose X-Forwarded-For names the client. [HERALD_TRUSTED_PROXIES]")
    var trustedProxies: String?
    @Option(help: "Seconds an uploaded medium that no post uses is kept. [HERALD_STAGED_MEDIA_TTL, default 86400]") var stagedMediaTTL: Int?
    @Option(help: "Bytes kept free on the data directory's disk; uploads that would use them get 507. [HERALD_MIN_FREE_DISK, default 1073741824]")
    var minFreeDisk: Int?
    @Option(help: "Server-Sent Events streams open at once; more get 503. [HERALD_MAX_STREAMS, default 500]") var maxStreams: Int?
    @Option(help: "Seconds a webhook attempt may take; a 2xx within it delivers. [HERALD_WEBHOOK_TIMEOUT, default 10]")
    var webhookTimeout: Int?
    @Option(help: "Attempts before a webhook delivery fails for good. [HERALD_WEBHOOK_ATTEMPTS, default 8]") var webhookAttempts: Int?
    @Flag(help: "Let webhook URLs reach loopback, private and link-local addresses. [HERALD_WEBHOOK_ALLOW_PRIVATE=1]")
    var webhookAllowPrivate = false

    func run() async throws {
        let configuration = try resolve(Environment())
        // A file-size limit (RLIMIT_FSIZE) reached while staging is then EFBIG, answered 507, not a signal that kills.
        signal(SIGXFSZ, SIG_IGN)
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
        let application: Application
        do {
            application = try Application.build(configuration: configuration, logger: logger, metrics: metrics)
        } catch let error as ConfigurationError {
            FileHandle.standardError.write(Data("herald: \(error)\n".utf8))
            throw ExitCode(2)
        }
        if let key = application.initialKey { announce(key, format: configuration.logFormat) }
        try await application.run()
    }

    /// The one log line that holds a key: the initial admin key, on stderr whatever the log level, shown this once.
    ///
    /// Written by the handler `--log-format` names, on stderr and at `notice` whatever `--log-level` says.
    private func announce(_ created: CreatedKey, format: LogFormat) {
        var handler: any LogHandler =
            switch format {
            case .text: StreamLogHandler.standardError(label: "herald")
            case .json: JSONLogHandler(label: "herald", output: LineWriter(descriptor: STDERR_FILENO))
            }
        handler.logLevel = .notice
        Logger(label: "herald") { _ in handler }.notice(
            "initial admin key (shown once; keep it): \(created.secret) ; make more with `herald keys create --name NAME` or POST /v1/keys",
            metadata: ["key_id": "\(created.key.id)"])
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
        let authName = try auth ?? environment.string("HERALD_AUTH")
        guard let authMode = authName.map({ AuthMode(rawValue: $0.lowercased()) }) ?? defaults.auth else {
            throw ValidationError("auth '\(authName ?? "")' is not one of \(AuthMode.names)")
        }
        let proxies = try (trustedProxies ?? environment.string("HERALD_TRUSTED_PROXIES")).map { list in
            try list.split(separator: ",").map { item in
                let text = item.trimmingCharacters(in: .whitespaces)
                guard let range = AddressRange(text) else { throw ValidationError("trusted proxy '\(text)' is not an address or CIDR") }
                return range
            }
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
            connectionTimeout: try connectionTimeout ?? environment.int("HERALD_CONNECTION_TIMEOUT") ?? defaults.connectionTimeout,
            auth: authMode,
            rateLimit: try rateLimit ?? environment.int("HERALD_RATE_LIMIT") ?? defaults.rateLimit,
            authFailureLimit: try authFailureLimit ?? environment.int("HERALD_AUTH_FAILURE_LIMIT") ?? defaults.authFailureLimit,
            tlsCertificatePath: try tlsCert ?? environment.string("HERALD_TLS_CERT"),
            tlsKeyPath: try tlsKey ?? environment.string("HERALD_TLS_KEY"),
            trustedProxies: proxies ?? defaults.trustedProxies,
            stagedMediaTTL: try stagedMediaTTL ?? environment.int("HERALD_STAGED_MEDIA_TTL") ?? defaults.stagedMediaTTL,
            minFreeDisk: try minFreeDisk ?? environment.int("HERALD_MIN_FREE_DISK") ?? defaults.minFreeDisk,
            maxStreams: try maxStreams ?? environment.int("HERALD_MAX_STREAMS") ?? defaults.maxStreams,
            webhookTimeout: try webhookTimeout ?? environment.int("HERALD_WEBHOOK_TIMEOUT") ?? defaults.webhookTimeout,
            webhookAttempts: try webhookAttempts ?? environment.int("HERALD_WEBHOOK_ATTEMPTS") ?? defaults.webhookAttempts,
            webhookAllowPrivate: try webhookAllowPrivate || environment.bool("HERALD_WEBHOOK_ALLOW_PRIVATE") ?? defaults.webhookAllowPrivate
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
            ("max-streams", configuration.maxStreams), ("webhook-timeout", configuration.webhookTimeout),
            ("webhook-attempts", configuration.webhookAttempts),
        ]
        for (name, value) in positive where value < 1 { throw ValidationError("--\(name) must be at least 1, not \(value)") }
        guard (0...65535).contains(configuration.port) else { throw ValidationError("--port must be 0 to 65535") }
        guard configuration.shutdownGrace >= 0 else { throw ValidationError("--shutdown-grace must not be negative") }
        guard configuration.rateLimit >= 0 else { throw ValidationError("--rate-limit must not be negative (0: no limit)") }
        guard configuration.stagedMediaTTL >= 1 else { throw ValidationError("--staged-media-ttl must be at least 1 second") }
        guard configuration.minFreeDisk >= 0 else { throw ValidationError("--min-free-disk must not be negative") }
        guard configuration.authFailureLimit >= 0 else { throw ValidationError("--auth-failure-limit must not be negative (0: no limit)") }
    }
}

/// `herald healthcheck`: exit 0 when `/healthz` answers 200 (the container's HEALTHCHECK; no curl needed).
struct Healthcheck: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Exit 0 if the service answers GET /healthz with 200, else 1.")

    @Option(help: "URL to probe. [default http(s)://127.0.0.1:$HERALD_PORT/healthz: https when HERALD_TLS_CERT is set]") var url: String?
    @Option(help: "Seconds to wait for the answer.") var timeout: Int = 3

    func run() async throws {
        let environment = Environment()
        let port = (try? environment.int("HERALD_PORT")) ?? nil
        let tls = ((try? environment.string("HERALD_TLS_CERT")) ?? nil) != nil
        let target = url ?? "\(tls ? "https" : "http")://127.0.0.1:\(port ?? 8080)/healthz"
        // The probe asks this machine's own server whether it lives: its certificate names the public host, not
        // 127.0.0.1, so it is not verified here (nothing secret is sent).
        var configuration = HTTPClient.Configuration()
        var tlsConfiguration = TLSConfiguration.makeClientConfiguration()
        tlsConfiguration.certificateVerification = .none
        configuration.tlsConfiguration = tlsConfiguration
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        let verdict: String?
        do {
            let response = try await client.execute(HTTPClientRequest(url: target), timeout: .seconds(Int64(timeout)))
            verdict = response.status == .ok ? nil : "answered \(response.status.code)"
        } catch {
            verdict = "\(error)"
        }
        try? await client.shutdown()
        guard let verdict else {
            print("healthy: \(target)")
            return
        }
        print("unhealthy: \(target): \(verdict)")
        throw ExitCode(1)
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

    /// `1`, `true`, `yes`, `on` or their opposites, in any case.
    func bool(_ name: String) throws -> Bool? {
        guard let text = try string(name) else { return nil }
        switch text.lowercased() {
        case "1", "true", "yes", "on": return true
        case "0", "false", "no", "off": return false
        default: throw ValidationError("\(name)='\(text)' is not 1/true/yes/on or 0/false/no/off")
        }
    }

    func int(_ name: String) throws -> Int? {
        guard let text = try string(name) else { return nil }
        guard let value = Int(text) else { throw ValidationError("\(name)='\(text)' is not an integer") }
        return value
    }
}
