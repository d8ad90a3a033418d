import HeraldCore
import HeraldStorage
import Logging
import PostgresNIO
import Synchronization

/// One transaction's connection, and what its writes changed: announced once it commits (``PostgresStorage/write(_:)``).
struct Transaction: Sendable {
    /// What a transaction's writes changed (behind a lock, uncontended: only the transaction's task touches it).
    final class Recorder: Sendable {
        private struct Changes {
            var jobs: [JobChange] = []
            var deliveries = false
        }

        private let changes = Mutex(Changes())

        /// The jobs whose `version` moved, as the writes returned them.
        var jobs: [JobChange] { changes.withLock { $0.jobs } }
        /// Whether webhook deliveries were queued.
        var deliveries: Bool { changes.withLock { $0.deliveries } }

        func record(_ change: JobChange) { changes.withLock { $0.jobs.append(change) } }
        func recordDeliveries() { changes.withLock { $0.deliveries = true } }
    }

    let connection: PostgresConnection
    let logger: Logger
    let recorder: Recorder

    /// Runs one statement; its rows.
    @discardableResult
    func run(_ query: PostgresQuery) async throws -> [PostgresRow] {
        try await connection.query(query, logger: logger).collect()
    }

    /// Runs one statement; its rows, read by column name.
    func rows(_ query: PostgresQuery) async throws -> [Columns] {
        try await run(query).map(Columns.init)
    }

    /// Runs one hot statement (prepared once per connection: ``HotStatement``); its rows, read by column name.
    func rows<Site: HotStatementSite>(_ site: Site.Type, _ query: PostgresQuery) async throws -> [Columns] {
        var rows: [Columns] = []
        for try await row in try await connection.execute(HotStatement<Site>(query), logger: logger) { rows.append(Columns(row)) }
        return rows
    }

    /// The first row of one statement, if any.
    func row(_ query: PostgresQuery) async throws -> Columns? {
        try await rows(query).first
    }

    /// Runs a statement that returns `id, version, state, cancel_requested` of the jobs it changed, and records them.
    @discardableResult
    func changeJobs(_ query: PostgresQuery) async throws -> [Columns] {
        let rows = try await rows(query)
        for row in rows { recorder.record(try Self.change(row)) }
        return rows
    }

    /// A job's change from its row's `id, version, state, cancel_requested`.
    static func change(_ row: Columns) throws -> JobChange {
        let id: JobID = try row("id")
        guard let state = JobState(rawValue: try row("state")) else { throw UnreadableRow(table: "jobs", id: id.rawValue) }
        return JobChange(jobID: id, version: try row("version"), state: state, cancelRequested: try row("cancel_requested"))
    }

    /// What a statement that changes jobs returns, for ``changeJobs(_:)`` (qualified: an `UPDATE … FROM` may join
    /// another table with an `id`).
    static let changed = "jobs.id, jobs.version, jobs.state, jobs.cancel_requested"
}
