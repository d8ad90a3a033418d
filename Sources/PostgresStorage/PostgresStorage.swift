import HeraldCore
public import HeraldStorage
public import Logging
import NIOCore
import PostgresNIO
public import ServiceLifecycle
import Synchronization

/// Herald's PostgreSQL database, for any number of replicas: a `PostgresClient` pool, migrated when opened, and the
/// change feed every replica hears (LISTEN/NOTIFY).
///
/// A `Service`: ``run()`` runs the pool and the listener, so it goes first in the `ServiceGroup` (shut down last).
public final class PostgresStorage: Storage, Service {
    /// The connection pool the repositories run their queries on (through ``client``).
    private let pool: PostgresClient
    /// Open once ``run()`` has started the pool: a query before it would wait for it anyway, with a warning.
    private let started = StartGate()
    let logger: Logger
    /// The job changes this replica commits and those it hears of from the others.
    public let changes: JobChanges
    /// Running uploads' states and bytes, kept in memory and laid over every job read.
    public let uploadProgress: UploadProgress
    /// Announces each change once, whether this replica committed it or heard of it.
    let feed: ChangeFeed
    /// Connections for the calls that answer on their caller's thread (the status poll, a key's lookup).
    let blocking: BlockingConnections
    /// Whether the database can be reached, as the change listener finds it.
    let reachability = Reachability()
    /// The uploads of the jobs this replica runs, written for the other replicas to show.
    let liveUploads = LiveUploads()
    /// Posts created together: one statement for those asked for while the last ran.
    let creations = Batcher<PostgresTransitions.NewPost, PostgresTransitions.Created?>(limit: 32)
    /// Jobs committed together: one statement for those that ended while the last ran.
    let commits = Batcher<PostgresTransitions.Commit, PostgresTransitions.WrittenJob?>(limit: 32)

    /// Where the database is.
    public let url: DatabaseURL

    private init(url: DatabaseURL, pool size: Int, logger: Logger) {
        self.url = url
        var configuration = url.clientConfiguration
        configuration.options.maximumConnections = size
        self.pool = PostgresClient(configuration: configuration, backgroundLogger: logger)
        self.logger = logger
        let changes = JobChanges()
        self.changes = changes
        self.uploadProgress = UploadProgress(changes: changes)
        self.feed = ChangeFeed(changes: changes, url: url, reachability: reachability, logger: logger)
        self.blocking = BlockingConnections(url: url, reachability: reachability, logger: logger)
    }

    /// How many pooled connections a replica keeps at most, unless told: few enough that seven replicas (with their
    /// listener and status-poll connections, 13 each) fit a default PostgreSQL's 100 connections, and on a small
    /// machine, where fewer backends compete for its cores, faster than postgres-nio's 20 (Benchmarks/notes.md).
    public static let defaultPool = 8

    /// Connects to the database (waiting up to `timeout` for it to answer), applies the migrations it lacks, and
    /// returns the storage (its pool up to `pool` connections), whose ``run()`` must then run for its queries to be
    /// served.
    ///
    /// Throws ``PostgresStartError`` when the database cannot be reached in time, or its schema is newer than this
    /// version knows.
    public static func open(
        url: DatabaseURL, pool: Int = defaultPool, logger: Logger, timeout: Duration = .seconds(30)
    ) async throws -> PostgresStorage {
        let connection = try await connect(url, logger: logger, within: timeout)
        do {
            _ = try await unwrapped { try await PostgresMigrations.apply(on: connection, logger: logger) }
            try await connection.close()
        } catch {
            try? await connection.close()
            throw error
        }
        return PostgresStorage(url: url, pool: pool, logger: logger)
    }

    /// Runs the connection pool and the change feed's listener until cancelled or shut down gracefully.
    public func run() async throws {
        await withDiscardingTaskGroup { group in
            group.addTask {
                self.started.open()
                await self.pool.run()
            }
            group.addTask { await cancelWhenGracefulShutdown { await self.feed.listen() } }
            group.addTask { await cancelWhenGracefulShutdown { await self.writeLiveUploads() } }
        }
        blocking.close()
    }

    /// Writes the running jobs' changed uploads every ``LiveUploads/interval``, until cancelled.
    private func writeLiveUploads() async {
        while (try? await Task.sleep(for: LiveUploads.interval)) != nil {
            let pending = liveUploads.pending(in: uploadProgress)
            guard !pending.isEmpty else { continue }
            do {
                let held = try await autocommit { transaction in try await PostgresTransitions.recordLiveUploads(transaction, pending) }
                liveUploads.wrote(pending, held: held)
            } catch {
                // Written with the next change, or with the job's end.
                logger.debug("the live uploads were not written", metadata: ["error": "\(error)"])
            }
        }
    }

    /// The pool, once it runs.
    private var client: PostgresClient {
        get async {
            await started.wait()
            return pool
        }
    }

    /// How many times the change listener has connected (a reconnection shows as a second).
    public var listenerConnections: Int { feed.connectionCount }

    /// Whether the database answers a query, for readiness checks; never throws.
    public func isReachable() async -> Bool {
        do {
            return try await run("SELECT 1").first?.decode(Int.self) == 1
        } catch {
            return false
        }
    }

    /// PostgreSQL checks its constraints on every write; what is left to find is a deferred reference left dangling
    /// (none should be) and the schema's version. Empty when all is well.
    public func integrityProblems() async throws -> [String] {
        var problems: [String] = []
        let dangling = try await run(
            "SELECT id FROM posts WHERE job_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM jobs WHERE jobs.id = posts.job_id) ORDER BY id")
        for id in try dangling.map({ try $0.decode(String.self) }) { problems.append("posts row \(id) names a missing jobs row") }
        let recorded = try await run("SELECT name FROM herald_migrations ORDER BY name").map { try $0.decode(String.self) }
        let known = PostgresMigrations.all.map(\.name)
        if recorded != known { problems.append("schema: the database has \(recorded), this version knows \(known)") }
        return problems
    }

    // MARK: The repositories

    public var jobs: any JobRepository { PostgresJobRepository(storage: self) }
    public var posts: any PostRepository { PostgresPostRepository(storage: self) }
    public var media: any MediaRepository { PostgresMediaRepository(storage: self) }
    public var uploads: any UploadRepository { PostgresUploadRepository(storage: self) }
    public var keys: any KeyRepository { PostgresKeyRepository(storage: self) }
    public var webhooks: any WebhookRepository { PostgresWebhookRepository(storage: self) }
    public var objectDeletions: any ObjectDeletionRepository { PostgresObjectDeletionRepository(storage: self) }
    public var queue: any QueueRepository { PostgresQueueRepository(storage: self) }

    public func statusReader(connections: Int) throws -> any JobStatusReader {
        PostgresJobStatusReader(storage: self)
    }

    // MARK: Transactions

    /// One write transaction; what it changed is announced once it has committed, before this returns.
    func write<T: Sendable>(_ body: @escaping @Sendable (Transaction) async throws -> T) async throws -> T {
        let recorder = Transaction.Recorder()
        let value = try await guarded { [logger] in
            try await unwrapped {
                try await self.client.withTransaction(logger: logger) { connection in
                    try await body(Transaction(connection: connection, logger: logger, recorder: recorder))
                }
            }
        }
        feed.announce(recorder.jobs)
        if recorder.deliveries { changes.publishDeliveries() }
        return value
    }

    /// One statement that is its own transaction (no `BEGIN` and `COMMIT` round trips); what it changed is announced
    /// as ``write(_:)`` does. `body` runs exactly one statement: a second would commit apart from the first.
    func autocommit<T: Sendable>(_ body: @escaping @Sendable (Transaction) async throws -> T) async throws -> T {
        let recorder = Transaction.Recorder()
        let value = try await guarded { [logger] in
            try await self.client.withConnection { connection in
                try await body(Transaction(connection: connection, logger: logger, recorder: recorder))
            }
        }
        feed.announce(recorder.jobs)
        if recorder.deliveries { changes.publishDeliveries() }
        return value
    }

    /// One transaction on a connection of its own, not the pool's: for what runs at start, before ``run()`` does.
    func writeAtStart<T: Sendable>(_ body: (Transaction) async throws -> T) async throws -> T {
        let connection = try await Self.connect(url, logger: logger, within: .seconds(5))
        do {
            let value = try await unwrapped {
                try await connection.withTransaction(logger: logger) { connection in
                    try await body(Transaction(connection: connection, logger: logger, recorder: Transaction.Recorder()))
                }
            }
            try await connection.close()
            return value
        } catch {
            try? await connection.close()
            throw error
        }
    }

    /// Statements that read one snapshot together (a job and its uploads, a page and its children).
    func read<T: Sendable>(_ body: @escaping @Sendable (Transaction) async throws -> T) async throws -> T {
        try await guarded { try await self.read(on: self.client, body) }
    }

    private func read<T: Sendable>(on client: PostgresClient, _ body: (Transaction) async throws -> T) async throws -> T {
        try await client.withConnection { connection in
            let transaction = Transaction(connection: connection, logger: logger, recorder: Transaction.Recorder())
            try await transaction.run("START TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            do {
                let value = try await body(transaction)
                try await transaction.run("COMMIT")
                return value
            } catch {
                _ = try? await transaction.run("ROLLBACK")
                throw error
            }
        }
    }

    /// One statement on its own (its own snapshot, committed at once); its rows.
    @discardableResult
    func run(_ query: PostgresQuery) async throws -> [PostgresRow] {
        try await guarded { [logger] in try await self.client.query(query, logger: logger).collect() }
    }

    /// The longest a call waits for a database that the listener still finds reachable: a safety net for a server
    /// that stops answering only some calls, not the outage signal (``Reachability`` is).
    static let stallLimit = Duration.seconds(15)

    /// `operation`, unless the database is or becomes unreachable first: that, a connection cut or refused, or no
    /// answer within ``stallLimit`` is thrown as `StorageUnavailable`, whatever the driver said; other errors as they
    /// are.
    func guarded<T: Sendable>(_ operation: @escaping @Sendable () async throws -> T) async throws -> T {
        if let problem = reachability.problem { throw StorageUnavailable(reason: problem) }
        do {
            return try await Self.race(operation, reachability: reachability, stallLimit: Self.stallLimit, logger: logger)
        } catch {
            throw Self.storageError(error)
        }
    }

    /// `operation`'s outcome, or `StorageUnavailable` once the database is found unreachable, or ``DeadlinePassed``
    /// once `stallLimit` has passed, without waiting for the loser.
    ///
    /// A call waiting for the pool's connection while the database is down waits for the pool's circuit breaker (a
    /// minute), and a query in flight to a server that went quiet may not end even cancelled: the caller must be
    /// answered all the same. So the operation runs as a task of its own, cancelled when it loses and left to end by
    /// itself; it is short-lived work bounded by the driver's own timeouts, not a service.
    static func race<T: Sendable>(
        _ operation: @escaping @Sendable () async throws -> T, reachability: Reachability, stallLimit: Duration,
        logger: Logger
    ) async throws -> T {
        let outcome = Outcome<T>()
        let started = ContinuousClock.now
        let work = Task {
            let result: Result<T, any Error>
            do {
                result = .success(try await operation())
            } catch {
                result = .failure(error)
            }
            if !outcome.settle(result) {
                logger.notice("a database call ended after it was answered", metadata: ["after": "\(ContinuousClock.now - started)"])
            }
        }
        let watcher = reachability.watch { reason in
            if outcome.settle(.failure(StorageUnavailable(reason: reason))) { work.cancel() }
        }
        defer { reachability.unwatch(watcher) }
        let timer = Task {
            try? await Task.sleep(for: stallLimit)
            if outcome.settle(.failure(DeadlinePassed(limit: stallLimit))) { work.cancel() }
        }
        defer { timer.cancel() }
        return try await withTaskCancellationHandler {
            try await outcome.value
        } onCancel: {
            work.cancel()
            _ = outcome.settle(.failure(CancellationError()))
        }
    }

    /// `error` as callers see it: the database's unavailability as `StorageUnavailable` (kept as it is when it
    /// already is one), any other error as it is.
    static func storageError(_ error: any Error) -> any Error {
        if error is StorageUnavailable || !isUnavailable(error) { return error }
        return StorageUnavailable(reason: PostgresStartError.reason(error))
    }

    /// Whether `error` says the database cannot be reached, rather than that a statement was refused.
    static func isUnavailable(_ error: any Error) -> Bool {
        if let error = error as? PostgresTransactionError {
            return [error.beginError, error.closureError, error.commitError].contains { $0.map(isUnavailable) ?? false }
        }
        if error is StorageUnavailable || error is DeadlinePassed { return true }
        guard let error = error as? PSQLError else { return false }
        switch error.code {
        case .connectionError, .serverClosedConnection, .clientClosedConnection, .uncleanShutdown, .poolClosed:
            return true
        case .server:
            // Class 08: connection exceptions; 57P01-57P03: shut down by an administrator, crashed, starting up.
            let state = error.serverInfo?[.sqlState] ?? ""
            return state.hasPrefix("08") || ["57P01", "57P02", "57P03"].contains(state)
        default:
            return false
        }
    }

    /// Connects one connection, trying again until `timeout` has passed (the database may still be starting).
    static func connect(_ url: DatabaseURL, logger: Logger, within timeout: Duration) async throws -> PostgresConnection {
        let configuration = try url.connectionConfiguration()
        let deadline = ContinuousClock.now + timeout
        var lastError: any Error = PostgresStartError.unreachable(reason: "no attempt was made")
        repeat {
            do {
                return try await PostgresConnection.connect(configuration: configuration, id: 0, logger: logger)
            } catch {
                lastError = error
                logger.debug("PostgreSQL is not answering yet", metadata: ["error": "\(String(reflecting: error))"])
                try await Task.sleep(for: .milliseconds(250))
            }
        } while ContinuousClock.now < deadline
        throw PostgresStartError.unreachable(reason: PostgresStartError.reason(lastError))
    }
}

/// Why PostgreSQL cannot be used at start.
public enum PostgresStartError: Error, CustomStringConvertible, Equatable {
    /// No connection could be made in time.
    case unreachable(reason: String)
    /// The database was migrated by a newer Herald.
    case newerSchema(database: String, known: String)

    public var description: String {
        switch self {
        case .unreachable(let reason): "PostgreSQL cannot be reached: \(reason)"
        case .newerSchema(let database, let known):
            "the database's schema is \(database), newer than this version knows (\(known)): run a newer Herald"
        }
    }

    /// A driver's error in a line, without what it carries of the configuration (the password among it).
    static func reason(_ error: any Error) -> String {
        if let error = error as? PSQLError {
            if let message = error.serverInfo?[.message] { return message }
            return "\(error.code)" + (error.underlying.map { ": \($0)" } ?? "")
        }
        return "\(error)"
    }
}

/// The error a transaction's body threw, not the driver's wrapper of it (a refused commit stays wrapped).
func unwrapped<T>(_ body: () async throws -> T) async throws -> T {
    do {
        return try await body()
    } catch let error as PostgresTransactionError {
        throw error.closureError ?? error
    }
}

/// A gate that opens once and stays open; callers wait until it has.
final class StartGate: Sendable {
    private struct State {
        var isOpen = false
        var waiters: [CheckedContinuation<Void, Never>] = []
    }

    private let state = Mutex(State())

    /// Opens the gate: every waiter goes on, and later callers do not wait.
    func open() {
        let waiters = state.withLock { state in
            state.isOpen = true
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Returns once the gate is open.
    func wait() async {
        guard !state.withLock({ $0.isOpen }) else { return }
        await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
            let isOpen = state.withLock { state in
                if !state.isOpen { state.waiters.append(waiter) }
                return state.isOpen
            }
            if isOpen { waiter.resume() }
        }
    }
}

/// A database call did not answer within its limit.
struct DeadlinePassed: Error, CustomStringConvertible {
    let limit: Duration
    var description: String { "no answer within \(limit.components.seconds) s" }
}

/// The first outcome of a race, handed to the one waiter.
final class Outcome<T: Sendable>: Sendable {
    private struct State {
        var result: Result<T, any Error>?
        var waiter: CheckedContinuation<T, any Error>?
    }

    private let state = Mutex(State())

    /// Records `result` if none was; whether it was the first.
    func settle(_ result: Result<T, any Error>) -> Bool {
        let (first, waiter) = state.withLock { state -> (Bool, CheckedContinuation<T, any Error>?) in
            guard state.result == nil else { return (false, nil) }
            state.result = result
            defer { state.waiter = nil }
            return (true, state.waiter)
        }
        waiter?.resume(with: result)
        return first
    }

    /// The first outcome, once there is one.
    var value: T {
        get async throws {
            try await withCheckedThrowingContinuation { continuation in
                let settled = state.withLock { state -> Result<T, any Error>? in
                    if state.result == nil { state.waiter = continuation }
                    return state.result
                }
                if let settled { continuation.resume(with: settled) }
            }
        }
    }
}
