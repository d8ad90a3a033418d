import Foundation
public import HeraldCore
public import HeraldStorage
public import Logging
public import MicroHTTP
import PostgresStorage
public import Prometheus
public import Publishing
import SQLiteStorage
public import ServiceLifecycle
public import Tracing
import UnixSignals

/// Herald assembled: storage opened and migrated, routes registered, services ready for a `ServiceGroup`.
///
/// `herald serve` and the tests build it the same way, through ``build(configuration:logger:metrics:store:onListening:)``.
public struct Application: Sendable {
    public let configuration: HeraldConfiguration
    /// The database: SQLite in the data directory, or PostgreSQL (`--database`).
    public let storage: any Storage
    public let server: Server
    public let runner: JobRunner
    /// Sends the webhook deliveries job endings write.
    public let dispatcher: WebhookDispatcher
    /// Deletes what failed and cancelled jobs left in the store (the durable second pass).
    public let cleaner: ObjectCleaner
    /// Where published media go: the one `--store` names, or the one the caller gave.
    public let store: any MediaStore
    /// In start order; a `ServiceGroup` shuts them down in reverse (the trace export last, with every span sent): readiness, the server, the runner, the webhook
    /// dispatcher (after the runner: the jobs that end during its grace still make deliveries), the sweeper, the key-use
    /// writer, the object clean-up (after the runner, whose uploads wait for its DELETEs), then the store (S3 only).
    public let services: [any Service]
    /// The `initial-admin` key made at this start because the database held no key (`--auth keys`): the caller
    /// prints it once. nil otherwise.
    public let initialKey: CreatedKey?
    /// The data directory's lock, held while the application lives.
    let lock: DataDirectoryLock
    /// Server-Sent Events streams (for tests that count them).
    let events: EventStreams
    /// The routes, for tests that call them without a socket.
    let router: Router
    let readiness: Readiness
    let logger: Logger

    /// Opens the database (applying migrations) and wires the HTTP server.
    ///
    /// - Parameters:
    ///   - metrics: the registry `/metrics` serves. The caller bootstraps `MetricsSystem` with it (once per
    ///     process, as logging), so the server's, the runner's and the routes' metrics land in it.
    ///   - onListening: called with the bound port once the server accepts connections.
    ///   - store: the media store; `nil` builds the one `configuration.store` names.
    public static func build(
        configuration: HeraldConfiguration,
        logger: Logger,
        metrics: PrometheusCollectorRegistry,
        store: (any MediaStore)? = nil,
        onListening: @escaping @Sendable (Int) async -> Void = { _ in }
    ) async throws -> Application {
        if configuration.auth == .off, !HeraldConfiguration.isLoopback(configuration.host) {
            throw ConfigurationError(
                "--auth off is refused on --host \(configuration.host): without keys, only a loopback address may listen")
        }
        let tls = try tlsFiles(configuration)
        // With PostgreSQL too, the data directory holds this replica's lock and its staged files.
        do {
            try FileManager.default.createDirectory(
                atPath: configuration.dataDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw ConfigurationError("--data-dir \(configuration.dataDirectory): \(error.localizedDescription)")
        }
        // Before anything that could fail after it: its exporter owns an HTTP client, shut down by its service.
        let traces = try configuration.otlpEndpoint.map {
            try TraceExport(
                endpoint: $0, replicaID: configuration.replicaID, version: HeraldConfiguration.version, delay: configuration.traceExportDelay,
                timeout: configuration.traceExportTimeout, logger: logger)
        }
        let (storage, storageServices) = try await openStorage(configuration, logger: logger)
        // One server per data directory: taken before anything runs, held as long as the application lives.
        let lock: DataDirectoryLock
        do {
            lock = try DataDirectoryLock(directory: configuration.dataDirectory)
        } catch {
            throw ConfigurationError("\(error)")
        }
        // Made last of what can fail: an S3 store owns an HTTP client, which must be shut down once made.
        let store = try store ?? makeStore(configuration, tracer: traces?.tracer, logger: logger)
        let cleaner = ObjectCleaner(deletions: storage.objectDeletions, store: store, logger: logger)
        let runner = JobRunner(
            jobs: storage.jobs,
            queue: storage.queue,
            store: store,
            cleaner: cleaner,
            changes: storage.changes,
            configuration: RunnerConfiguration(
                workers: configuration.workers,
                tenantCap: configuration.tenantConcurrency > 0 ? configuration.tenantConcurrency : nil,
                uploadConcurrency: configuration.uploadConcurrency,
                uploadAttempts: configuration.uploadAttempts,
                uploadTimeout: .seconds(configuration.uploadTimeout),
                shutdownGrace: .seconds(configuration.shutdownGrace),
                lease: .seconds(configuration.leaseTimeout),
                heartbeat: .seconds(configuration.leaseRenew),
                // Replicas take over each other's jobs once their leases end: look for them as often as leases are
                // renewed. Alone on SQLite, only a crash leaves an expired lease, and the restart takes it back.
                reclaimInterval: .seconds(configuration.database == nil ? 10 : configuration.leaseRenew),
                staging: configuration.stagedBytes,
                runnerID: configuration.replicaID,
                // On SQLite this process holds the lock: no other can be running the jobs a crash left `running`.
                reclaimAtStart: configuration.database == nil ? .everyJob : .ownJobs,
                tracer: traces?.tracer
            ),
            logger: logger
        )
        // SQLite's one replica counts from the start (its heartbeat is kept in memory); a PostgreSQL replica counts from
        // its runner's first heartbeat, once the pool runs.
        if storageServices.isEmpty {
            _ = try await storage.queue.heartbeat(
                replica: configuration.replicaID, workers: configuration.workers,
                until: Timestamp.now().adding(.seconds(configuration.leaseTimeout)))
        }
        let readiness = Readiness { runner.stopClaiming() }
        let staging = StagingArea(place: configuration.stagedBytes, store: store, minFreeBytes: configuration.minFreeDisk)
        // Under the lock, before anything serves: what a crash left mid-upload is of no use to anyone.
        let abandoned = staging.removeAbandonedUploads()
        if !abandoned.isEmpty { logger.notice("removed uploads a crash left unfinished", metadata: ["count": "\(abandoned.count)"]) }
        // The one process (SQLite): a hold on a resumable upload is a crash's, and the client resumes at once. Replicas'
        // holds end with their time (a replica's id is new at each start).
        if configuration.database == nil { try await storage.uploads.releaseHolds(prefix: nil) }
        var router = Router()

        // The trust boundary: keys, tenants, scopes and rate limits, before any route.
        let authenticator = Authenticator(keys: storage.keys, logger: logger)
        let keys = KeyService(keys: storage.keys) { authenticator.forget($0) }
        var initialKey: CreatedKey?
        let gate: AccessGate
        switch configuration.auth {
        case .keys:
            initialKey = try await keys.createInitialAdmin()
            gate = AccessGate(
                mode: .keys(authenticator), requestsPerSecond: configuration.rateLimit, failuresPerMinute: configuration.authFailureLimit)
        case .off:
            logger.warning("--auth off: every /v1/ call is accepted without a key, as tenant 'default' with every scope")
            gate = AccessGate(mode: .off, requestsPerSecond: 0, failuresPerMinute: 0)
        }
        router.gate = gate
        // With replicas, the limits are totals: each takes its share of them from the replicas alive.
        let shares: [any Service] =
            storageServices.isEmpty
            ? [] : [LimitShare(queue: storage.queue, gate: gate, interval: .seconds(configuration.leaseRenew), logger: logger)]
        KeyRoutes(service: keys).register(in: &router)
        let sweeper = Sweeper(
            media: storage.media, uploads: storage.uploads, posts: storage.posts, webhooks: storage.webhooks, staging: staging,
            stagedMediaTTL: configuration.stagedMediaTTL, logger: logger)
        let dispatcher = WebhookDispatcher(
            webhooks: storage.webhooks, changes: storage.changes,
            configuration: WebhookConfiguration(
                timeout: .seconds(configuration.webhookTimeout), attempts: configuration.webhookAttempts,
                allowPrivate: configuration.webhookAllowPrivate, retry: .webhookDeliveries(base: configuration.webhookRetryBase),
                shutdownGrace: .seconds(configuration.shutdownGrace), tls: configuration.webhookTLS, replica: configuration.replicaID,
                isSoleProcess: configuration.database == nil, tracer: traces?.tracer),
            resolver: configuration.webhookResolver, version: HeraldConfiguration.version, logger: logger)
        WebhookRoutes(
            service: WebhookService(
                webhooks: storage.webhooks, resolver: configuration.webhookResolver, allowPrivate: configuration.webhookAllowPrivate)
        ).register(in: &router)
        OperationsRoutes(storage: storage, store: store, jobs: storage.jobs, readiness: readiness, registry: metrics)
            .register(in: &router)
        DashboardRoutes().register(in: &router)
        MediaRoutes(service: MediaService(media: storage.media, staging: staging), maxMediaBytes: configuration.maxMediaBytes)
            .register(in: &router)
        UploadRoutes(
            service: UploadService(
                uploads: storage.uploads, media: storage.media, staging: staging, sessions: UploadSessions(),
                maxMediaBytes: configuration.maxMediaBytes, ttl: configuration.stagedMediaTTL, replica: configuration.replicaID)
        ).register(in: &router)
        // The way a publish takes: route -> service -> repository -> (the runner claims the job) -> media store.
        PostRoutes(
            service: PostService(
                posts: storage.posts, staging: staging, maxMediaPerPost: configuration.maxMediaPerPost, store: store, logger: logger),
            maxMediaBytes: configuration.maxMediaBytes
        ).register(in: &router)
        let events = EventStreams(
            jobs: storage.jobs, changes: storage.changes, progress: storage.uploadProgress, readiness: readiness,
            limit: StreamLimit(maximum: configuration.maxStreams), keepAlive: configuration.eventKeepAlive)
        JobRoutes(
            service: JobService(
                jobs: storage.jobs,
                // One connection per HTTP thread (plain polls) and per thread of Swift's pool (long-polls' reads).
                status: try storage.statusReader(connections: configuration.httpThreads + ProcessInfo.processInfo.activeProcessorCount),
                changes: storage.changes,
                readiness: readiness
            ),
            events: events
        ).register(in: &router)
        QueueRoutes(service: QueueService(jobs: storage.jobs, queue: storage.queue)).register(in: &router)

        let server = Server(
            router: router,
            configuration: ServerConfiguration(
                host: configuration.host,
                port: configuration.port,
                threads: configuration.httpThreads,
                connectionLimit: configuration.maxConnections,
                perIPConnectionLimit: configuration.maxConnectionsPerIP,
                connectionTimeout: configuration.connectionTimeout,
                tls: tls,
                trustedProxies: TrustedProxies(configuration.trustedProxies),
                // Request lines in the log's format, buffered off the HTTP thread; none below `info`.
                accessLog: configuration.logLevel <= .info
                    ? AccessLog(format: configuration.logFormat == .json ? .json : .text, label: logger.label) : nil,
                tracer: traces?.tracer
            ),
            logger: logger,
            onListening: onListening
        )
        // A store with work of its own (the S3 client) stops last, once the runner no longer uploads.
        let storeServices: [any Service] = (store as? any Service).map { [$0] } ?? []
        return Application(
            configuration: configuration,
            storage: storage,
            server: server,
            runner: runner,
            dispatcher: dispatcher,
            cleaner: cleaner,
            store: store,
            services: (traces.map { [$0.service] } ?? []) + storageServices + storeServices + shares
                + [cleaner, authenticator, sweeper, dispatcher, runner, server, readiness],
            initialKey: initialKey,
            lock: lock,
            events: events,
            router: router,
            readiness: readiness,
            logger: logger
        )
    }

    /// The database `configuration` names (`--database`, else SQLite in the data directory), migrated and served
    /// while `body` runs: for the commands that work on it without serving (`herald keys`, `herald check`).
    public static func withStorage<T: Sendable>(
        _ configuration: HeraldConfiguration, logger: Logger, _ body: (any Storage) async throws -> T
    ) async throws -> T {
        let (storage, services) = try await openStorage(configuration, logger: logger)
        return try await withThrowingTaskGroup(of: Void.self) { group in
            for service in services { group.addTask { try await service.run() } }
            defer { group.cancelAll() }
            return try await body(storage)
        }
    }

    /// The database `--database` names, migrated, and the services it needs run (PostgreSQL's pool and listener,
    /// first in the group so that they stop last); SQLite in the data directory without it.
    static func openStorage(_ configuration: HeraldConfiguration, logger: Logger) async throws -> (any Storage, [any Service]) {
        guard let database = configuration.database else {
            return (try SQLiteStorage.open(directory: configuration.dataDirectory, logger: logger), [])
        }
        let url: DatabaseURL
        do {
            url = try DatabaseURL(parsing: database)
        } catch {
            throw ConfigurationError(error.description)
        }
        do {
            let storage = try await PostgresStorage.open(
                url: url, pool: configuration.databasePool, logger: logger, timeout: configuration.databaseStartTimeout)
            logger.info("database ready", metadata: ["database": "\(url)"])
            return (storage, [storage])
        } catch let error as PostgresStartError {
            throw ConfigurationError("--database \(url): \(error)")
        }
    }

    /// The PEM texts `--tls-cert` and `--tls-key` name: both or neither.
    static func tlsFiles(_ configuration: HeraldConfiguration) throws -> ServerConfiguration.TLS? {
        switch (configuration.tlsCertificatePath, configuration.tlsKeyPath) {
        case (nil, nil):
            return nil
        case (let certificate?, let key?):
            func read(_ path: String, _ flag: String) throws -> String {
                guard let text = try? String(contentsOfFile: path, encoding: .utf8), text.contains("-----BEGIN ") else {
                    throw ConfigurationError("\(flag) \(path): not a readable PEM file")
                }
                return text
            }
            return ServerConfiguration.TLS(certificateChain: try read(certificate, "--tls-cert"), privateKey: try read(key, "--tls-key"))
        default:
            throw ConfigurationError("--tls-cert and --tls-key go together: give both for HTTPS, or neither")
        }
    }

    /// The media store `--store` names: `file://PATH` (default `<data-dir>/objects`) or `s3://BUCKET?endpoint=…&region=…`.
    public static func makeStore(_ configuration: HeraldConfiguration, tracer: (any Tracer)? = nil, logger: Logger) throws -> any MediaStore {
        let spec = configuration.store ?? "file://\(configuration.dataDirectory)/objects"
        if spec.hasPrefix("file://") {
            return FileMediaStore(root: String(spec.dropFirst("file://".count)), publicBaseURL: configuration.publicBaseURL)
        }
        guard spec.hasPrefix("s3://") else {
            throw ConfigurationError("--store '\(spec)' is neither file://PATH nor s3://BUCKET?endpoint=URL&region=REGION")
        }
        guard let credentials = configuration.storeCredentials else {
            throw ConfigurationError("--store \(spec) needs AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment")
        }
        do {
            let s3 = try S3Configuration(url: spec, credentials: credentials, publicBaseURL: configuration.publicBaseURL)
            return S3MediaStore(
                configuration: s3,
                // Every upload that may run at once, plus room for clean-up deletes.
                maxConnections: configuration.workers * configuration.uploadConcurrency + 4,
                tracer: tracer,
                logger: logger
            )
        } catch {
            throw ConfigurationError("--store: \(error)")
        }
    }

    /// Runs every service until SIGTERM or SIGINT, then shuts down gracefully.
    public func run() async throws {
        let group = ServiceGroup(
            configuration: .init(services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        )
        try await group.run()
    }
}

/// A configuration value Herald cannot work with.
public struct ConfigurationError: Error, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}
