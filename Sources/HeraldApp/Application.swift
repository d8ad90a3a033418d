import CoreMetrics
public import HeraldStorage
public import Logging
public import MicroHTTP
import Prometheus
public import Publishing
public import ServiceLifecycle
import UnixSignals

/// Herald assembled: storage opened and migrated, routes registered, services ready for a `ServiceGroup`.
///
/// `herald serve` and the tests build it the same way, through ``build(configuration:logger:onListening:)``.
public struct Application: Sendable {
    public let configuration: HeraldConfiguration
    public let storage: Storage
    public let server: Server
    public let runner: JobRunner
    /// In start order; a `ServiceGroup` shuts them down in reverse: readiness first, then the server, then the runner.
    public let services: [any Service]
    /// The routes, for tests that call them without a socket.
    let router: Router
    let readiness: Readiness
    let logger: Logger

    /// Opens the database (applying migrations) and wires the HTTP server.
    ///
    /// - Parameters:
    ///   - onListening: called with the bound port once the server accepts connections.
    ///   - store: the media store; `nil` builds the one `configuration.store` names.
    public static func build(
        configuration: HeraldConfiguration,
        logger: Logger,
        store: (any MediaStore)? = nil,
        onListening: @escaping @Sendable (Int) async -> Void = { _ in }
    ) throws -> Application {
        let storage = try Storage.open(directory: configuration.dataDirectory, logger: logger)
        let events = JobEvents()
        let runner = JobRunner(
            jobs: JobRepository(storage),
            store: try store ?? makeStore(configuration),
            events: events,
            configuration: RunnerConfiguration(
                workers: configuration.workers,
                uploadConcurrency: configuration.uploadConcurrency,
                uploadAttempts: configuration.uploadAttempts,
                uploadTimeout: .seconds(configuration.uploadTimeout),
                shutdownGrace: .seconds(configuration.shutdownGrace),
                dataDirectory: configuration.dataDirectory
            ),
            logger: logger
        )
        let readiness = Readiness { runner.stopClaiming() }
        var router = Router()
        OperationsRoutes(storage: storage, jobs: JobRepository(storage), readiness: readiness, registry: Metrics.registry)
            .register(in: &router)
        MediaRoutes(
            repository: MediaRepository(storage),
            staging: StagingArea(dataDirectory: configuration.dataDirectory),
            maxMediaBytes: configuration.maxMediaBytes
        ).register(in: &router)
        PostRoutes(
            posts: PostRepository(storage),
            media: MediaRepository(storage),
            staging: StagingArea(dataDirectory: configuration.dataDirectory),
            runner: runner,
            maxMediaBytes: configuration.maxMediaBytes,
            maxMediaPerPost: configuration.maxMediaPerPost
        ).register(in: &router)
        JobRoutes(jobs: JobRepository(storage), runner: runner, events: events, readiness: readiness).register(in: &router)
        QueueRoutes(jobs: JobRepository(storage), runner: runner).register(in: &router)

        let server = Server(
            router: router,
            configuration: ServerConfiguration(
                host: configuration.host,
                port: configuration.port,
                threads: configuration.httpThreads,
                connectionLimit: configuration.maxConnections,
                perIPConnectionLimit: configuration.maxConnectionsPerIP,
                connectionTimeout: configuration.connectionTimeout,
                serverName: "herald"
            ),
            logger: logger,
            onListening: onListening
        )
        return Application(
            configuration: configuration,
            storage: storage,
            server: server,
            runner: runner,
            services: [runner, server, readiness],
            router: router,
            readiness: readiness,
            logger: logger
        )
    }

    /// The media store `--store` names: `file://PATH` (default `<data-dir>/objects`); S3 comes with its own issue.
    static func makeStore(_ configuration: HeraldConfiguration) throws -> any MediaStore {
        let spec = configuration.store ?? "file://\(configuration.dataDirectory)/objects"
        guard spec.hasPrefix("file://") else {
            throw ConfigurationError("--store '\(spec)' is not supported yet: use file://PATH")
        }
        return FileMediaStore(root: String(spec.dropFirst("file://".count)), publicBaseURL: configuration.publicBaseURL)
    }

    /// Runs every service until SIGTERM or SIGINT, then shuts down gracefully.
    public func run() async throws {
        let group = ServiceGroup(
            configuration: .init(services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        )
        try await group.run()
    }
}

/// The process-wide Prometheus registry behind swift-metrics (bootstrapped once, on first use).
enum Metrics {
    static let registry: PrometheusCollectorRegistry = {
        let registry = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
        return registry
    }()
}

/// A configuration value Herald cannot work with.
public struct ConfigurationError: Error, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}
