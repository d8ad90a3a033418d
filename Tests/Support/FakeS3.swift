import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

/// An HTTP server on 127.0.0.1 that answers like S3 as each test tells it, and records what it saw.
///
/// It shows what a real S3 server cannot be made to do on demand: fail with 503 once, never answer,
/// stop reading a body. Every connection's close is recorded with the time it was seen, so a test can
/// await it and measure how soon a cancelled upload hung up.
public final class FakeS3: Sendable {
    /// What to do with a request, decided when its head arrives.
    public enum Reaction: Sendable {
        /// Reads the whole body, then answers.
        case respond(status: Int, body: String = "")
        /// Reads the whole body, then never answers.
        case hang
        /// Stops reading after the head: the client cannot finish sending the body, until ``FakeS3/unstall()``.
        ///
        /// A client that hangs up on a stalled request cannot be seen to do so: its FIN waits behind the
        /// unsent bytes. ``FakeS3/unstall()`` drains what the client did send, so the close becomes visible.
        case stall
    }

    /// A request as received.
    public struct Received: Sendable {
        public var method: String
        public var uri: String
        public var headers: [(name: String, value: String)]
        /// Body bytes read (so far, for a request that hangs).
        public var bodyLength: Int
        /// Which connection it came on (counted from 1).
        public var connection: Int
        /// Which request it is, over all connections (counted from 1).
        public var number: Int
        public var receivedAt: ContinuousClock.Instant

        public func header(_ name: String) -> String? {
            headers.first { $0.name.lowercased() == name.lowercased() }?.value
        }
    }

    private struct State {
        var requests: [Received] = []
        var connections = 0
        var closed: [Int: ContinuousClock.Instant] = [:]
        var waiters: [(ready: @Sendable (State) -> Bool, continuation: CheckedContinuation<Void, Never>)] = []

        mutating func takeReadyWaiters() -> [CheckedContinuation<Void, Never>] {
            let snapshot = self
            let (ready, waiting) = (waiters.filter { $0.ready(snapshot) }, waiters.filter { !$0.ready(snapshot) })
            waiters = waiting
            return ready.map(\.continuation)
        }
    }

    private let state = Mutex(State())
    private let react: @Sendable (Received) -> Reaction
    private let channel: Mutex<(any Channel)?> = Mutex(nil)
    /// Every accepted connection, so that `unstall()` can read them again and `stop()` close them.
    private let children: Mutex<[any Channel]> = Mutex([])

    /// The port it listens on, once started.
    public var port: Int { channel.withLock { $0?.localAddress?.port ?? 0 } }
    public var endpoint: String { "http://127.0.0.1:\(port)" }

    private init(react: @escaping @Sendable (Received) -> Reaction) {
        self.react = react
    }

    /// Listens on a free port of 127.0.0.1; `react` decides each request's fate (called on NIO's threads).
    public static func start(react: @escaping @Sendable (Received) -> Reaction) async throws -> FakeS3 {
        let server = FakeS3(react: react)
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let id = server.state.withLock { state in
                        state.connections += 1
                        return state.connections
                    }
                    server.children.withLock { $0.append(channel) }
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                    try channel.pipeline.syncOperations.addHandler(Handler(server: server, connection: id))
                }
            }
            .bind(host: "127.0.0.1", port: 0)
            .get()
        server.channel.withLock { $0 = channel }
        return server
    }

    /// Runs `body` with a server started for it, and stops the server afterwards.
    public static func with<T>(
        react: @escaping @Sendable (Received) -> Reaction,
        _ body: (FakeS3) async throws -> T
    ) async throws -> T {
        let server = try await start(react: react)
        do {
            let result = try await body(server)
            try await server.stop()
            return result
        } catch {
            try? await server.stop()
            throw error
        }
    }

    /// Reads stalled connections again, to their end: the bytes a client sent before it gave up, then its close.
    public func unstall() {
        for child in children.withLock({ $0 }) {
            child.setOption(.autoRead, value: true).whenComplete { _ in }
        }
    }

    public func stop() async throws {
        try await channel.withLock { $0 }?.close()
        for child in children.withLock({ $0 }) {
            try? await child.close()
        }
    }

    public var requests: [Received] { state.withLock { $0.requests } }

    /// When the connection closed, if it has.
    public func closedAt(connection: Int) -> ContinuousClock.Instant? {
        state.withLock { $0.closed[connection] }
    }

    /// Returns once `count` requests have arrived (their heads; the bodies may still be coming).
    public func waitForRequests(_ count: Int) async {
        await wait { $0.requests.count >= count }
    }

    /// Returns once `count` requests that `matching` accepts have arrived (their heads).
    public func waitForRequests(_ count: Int, matching: @escaping @Sendable (Received) -> Bool) async {
        await wait { $0.requests.filter(matching).count >= count }
    }

    /// Returns once `count` body bytes of request `number` have arrived.
    public func waitForBody(ofRequest number: Int, count: Int) async {
        await wait { $0.requests.count >= number && $0.requests[number - 1].bodyLength >= count }
    }

    /// Returns once the connection has closed, with the time the server saw it.
    @discardableResult
    public func waitForClose(connection: Int) async -> ContinuousClock.Instant {
        await wait { $0.closed[connection] != nil }
        return closedAt(connection: connection)!
    }

    private func wait(until ready: @escaping @Sendable (State) -> Bool) async {
        await withCheckedContinuation { continuation in
            let now = state.withLock { state -> Bool in
                if ready(state) { return true }
                state.waiters.append((ready, continuation))
                return false
            }
            if now { continuation.resume() }
        }
    }

    private func update(_ body: (inout State) -> Void) {
        let ready = state.withLock { state in
            body(&state)
            return state.takeReadyWaiters()
        }
        for continuation in ready { continuation.resume() }
    }

    /// One connection: records each request, then answers, hangs or stalls as told.
    private final class Handler: ChannelInboundHandler {
        typealias InboundIn = HTTPServerRequestPart
        typealias OutboundOut = HTTPServerResponsePart

        let server: FakeS3
        let connection: Int
        /// The request being received: its index in the log, and what to do with it.
        private var current: (index: Int, reaction: Reaction)?

        init(server: FakeS3, connection: Int) {
            self.server = server
            self.connection = connection
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch unwrapInboundIn(data) {
            case .head(let head):
                var received = Received(
                    method: head.method.rawValue,
                    uri: head.uri,
                    headers: head.headers.map { ($0.name, $0.value) },
                    bodyLength: 0,
                    connection: connection,
                    number: 0,
                    receivedAt: .now
                )
                var index = 0
                server.update { state in
                    index = state.requests.count
                    received.number = index + 1
                    state.requests.append(received)
                }
                let reaction = server.react(received)
                current = (index, reaction)
                if case .stall = reaction {
                    context.channel.setOption(.autoRead, value: false).whenComplete { _ in }
                }
            case .body(let bytes):
                guard let index = current?.index else { return }
                server.update { $0.requests[index].bodyLength += bytes.readableBytes }
            case .end:
                guard case .respond(let status, let body)? = current?.reaction else { return }
                var headers = HTTPHeaders([("content-length", String(body.utf8.count))])
                if !body.isEmpty { headers.add(name: "content-type", value: "application/xml") }
                let head = HTTPResponseHead(version: .http1_1, status: HTTPResponseStatus(statusCode: status), headers: headers)
                context.write(wrapOutboundOut(.head(head)), promise: nil)
                if !body.isEmpty {
                    context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(string: body)))), promise: nil)
                }
                context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
            }
        }

        func channelInactive(context: ChannelHandlerContext) {
            let now = ContinuousClock.now
            server.update { $0.closed[connection] = now }
            context.fireChannelInactive()
        }
    }
}
