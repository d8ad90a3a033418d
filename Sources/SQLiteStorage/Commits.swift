import GRDB
import HeraldCore
import HeraldStorage
import Metrics
import Synchronization

/// Announces what each committed transaction of the writer changed, whatever wrote it: the jobs whose `version` it
/// moved (``JobChanges/publish(_:)``) and whether it queued webhook deliveries; and counts the commits as
/// `herald_database_commits_total` (each is durable when it returns: the writer runs with `synchronous = FULL`; only an
/// upload's hold, a lease, is not waited to disk: `SQLiteUploadRepository`).
///
/// A transaction observer on the one writer, so no write path can forget to announce (a job's `version` is its change
/// counter: every committed change of a job moves it). SQLite's update hook names the rows; GRDB drops those of a
/// savepoint rolled back (a failed write of a ``GroupCommit`` batch) and calls ``databaseDidCommit(_:)`` on the writer
/// before the transaction's callers resume, so a caller that hears of its commit finds it announced.
final class CommitObserver: TransactionObserver, Sendable {
    private struct Pending {
        /// The `rowid`s of the jobs changed so far, in the order of their first change.
        var jobs: [Int64] = []
        var deliveries = false
    }

    private let changes: JobChanges
    private let commits = Counter(label: "herald_database_commits_total")
    /// Only the writer's queue touches it; the lock makes the class `Sendable`, uncontended.
    private let pending = Mutex(Pending())

    init(changes: JobChanges) {
        self.changes = changes
    }

    func observes(eventsOfKind eventKind: DatabaseEventKind) -> Bool {
        switch eventKind {
        case .insert(let table): table == "jobs" || table == "webhook_deliveries"
        case .update(let table, let columns): table == "jobs" && columns.contains("version")
        case .delete: false
        }
    }

    func databaseDidChange(with event: DatabaseEvent) {
        let rowID = event.rowID
        let isJob = event.tableName == "jobs"
        pending.withLock { pending in
            if !isJob {
                pending.deliveries = true
            } else if !pending.jobs.contains(rowID) {
                pending.jobs.append(rowID)
            }
        }
    }

    func databaseDidRollback(_ db: Database) {
        pending.withLock { $0 = Pending() }
    }

    func databaseDidCommit(_ db: Database) {
        commits.increment()
        let committed = pending.withLock { pending in
            defer { pending = Pending() }
            return pending
        }
        if !committed.jobs.isEmpty {
            // Read on the writer before its next transaction: the rows as this commit left them. It fails only if
            // the disk does; then the change goes unannounced, and long-polls and the runner's sweep find it later.
            if let announced = try? Self.read(db, rowIDs: committed.jobs) { changes.publish(announced) }
        }
        if committed.deliveries { changes.publishDeliveries() }
    }

    /// Each job's version and state, in the order of `rowIDs`.
    private static func read(_ db: Database, rowIDs: [Int64]) throws -> [JobChange] {
        // One job is the common case (a creation, a claim, an end): a statement prepared once.
        let statement =
            rowIDs.count == 1
            ? try db.cachedStatement(sql: "SELECT rowid, id, version, state, cancel_requested FROM jobs WHERE rowid = ?")
            : try db.makeStatement(
                sql: "SELECT rowid, id, version, state, cancel_requested FROM jobs WHERE rowid IN (\(databaseQuestionMarks(count: rowIDs.count)))")
        var byRowID: [Int64: JobChange] = [:]
        for row in try Row.fetchAll(statement, arguments: StatementArguments(rowIDs)) {
            guard let state = JobState(rawValue: row["state"]) else { throw UnreadableRow(table: "jobs", id: row["id"]) }
            byRowID[row["rowid"]] = JobChange(
                jobID: row["id"], version: row["version"], state: state, cancelRequested: (row["cancel_requested"] as Int) != 0)
        }
        return rowIDs.compactMap { byRowID[$0] }
    }
}
