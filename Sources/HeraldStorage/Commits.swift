import GRDB
import Metrics

/// Counts the writer's commits as `herald_database_commits_total`: each is durable when it returns (the writer runs
/// with `synchronous = FULL`).
final class CommitCounter: TransactionObserver, Sendable {
    private let commits = Counter(label: "herald_database_commits_total")

    func observes(eventsOfKind eventKind: DatabaseEventKind) -> Bool { false }
    func databaseDidChange(with event: DatabaseEvent) {}
    func databaseDidRollback(_ db: Database) {}

    func databaseDidCommit(_ db: Database) {
        commits.increment()
    }
}
