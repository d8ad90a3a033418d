import AsyncHTTPClient
import Foundation
import HeraldCore
import HeraldStorage
import Logging
import Metrics
import NIOCore
import NIOHTTP1
public import NIOSSL
import Publishing
import ServiceLifecycle
import Synchronization
import Telemetry
public import Tracing

/// How webhooks are delivered: `--webhook-timeout`, `--webhook-attempts`, `--webhook-allow-private`, and the rest.
public struct WebhookConfiguration: Sendable {
    /// One attempt's limit, connecting included: a 2xx within it delivers.
    public var timeout: Duration
    /// Attempts before a delivery is `failed`.
    public var attempts: Int
    /// Whether loopback, private and link-local addresses may be reached.
    public var allowPrivate: Bool
    /// How long a failed delivery waits before its next attempt (``RetryStrategy/webhookDeliveries(base:)``).
    public var retry: RetryStrategy
    /// Attempts in flight at once.
    public var concurrency: Int
    /// How long in-flight attempts may go on once shutdown starts; then they are cancelled (and sent again at the
    /// next start).
    public var shutdownGrace: Duration
    /// TLS for https endpoints; nil: async-http-client's default (the system's trust roots, full verification).
    public var tls: TLSConfiguration?
    /// The name this process claims deliveries under (`--replica-id`).
    public var replica: String
    /// Whether this is the only process on the database (SQLite): at start it takes back every claim, not only its own.
    public var isSoleProcess: Bool
    /// Traces each attempt as a client span when set; nil costs nothing.
    public var tracer: (any Tracer)?

    /// What `herald serve`'s options set has no default here (their defaults are `HeraldConfiguration`'s).
    public init(
        timeout: Duration, attempts: Int, allowPrivate: Bool, retry: RetryStrategy, concurrency: Int = 16, shutdownGrace: Duration,
        tls: TLSConfiguration? = nil, replica: String = "herald", isSoleProcess: Bool = true, tracer: (any Tracer)? = nil
    ) {
        self.tracer = tracer
        self.timeout = timeout
        self.attempts = attempts
        self.allowPrivate = allowPrivate
        self.retry = retry
        self.concurrency = concurrency
        self.shutdownGrace = shutdownGrace
        self.tls = tls
        self.replica = replica
        self.isSoleProcess = isSoleProcess
    }
}

/// Sends the webhook deliveries the outbox holds: a `Service` that wakes when a job's end wrote deliveries, when an
/// attempt finishes, and when the next retry is due; never on a polling timer. Its loop is the ``WorkLoop``, over
/// the outbox (``DeliveryQueue``).
///
/// Each attempt resolves the endpoint's host again and checks every address (``WebhookTarget``), then connects to
/// the checked address: http through one shared client, the URL's host replaced by the address and kept in `Host`;
/// https through a client made for the attempt whose `dnsOverride` maps the host to the address, so the TLS server
/// name and certificate check stay the host's. Redirects are not followed.
public final class WebhookDispatcher: Service, Sendable {
    private let queue: DeliveryQueue
    private let loop: WorkLoop<DeliveryQueue>
    private let logger: Logger

    init(
        webhooks: any WebhookRepository, changes: JobChanges, configuration: WebhookConfiguration, resolver: any HostResolver,
        version: String, logger: Logger
    ) {
        let queue = DeliveryQueue(webhooks: webhooks, configuration: configuration, resolver: resolver, version: version, logger: logger)
        let loop = WorkLoop(
            queue: queue,
            // Woken by every event that can make a delivery due, and by the next retry's time: the idle sleep is long.
            configuration: .init(concurrency: configuration.concurrency, idle: .seconds(3600), shutdownGrace: configuration.shutdownGrace),
            logger: logger)
        self.queue = queue
        self.loop = loop
        self.logger = logger
        // A job's end wrote deliveries in its transaction (jobs of tenants without webhooks wake nothing).
        changes.observeDeliveries { loop.wake() }
    }

    /// Calls `observer` after each attempt is recorded, with what it came to (metrics, tests).
    public func observe(_ observer: @escaping @Sendable (DeliveryID, DeliveryOutcome) -> Void) {
        queue.observers.withLock { $0.append(observer) }
    }

    public func run() async throws {
        // Attempts still running when the grace ends are cancelled, not recorded: the next start sends them again.
        await withGracefulShutdownHandler {
            await loop.run()
        } onGracefulShutdown: {
            self.loop.stopClaiming()
        }
        try? await queue.client.shutdown()
        logger.info("webhook dispatcher stopped")
    }
}

/// The outbox as a ``WorkQueue``: pending deliveries by due time, those in hand left out; one attempt each.
final class DeliveryQueue: WorkQueue {
    private let webhooks: any WebhookRepository
    private let configuration: WebhookConfiguration
    private let resolver: any HostResolver
    private let logger: Logger
    let client: HTTPClient
    let observers = Mutex([@Sendable (DeliveryID, DeliveryOutcome) -> Void]())
    private let userAgent: String
    private let claimsReleased = Atomic(false)

    init(webhooks: any WebhookRepository, configuration: WebhookConfiguration, resolver: any HostResolver, version: String, logger: Logger) {
        self.webhooks = webhooks
        self.configuration = configuration
        self.resolver = resolver
        self.logger = logger
        self.userAgent = "herald/\(version)"
        self.client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: Self.clientConfiguration(configuration, dnsOverride: [:]))
    }

    func id(of item: PendingDelivery) -> DeliveryID { item.id }

    /// At the first pass, the claims a crash of this process left go back: their deliveries are sent again at once.
    func prepare(now: Timestamp) async throws {
        guard !claimsReleased.load(ordering: .relaxed) else { return }
        let released = try await webhooks.releaseClaims(heldBy: configuration.isSoleProcess ? nil : configuration.replica, now: now)
        claimsReleased.store(true, ordering: .relaxed)
        if released > 0 { logger.notice("deliveries claimed before a restart are due again", metadata: ["count": "\(released)"]) }
    }

    /// Claimed until the attempt has surely ended (its timeout, twice, and some): in hand here, not due elsewhere.
    func claim(upTo limit: Int, inHand: Set<DeliveryID>, now: Timestamp) async throws -> [PendingDelivery] {
        try await webhooks.claimDue(
            now: now, leaseUntil: now.adding(configuration.timeout * 2 + .seconds(10)), limit: limit, by: configuration.replica)
    }

    func nextDue(inHand: Set<DeliveryID>) async throws -> Timestamp? {
        try await webhooks.nextDue()
    }

    func work(_ delivery: PendingDelivery, control: WorkControl) async {
        await attempt(delivery)
    }

    private static func clientConfiguration(_ configuration: WebhookConfiguration, dnsOverride: [String: String]) -> HTTPClient.Configuration {
        var client = HTTPClient.Configuration(
            redirectConfiguration: .disallow,
            timeout: .init(connect: TimeAmount(configuration.timeout)),
            decompression: .disabled)
        client.dnsOverride = dnsOverride
        if let tls = configuration.tls { client.tlsConfiguration = tls }
        client.httpVersion = .http1Only
        return client
    }

    // MARK: One attempt

    private func attempt(_ delivery: PendingDelivery) async {
        if delivery.endpointDisabled {
            try? await webhooks.abandon(delivery.id, reason: "the endpoint is disabled: it answered 410 Gone")
            return
        }
        let started = ContinuousClock.now
        let outcome: DeliveryOutcome
        do {
            outcome = try await send(delivery)
        } catch is CancellationError {
            // Shutdown ran out of grace: not recorded, so the next start sends it again (at least once).
            return
        } catch {
            logger.error("webhook attempt error", metadata: ["delivery_id": "\(delivery.id)", "error": "\(error)"])
            return
        }
        Timer(label: "herald_webhook_attempt_duration_seconds").record(duration: ContinuousClock.now - started)
        let label: String
        switch outcome {
        case .delivered: label = "delivered"
        case .retry: label = "retried"
        case .failed: label = "failed"
        }
        Counter(label: "herald_webhook_attempts_total", dimensions: [("outcome", label)]).increment()
        if case .failed(let status, let error, _) = outcome {
            logger.notice(
                "webhook delivery failed",
                metadata: [
                    "delivery_id": "\(delivery.id)", "webhook_id": "\(delivery.webhookID)", "status": "\(status.map(String.init) ?? "none")",
                    "error": "\(error)",
                ])
        }
        do {
            try await webhooks.record(delivery.id, outcome, now: .now())
        } catch {
            logger.error("cannot record a webhook attempt", metadata: ["delivery_id": "\(delivery.id)", "error": "\(error)"])
            return
        }
        for observer in observers.withLock({ $0 }) { observer(delivery.id, outcome) }
    }

    /// Resolves, checks, signs and sends; what came of it. Throws only `CancellationError` (and database errors).
    private func send(_ delivery: PendingDelivery) async throws -> DeliveryOutcome {
        let attempt = delivery.attempts + 1
        func notDelivered(_ status: Int?, _ error: String) -> DeliveryOutcome {
            attempt >= configuration.attempts
                ? .failed(statusCode: status, error: error, disable: false)
                : .retry(statusCode: status, error: error, next: Timestamp.now().adding(configuration.retry.delay(after: attempt)))
        }
        let target: WebhookTarget
        do {
            target = try await WebhookTarget.resolve(delivery.url, resolver: resolver, allowPrivate: configuration.allowPrivate)
        } catch .refused(let reason) {
            // Not retried: the endpoint points where webhooks may not go.
            return .failed(statusCode: nil, error: "refused: \(reason)", disable: false)
        } catch {
            try Task.checkCancellation()
            return notDelivered(nil, error.description)
        }
        let timestamp = Int(Date().timeIntervalSince1970)
        guard let signature = WebhookSignature.sign(id: delivery.eventID, timestamp: timestamp, body: delivery.body, secret: delivery.secret)
        else { return .failed(statusCode: nil, error: "the endpoint's secret is not whsec_ and base64", disable: false) }
        var request = HTTPClientRequest(url: target.requestURL)
        request.method = .POST
        request.headers = [
            "Host": target.authority, "Content-Type": "application/json", "User-Agent": userAgent, "webhook-id": delivery.eventID,
            "webhook-timestamp": String(timestamp), "webhook-signature": signature,
        ]
        request.body = .bytes(ByteBuffer(bytes: delivery.body))
        let span = configuration.tracer.map { Self.startSpan(of: delivery, attempt: attempt, tracer: $0) }
        for (name, value) in span?.headers ?? [] { request.headers.add(name: name, value: value) }
        do {
            let status = try await execute(request, target: target)
            span?.end(status: status)
            switch status {
            case 200..<300: return .delivered(statusCode: status)
            case 410: return .failed(statusCode: 410, error: "410 Gone: the endpoint is disabled", disable: true)
            case 300..<400: return notDelivered(status, "HTTP \(status): redirects are not followed")
            default: return notDelivered(status, "HTTP \(status)")
            }
        } catch {
            span?.end(error: error)
            try Task.checkCancellation()
            return notDelivered(nil, Self.describe(error))
        }
    }

    /// The span of one attempt: a client span of its own trace, linked to the request that made the job the event ends.
    private static func startSpan(of delivery: PendingDelivery, attempt: Int, tracer: any Tracer) -> ClientSpan {
        let span = ClientSpan(tracer: tracer, method: "POST", url: delivery.url, context: .topLevel)
        span.span.attributes["herald.webhook.id"] = delivery.webhookID.rawValue
        span.span.attributes["herald.delivery.id"] = delivery.id.rawValue
        span.span.attributes["herald.delivery.attempt"] = attempt
        if let text = delivery.traceparent, let parent = TraceParent(text) {
            span.span.addLink(SpanLink(context: parent.context(tracer: tracer), attributes: [:]))
        }
        return span
    }

    /// The answer's status, within the timeout; the body is read and dropped (up to 64 KiB).
    private func execute(_ request: HTTPClientRequest, target: WebhookTarget) async throws -> Int {
        let deadline = NIODeadline.now() + TimeAmount(configuration.timeout)
        if target.scheme == "http" {
            return try await Self.status(of: try await client.execute(request, deadline: deadline, logger: logger))
        }
        let client = HTTPClient(
            eventLoopGroupProvider: .singleton,
            configuration: Self.clientConfiguration(configuration, dnsOverride: [target.host: target.address]))
        do {
            let status = try await Self.status(of: try await client.execute(request, deadline: deadline, logger: logger))
            try await client.shutdown()
            return status
        } catch {
            try? await client.shutdown()
            throw error
        }
    }

    private static func status(of response: HTTPClientResponse) async throws -> Int {
        _ = try? await response.body.collect(upTo: 64 << 10)
        return Int(response.status.code)
    }

    private static func describe(_ error: any Error) -> String {
        if let error = error as? HTTPClientError {
            if error == .deadlineExceeded { return "no answer within the timeout" }
            if error == .connectTimeout { return "no connection within the timeout" }
        }
        return "\(error)"
    }
}
