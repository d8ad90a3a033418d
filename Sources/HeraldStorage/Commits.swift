import GRDB
import Metrics
import Synchronization

/// Counts the writer's commits as `herald_database_commits_total{durable}`: a relaxed write (``Storage/write(durable:_:)``
/// with `durable: false`) commits without an fsync of its own; every other commit is durable when it returns.
final class CommitCounter: TransactionObserver, Sendable {
    /// Set by a relaxed write while it runs: only the writer's one connection reads or sets it.
    let relaxed = Atomic<Bool>(false)
    private let durableCommits = Counter(label: "herald_database_commits_total", dimensions: [("durable", "true")])
    private let relaxedCommits = Counter(label: "herald_database_commits_total", dimensions: [("durable", "false")])

    func observes(eventsOfKind eventKind: DatabaseEventKind) -> Bool { false }
    func databaseDidChange(with event: DatabaseEvent) {}
    func databaseDidRollback(_ db: Database) {}

    func databaseDidCommit(_ db: Database) {
        (relaxed.load(ordering: .relaxed) ? relaxedCommits : durableCommits).increment()
    }
}
