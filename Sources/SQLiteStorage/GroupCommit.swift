import GRDB
import GRDBSQLite
import HeraldStorage
import Synchronization

/// Runs the write transactions that arrive together as one: each in a savepoint of a shared transaction, so one
/// commit (one fsync of the WAL) makes them all durable.
///
/// The writer runs with `synchronous = FULL`: a commit returns once the WAL is on disk, and the one writer commits
/// one transaction at a time. A post is three such commits (its creation, its job's claim, its end), so the fsyncs
/// one after another were what bounded publishing (`Benchmarks/notes.md`). Transactions that arrive while the writer
/// is busy queue here and go together in its next access, in arrival order:
///
/// - each runs in a savepoint: one that throws (or leaves a deferred foreign key unsatisfied) is rolled back alone,
///   and its caller hears its error;
/// - every caller hears of its own only once the shared commit is durable; if the commit fails, every one fails;
/// - what they changed is announced (``CommitObserver``) once, at the shared commit, before any caller resumes;
/// - a caller cancelled before its turn gets `CancellationError` and writes nothing (as GRDB's own `write`); once its
///   batch has started it runs to the end, since interrupting SQLite would roll back the others too.
///
/// A lone transaction runs as it would alone: no savepoint.
final class GroupCommit: Sendable {
    private struct State {
        var queue: [any Submitted] = []
        /// Whether an access of the writer is scheduled to take the queue.
        var scheduled = false
    }

    private let pool: DatabasePool
    private let state = Mutex(State())

    init(pool: DatabasePool) {
        self.pool = pool
    }

    /// Runs `body` in the next shared transaction; returns once that transaction has committed.
    func write<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        try Task.checkCancellation()
        return try await submit(body).value
    }

    /// Queues `body` for the next shared transaction; its ``Write/value`` is the outcome.
    func submit<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) -> Write<T> {
        let write = Write(body)
        let schedule = state.withLock { state in
            state.queue.append(write)
            defer { state.scheduled = true }
            return !state.scheduled
        }
        if schedule { scheduleAccess() }
        return write
    }

    private func scheduleAccess() {
        pool.asyncWriteWithoutTransaction { db in self.commitQueued(db) }
    }

    /// Commits what is queued, then schedules another access if more arrived meanwhile: writes that do not come
    /// through here (`pool.write`) get their turn in between.
    private func commitQueued(_ db: Database) {
        let batch = state.withLock { state in
            defer { state.queue.removeAll(keepingCapacity: true) }
            return state.queue
        }
        commit(batch, db)
        let more = state.withLock { state in
            state.scheduled = !state.queue.isEmpty
            return state.scheduled
        }
        if more { scheduleAccess() }
    }

    private func commit(_ batch: [any Submitted], _ db: Database) {
        var waiting: [any Submitted] = []
        for write in batch {
            if write.isCancelled { write.fail(CancellationError()) } else { waiting.append(write) }
        }
        guard !waiting.isEmpty else { return }
        var done: [any Submitted] = []
        // The writes before `next` have been run (and told of their own errors); the rest wait.
        var next = 0
        do {
            try db.inTransaction {
                if waiting.count == 1 {
                    try waiting[0].perform(db)
                    done.append(waiting[0])
                    next = 1
                    return .commit
                }
                while next < waiting.count {
                    let write = waiting[next]
                    next += 1
                    do {
                        try db.inSavepoint {
                            try write.perform(db)
                            try Self.checkDeferredForeignKeys(db)
                            return .commit
                        }
                        done.append(write)
                    } catch {
                        write.fail(error)
                        // SQLite rolled the whole transaction back (a full disk, an I/O error): nothing can commit.
                        if !db.isInsideTransaction { throw error }
                    }
                }
                return .commit
            }
        } catch {
            for write in done { write.fail(error) }
            for write in waiting[next...] { write.fail(error) }
            return
        }
        // The commit has announced what the batch changed (`CommitObserver`): now the callers may resume.
        for write in done { write.succeed() }
    }

    /// A deferred foreign key is checked at the commit, which would fail every write of the batch: checked at the end
    /// of each one's savepoint instead (rolling back to the savepoint restores SQLite's count).
    private static func checkDeferredForeignKeys(_ db: Database) throws {
        var current: Int32 = 0
        var highwater: Int32 = 0
        sqlite3_db_status(db.sqliteConnection, SQLITE_DBSTATUS_DEFERRED_FKS, &current, &highwater, 0)
        if current > 0 {
            throw DatabaseError(resultCode: .SQLITE_CONSTRAINT_FOREIGNKEY, message: "FOREIGN KEY constraint failed")
        }
    }

    /// A queued write, whatever its value's type.
    private protocol Submitted: Sendable {
        var isCancelled: Bool { get }
        /// Runs the body in the open transaction (on the writer), keeping its value until ``succeed()``.
        func perform(_ db: Database) throws
        func succeed()
        func fail(_ error: any Error)
    }

    /// One queued write transaction and its outcome.
    final class Write<T: Sendable>: Submitted {
        private struct State {
            /// The body's value, given out once the shared transaction commits.
            var value: T?
            var outcome: Result<T, any Error>?
            var waiter: CheckedContinuation<T, any Error>?
        }

        private let body: @Sendable (Database) throws -> T
        private let state = Mutex(State())
        private let cancelled = Atomic(false)

        fileprivate init(_ body: @escaping @Sendable (Database) throws -> T) {
            self.body = body
        }

        /// The body's value once its transaction has committed; its error, or the commit's, otherwise.
        var value: T {
            get async throws {
                try await withTaskCancellationHandler {
                    try await withCheckedThrowingContinuation { continuation in
                        let outcome = state.withLock { state in
                            if state.outcome == nil { state.waiter = continuation }
                            return state.outcome
                        }
                        if let outcome { continuation.resume(with: outcome) }
                    }
                } onCancel: {
                    cancelled.store(true, ordering: .relaxed)
                }
            }
        }

        fileprivate var isCancelled: Bool { cancelled.load(ordering: .relaxed) }

        fileprivate func perform(_ db: Database) throws {
            let value = try body(db)
            state.withLock { $0.value = value }
        }

        fileprivate func succeed() {
            // Only a write whose `perform` returned is told to succeed; without its value the waiter would hang.
            guard let value = state.withLock({ $0.value }) else { preconditionFailure("succeed() before perform() returned") }
            finish(.success(value))
        }

        fileprivate func fail(_ error: any Error) { finish(.failure(error)) }

        private func finish(_ outcome: Result<T, any Error>) {
            let waiter = state.withLock { state in
                state.outcome = outcome
                defer { state.waiter = nil }
                return state.waiter
            }
            waiter?.resume(with: outcome)
        }
    }
}

extension SQLiteStorage {
    /// One write transaction, durable when it returns, committed together with the others that arrive meanwhile
    /// (``GroupCommit``); what it changed is announced (``CommitObserver``) once it has committed.
    func write<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        try await groupCommit.write(body)
    }
}
