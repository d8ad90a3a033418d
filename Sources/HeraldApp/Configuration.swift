public import Logging
public import Publishing

/// Everything `herald serve` can be told, with the defaults of the API contract's "Running it".
public struct HeraldConfiguration: Sendable {
    public var host: String
    public var port: Int
    /// Holds `herald.sqlite` and the staging files.
    public var dataDirectory: String
    /// `file://…` or `s3://BUCKET?endpoint=…&region=…`; `nil` means `file://<data-dir>/objects`.
    public var store: String?
    public var publicBaseURL: String?
    /// The key an `s3://` store signs with (from `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`).
    public var storeCredentials: SigV4Signer.Credentials?
    public var workers: Int
    public var uploadConcurrency: Int
    public var uploadAttempts: Int
    /// Seconds one upload attempt may take.
    public var uploadTimeout: Int
    public var maxMediaBytes: Int
    public var maxMediaPerPost: Int
    /// Seconds running jobs get on shutdown before they are cancelled and re-queued.
    public var shutdownGrace: Int
    public var logLevel: Logger.Level
    /// libmicrohttpd polling threads.
    public var httpThreads: Int
    public var maxConnections: Int
    public var maxConnectionsPerIP: Int
    /// Idle seconds before a connection is closed.
    public var connectionTimeout: Int

    public init(
        host: String = "127.0.0.1",
        port: Int = 8080,
        dataDirectory: String = "./data",
        store: String? = nil,
        publicBaseURL: String? = nil,
        storeCredentials: SigV4Signer.Credentials? = nil,
        workers: Int = 8,
        uploadConcurrency: Int = 4,
        uploadAttempts: Int = 3,
        uploadTimeout: Int = 60,
        maxMediaBytes: Int = 104_857_600,
        maxMediaPerPost: Int = 10,
        shutdownGrace: Int = 20,
        logLevel: Logger.Level = .info,
        httpThreads: Int = 1,
        maxConnections: Int = 1000,
        maxConnectionsPerIP: Int = 256,
        connectionTimeout: Int = 30
    ) {
        self.host = host
        self.port = port
        self.dataDirectory = dataDirectory
        self.store = store
        self.publicBaseURL = publicBaseURL
        self.storeCredentials = storeCredentials
        self.workers = workers
        self.uploadConcurrency = uploadConcurrency
        self.uploadAttempts = uploadAttempts
        self.uploadTimeout = uploadTimeout
        self.maxMediaBytes = maxMediaBytes
        self.maxMediaPerPost = maxMediaPerPost
        self.shutdownGrace = shutdownGrace
        self.logLevel = logLevel
        self.httpThreads = httpThreads
        self.maxConnections = maxConnections
        self.maxConnectionsPerIP = maxConnectionsPerIP
        self.connectionTimeout = connectionTimeout
    }
}
