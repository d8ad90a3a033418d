public import Logging
public import ServiceLifecycle

/// The HTTP server as a `Service`: libmicrohttpd accepts and parses, handlers run in Swift concurrency.
///
/// On graceful shutdown it stops accepting (`MHD_quiesce_daemon`), lets requests in flight finish, then stops.
/// Cancelled instead, it cancels the handlers in flight first.
public actor Server: Service {
    private enum State {
        case idle
        case running(port: Int)
        case stopped
    }

    private let router: Router
    private let configuration: ServerConfiguration
    private let logger: Logger
    private let onListening: @Sendable (Int) async -> Void
    private var state = State.idle

    /// - Parameters:
    ///   - onListening: called with the bound port once the server accepts connections (port 0 binds a free one).
    public init(
        router: Router,
        configuration: ServerConfiguration = ServerConfiguration(),
        logger: Logger = Logger(label: "MicroHTTP"),
        onListening: @escaping @Sendable (Int) async -> Void = { _ in }
    ) {
        self.router = router
        self.configuration = configuration
        self.logger = logger
        self.onListening = onListening
    }

    /// The bound port while running.
    public var port: Int? {
        if case .running(let port) = state { return port }
        return nil
    }

    public func run() async throws {
        guard case .idle = state else { throw ServerError.alreadyRunning }
        let daemon = try Daemon.start(router: router, configuration: configuration, logger: logger)
        state = .running(port: daemon.port)
        let host = configuration.host.contains(":") ? "[\(configuration.host)]" : configuration.host
        logger.notice("listening on \(configuration.tls == nil ? "http" : "https")://\(host):\(daemon.port)")
        await onListening(daemon.port)
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await daemon.connections.closeOverdueUntilCancelled() }
            if let accessLog = configuration.accessLog { group.addTask { await accessLog.flushUntilCancelled() } }
            // Returns on graceful shutdown; throws when cancelled, and then in-flight handlers are cancelled too.
            try? await gracefulShutdown()
            group.cancelAll()
        }
        logger.info("stopping: no new connections; waiting for requests in flight")
        await daemon.shutdown()
        // The lines of the requests that finished while draining.
        configuration.accessLog?.flush()
        state = .stopped
        logger.info("stopped")
    }
}
