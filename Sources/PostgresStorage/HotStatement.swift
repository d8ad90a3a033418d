import PostgresNIO
import Synchronization

/// Names one of the statements every post runs (its creation, claim and commit, a job's read): one type per statement,
/// since postgres-nio names a prepared statement by its type.
protocol HotStatementSite: Sendable {}

/// A hot statement, prepared once per connection under its site's name: PostgreSQL parses it once, and after five
/// runs plans it once for all values (a generic plan) when that costs no more; planning these statements anew took
/// 0.3 to 0.8 ms a run (pg_stat_statements, Benchmarks/notes.md).
///
/// Written as any query is (interpolation binds every value); its text must be the same on every run, which
/// ``init(_:)`` checks. A value that may be NULL needs a cast in the text: PostgreSQL fixes the parameters' types
/// when it prepares, from the first run's values.
struct HotStatement<Site: HotStatementSite>: PostgresPreparedStatement {
    typealias Row = PostgresRow

    static var name: String { "herald_\(Site.self)" }
    static var sql: String { HotStatementTexts.shared.text(of: name) }

    private let binds: PostgresBindings

    init(_ query: PostgresQuery) {
        HotStatementTexts.shared.record(query.sql, as: Self.name)
        binds = query.binds
    }

    func makeBindings() -> PostgresBindings { binds }
    func decodeRow(_ row: PostgresRow) -> PostgresRow { row }
}

/// Each hot statement's text, recorded on its first run (the protocol asks the statement's type for it).
final class HotStatementTexts: Sendable {
    static let shared = HotStatementTexts()

    private let texts = Mutex<[String: String]>([:])

    func record(_ sql: String, as name: String) {
        texts.withLock { texts in
            if let known = texts[name] {
                precondition(known == sql, "the hot statement \(name) changed its text: it must bind every value")
            } else {
                texts[name] = sql
            }
        }
    }

    func text(of name: String) -> String {
        guard let text = texts.withLock({ $0[name] }) else { preconditionFailure("the hot statement \(name) was never recorded") }
        return text
    }
}
