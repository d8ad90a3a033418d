import Foundation
public import Logging
public import MicroHTTP
public import NIOSSL
public import Publishing

extension HeraldConfiguration {
    /// Where accepted media bytes are staged: the data directory for SQLite's one process, the shared store for
    /// PostgreSQL's replicas (any of which may publish them).
    public var stagedBytes: StagedBytes { database == nil ? .directory(dataDirectory) : .store }
}

/// Everything `herald serve` can be told, with the defaults of the README's option table.
public struct HeraldConfiguration: Sendable {
    public var host: String
    public var port: Int
    /// Holds `herald.sqlite` and the staging files.
    public var dataDirectory: String
    /// `postgres://…`: every row in that PostgreSQL database, for replicas; nil: SQLite in the data directory.
    public var database: String?
    /// Connections of this replica's pool to PostgreSQL (besides its listener and its status polls' own).
    public var databasePool: Int
    /// This process's name among the replicas: a running job's `runner`, its lease's holder.
    public var replicaID: String
    /// Seconds a running job's lease lasts unrenewed before another replica may take the job over.
    public var leaseTimeout: Int
    /// Seconds between a replica's renewals of its running jobs' leases.
    public var leaseRenew: Int
    /// How long the start waits for PostgreSQL to answer (no flag: the contract's 30 s; tests shorten it).
    public var databaseStartTimeout: Duration
    /// `file://…` or `s3://BUCKET?endpoint=…&region=…`; `nil` means `file://<data-dir>/objects`.
    public var store: String?
    public var publicBaseURL: String?
    /// The key an `s3://` store signs with (from `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`).
    public var storeCredentials: SigV4Signer.Credentials?
    public var workers: Int
    /// At most this many jobs of one tenant run at once, over every replica; 0: no cap.
    public var tenantConcurrency: Int
    public var uploadConcurrency: Int
    public var uploadAttempts: Int
    /// Seconds one upload attempt may take.
    public var uploadTimeout: Int
    public var maxMediaBytes: Int
    public var maxMediaPerPost: Int
    /// Seconds running jobs get on shutdown before they are cancelled and re-queued.
    public var shutdownGrace: Int
    public var logLevel: Logger.Level
    /// How log lines are written: swift-log's text, or one JSON object a line.
    public var logFormat: LogFormat
    /// libmicrohttpd polling threads.
    public var httpThreads: Int
    public var maxConnections: Int
    public var maxConnectionsPerIP: Int
    /// Idle seconds before a connection is closed; also the time a request head has to arrive whole.
    public var connectionTimeout: Int
    /// Whether `/v1/` calls need an API key.
    public var auth: AuthMode
    /// Requests a second per key (burst twice that); 0: no limit.
    public var rateLimit: Int
    /// Failed authentications a minute per client address; 0: no limit.
    public var authFailureLimit: Int
    /// PEM files of the certificate chain and its key: HTTPS when both are set.
    public var tlsCertificatePath: String?
    public var tlsKeyPath: String?
    /// Proxies whose `X-Forwarded-For` names the client.
    public var trustedProxies: [AddressRange]
    /// Seconds an uploaded medium no post uses is kept.
    public var stagedMediaTTL: Int
    /// Bytes kept free on the data directory's filesystem: an upload that would leave less gets a 507.
    public var minFreeDisk: Int
    /// Where traces go over OTLP/HTTP (`URL/v1/traces`); nil: no tracing, and no cost on any request.
    public var otlpEndpoint: String?
    /// How long a finished span waits to go out in a batch (no flag: the contract's 5 s; tests shorten it).
    public var traceExportDelay: Duration
    /// How long one export may take before its batch is given up (no flag; also the most a shutdown waits for the
    /// last spans).
    public var traceExportTimeout: Duration
    /// Server-Sent Events streams open at once.
    public var maxStreams: Int
    /// How often an idle event stream gets a comment line (no flag: the contract says at least every 15 seconds).
    public var eventKeepAlive: Duration
    /// Seconds one webhook attempt may take, connecting included.
    public var webhookTimeout: Int
    /// Attempts before a webhook delivery is `failed`.
    public var webhookAttempts: Int
    /// Whether webhook URLs may point at loopback, private or link-local addresses (intranets, tests).
    public var webhookAllowPrivate: Bool
    /// The first webhook retry's delay (no flag: about 5 s, as the contract says; tests shorten it).
    public var webhookRetryBase: Duration
    /// How webhook hosts are resolved (no flag: the system's resolver; tests give their own).
    public var webhookResolver: any HostResolver
    /// TLS for https webhooks (no flag: the system's trust roots; tests trust their own certificate).
    public var webhookTLS: TLSConfiguration?

    public init(
        host: String = "127.0.0.1",
        port: Int = 8080,
        dataDirectory: String = "./data",
        database: String? = nil,
        replicaID: String = HeraldConfiguration.defaultReplicaID,
        databasePool: Int = 8,  // PostgresStorage.defaultPool, which says why
        leaseTimeout: Int = 10,
        leaseRenew: Int = 2,
        databaseStartTimeout: Duration = .seconds(30),
        store: String? = nil,
        publicBaseURL: String? = nil,
        storeCredentials: SigV4Signer.Credentials? = nil,
        workers: Int = 8,
        tenantConcurrency: Int = 0,
        uploadConcurrency: Int = 4,
        uploadAttempts: Int = 3,
        uploadTimeout: Int = 60,
        maxMediaBytes: Int = 104_857_600,
        maxMediaPerPost: Int = 10,
        shutdownGrace: Int = 20,
        logLevel: Logger.Level = .info,
        logFormat: LogFormat = .text,
        httpThreads: Int = 1,
        maxConnections: Int = 1000,
        maxConnectionsPerIP: Int = 256,
        connectionTimeout: Int = 30,
        auth: AuthMode = .keys,
        rateLimit: Int = 100,
        authFailureLimit: Int = 20,
        tlsCertificatePath: String? = nil,
        tlsKeyPath: String? = nil,
        trustedProxies: [AddressRange] = [],
        stagedMediaTTL: Int = 86_400,
        minFreeDisk: Int = 1 << 30,
        otlpEndpoint: String? = nil,
        traceExportDelay: Duration = .seconds(5),
        traceExportTimeout: Duration = .seconds(5),
        maxStreams: Int = 500,
        eventKeepAlive: Duration = .seconds(15),
        webhookTimeout: Int = 10,
        webhookAttempts: Int = 8,
        webhookAllowPrivate: Bool = false,
        webhookRetryBase: Duration = .seconds(5),
        webhookResolver: any HostResolver = SystemResolver(),
        webhookTLS: TLSConfiguration? = nil
    ) {
        self.host = host
        self.port = port
        self.dataDirectory = dataDirectory
        self.database = database
        self.replicaID = replicaID
        self.databasePool = databasePool
        self.leaseTimeout = leaseTimeout
        self.leaseRenew = leaseRenew
        self.databaseStartTimeout = databaseStartTimeout
        self.store = store
        self.publicBaseURL = publicBaseURL
        self.storeCredentials = storeCredentials
        self.workers = workers
        self.tenantConcurrency = tenantConcurrency
        self.uploadConcurrency = uploadConcurrency
        self.uploadAttempts = uploadAttempts
        self.uploadTimeout = uploadTimeout
        self.maxMediaBytes = maxMediaBytes
        self.maxMediaPerPost = maxMediaPerPost
        self.shutdownGrace = shutdownGrace
        self.logLevel = logLevel
        self.logFormat = logFormat
        self.httpThreads = httpThreads
        self.maxConnections = maxConnections
        self.maxConnectionsPerIP = maxConnectionsPerIP
        self.connectionTimeout = connectionTimeout
        self.auth = auth
        self.rateLimit = rateLimit
        self.authFailureLimit = authFailureLimit
        self.tlsCertificatePath = tlsCertificatePath
        self.tlsKeyPath = tlsKeyPath
        self.trustedProxies = trustedProxies
        self.stagedMediaTTL = stagedMediaTTL
        self.minFreeDisk = minFreeDisk
        self.otlpEndpoint = otlpEndpoint
        self.traceExportDelay = traceExportDelay
        self.traceExportTimeout = traceExportTimeout
        self.maxStreams = maxStreams
        self.eventKeepAlive = eventKeepAlive
        self.webhookTimeout = webhookTimeout
        self.webhookAttempts = webhookAttempts
        self.webhookAllowPrivate = webhookAllowPrivate
        self.webhookRetryBase = webhookRetryBase
        self.webhookResolver = webhookResolver
        self.webhookTLS = webhookTLS
    }

    /// `HOST-PID`: the host's name and this process's id, unique among replicas that run at once.
    public static var defaultReplicaID: String {
        "\(ProcessInfo.processInfo.hostName)-\(ProcessInfo.processInfo.processIdentifier)"
    }

    /// Herald's version: `herald --version`, and the `User-Agent` of webhook requests.
    public static let version = "0.1.0"

    /// Whether `host` names this machine's loopback only: `localhost`, 127.0.0.0/8 or `::1`.
    public static func isLoopback(_ host: String) -> Bool {
        host == "localhost" || AddressRange("127.0.0.0/8")!.contains(host) || AddressRange("::1")!.contains(host)
    }
}

/// `--log-format`: how each log line is written.
public enum LogFormat: String, Sendable, CaseIterable {
    /// swift-log's `StreamLogHandler` lines: `2026-11-22T10:15:30+0000 info herald : request_id=… message`.
    case text
    /// One JSON object a line (``JSONLogHandler``).
    case json

    /// The format called `name`, in any case; nil for another name.
    public init?(name: String) {
        self.init(rawValue: name.lowercased())
    }

    /// The names a flag takes, for messages: `text, json`.
    public static var names: String { allCases.map(\.rawValue).joined(separator: ", ") }
}

/// `--auth`: whether `/v1/` calls need an API key.
public enum AuthMode: String, Sendable, CaseIterable {
    /// Every `/v1/` call needs `Authorization: Bearer KEY`.
    case keys
    /// No key: every caller is tenant `default` with every scope. Only on a loopback host.
    case off

    /// The names a flag takes, for messages: `keys, off`.
    public static var names: String { allCases.map(\.rawValue).joined(separator: ", ") }
}
