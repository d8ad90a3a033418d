public import Tracing

/// How a ``Server`` listens and what it protects itself against.
///
/// libmicrohttpd 0.9.75 has no connection timeout, no per-IP limit and no body limit by default: every one is set here.
public struct ServerConfiguration: Sendable {
    /// The address to bind: an IPv4 or IPv6 literal, or a host name that resolves to one.
    public var host: String
    /// The port to bind; 0 picks a free one (see ``Server/init(router:configuration:logger:onListening:)``).
    public var port: Int
    /// libmicrohttpd polling threads, each with its own epoll set.
    public var threads: Int
    /// Connections open at once. A new one past the limit closes the connection that has waited longest for a
    /// request head (or itself, when every other is in a request).
    public var connectionLimit: Int
    /// Connections open at once from one client address.
    public var perIPConnectionLimit: Int
    /// Idle seconds after which a connection is closed (not counted while a handler runs); also the time a
    /// connection has to send a whole request head, however slowly its bytes trickle in.
    public var connectionTimeout: Int
    /// Request body limit for routes that do not declare their own.
    public var maxBodySize: Int
    /// Body bytes buffered for a slow handler before the connection stops reading (backpressure).
    public var bodyBufferSize: Int
    /// Bytes of header names and values, plus the URL, one request may carry; more is refused with a 431 problem.
    public var maxHeaderSize: Int
    /// Memory libmicrohttpd may use per connection for headers and its read buffer.
    ///
    /// libmicrohttpd zeroes this pool between requests on a keep-alive connection: bigger costs every request.
    /// A request whose head does not fit gets libmicrohttpd's own HTML page, not a problem document, so the pool
    /// must hold a head well past ``maxHeaderSize`` (for the 431 to be ours) with room left for the answer's head.
    /// The default, 32 KiB, is twice the default budget: heads up to about 30 KiB still reach the 431, and only
    /// larger ones see libmicrohttpd's page. It was 32 KiB before the budget existed; it need not grow.
    public var connectionMemoryLimit: Int
    /// Serve HTTPS with libmicrohttpd's own TLS (GnuTLS) when set.
    public var tls: TLS?
    /// Peers whose `X-Forwarded-For` names the client (for ``Request/remoteAddress``); none by default.
    public var trustedProxies: TrustedProxies
    /// Where each request's line goes (at the logger's `info` level): buffered and written by the server's run loop.
    /// Without one, lines go through the logger, one `logger.info` per request.
    public var accessLog: AccessLog?
    /// Traces each request as a server span when set; nil costs nothing.
    public var tracer: (any Tracer)?

    /// A certificate chain and its private key, PEM text.
    public struct TLS: Sendable, Hashable {
        public var certificateChain: String
        public var privateKey: String

        public init(certificateChain: String, privateKey: String) {
            self.certificateChain = certificateChain
            self.privateKey = privateKey
        }
    }

    /// libmicrohttpd's own limit: room above ``connectionLimit`` for the connections being closed to make room.
    var acceptLimit: Int { connectionLimit + max(16, connectionLimit / 8) }

    public init(
        host: String = "127.0.0.1",
        port: Int = 8080,
        threads: Int = 1,
        connectionLimit: Int = 1000,
        perIPConnectionLimit: Int = 256,
        connectionTimeout: Int = 30,
        maxBodySize: Int = 1 << 20,
        bodyBufferSize: Int = 256 << 10,
        maxHeaderSize: Int = 16 << 10,
        connectionMemoryLimit: Int = 32 << 10,
        tls: TLS? = nil,
        trustedProxies: TrustedProxies = TrustedProxies(),
        accessLog: AccessLog? = nil,
        tracer: (any Tracer)? = nil
    ) {
        self.host = host
        self.port = port
        self.threads = threads
        self.connectionLimit = connectionLimit
        self.perIPConnectionLimit = perIPConnectionLimit
        self.connectionTimeout = connectionTimeout
        self.maxBodySize = maxBodySize
        self.bodyBufferSize = bodyBufferSize
        self.maxHeaderSize = maxHeaderSize
        self.connectionMemoryLimit = connectionMemoryLimit
        self.tls = tls
        self.tracer = tracer
        self.trustedProxies = trustedProxies
        self.accessLog = accessLog
    }
}
