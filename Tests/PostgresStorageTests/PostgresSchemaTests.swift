import Foundation
import PostgresNIO
import PostgresStorage
import Testing

/// The schema's invariants hold on PostgreSQL as on SQLite: what Herald never writes, the database refuses.
@Suite("PostgreSQL schema")
struct PostgresSchemaTests {
    static let post = "INSERT INTO posts (id, state, created_at, job_id) VALUES ('p1', 'queued', now(), 'j1')"
    static let job = "INSERT INTO jobs (id, post_id, state, run_at, created_at) VALUES ('j1', 'p1', 'queued', now(), now())"

    static func medium(size: String, sha256: String, path: String) -> String {
        "INSERT INTO media (id, content_type, size, sha256, staging_path, created_at) VALUES ('m1', 'image/png', \(size), \(sha256), \(path), now())"
    }

    /// Runs `statements` in one transaction on a migrated database: nil if it committed, else the SQLSTATE that refused it.
    static func refusal(_ statements: [String]) async throws -> String? {
        try await withDatabase { client in
            try await PostgresMigrations.apply(on: client, logger: quiet)
            do {
                try await client.withTransaction(logger: quiet) { connection in
                    for statement in statements { try await connection.query(PostgresQuery(unsafeSQL: statement), logger: quiet) }
                }
                return nil
            } catch let error as PostgresTransactionError {
                let cause = error.closureError ?? error.commitError
                return (cause as? PSQLError)?.serverInfo?[.sqlState] ?? "\(String(describing: cause))"
            }
        }
    }

    @Test("a post naming its job before the job exists commits with the job (the reference is checked at commit)")
    func postAndJob() async throws {
        #expect(try await Self.refusal([Self.post, Self.job]) == nil)
        // The control of the media cases below: the same row with valid values commits.
        #expect(try await Self.refusal([Self.medium(size: "1", sha256: "repeat('a', 64)", path: "'m1.png'")]) == nil)
    }

    @Test(
        "what Herald never writes is refused",
        arguments: [
            // A post whose job does not exist, checked at commit.
            ["INSERT INTO posts (id, state, created_at, job_id) VALUES ('p1', 'queued', now(), 'missing')"],
            // Two active jobs for one post.
            [post, job, "INSERT INTO jobs (id, post_id, state, run_at, created_at) VALUES ('j2', 'p1', 'scheduled', now(), now())"],
            // Published without a time, and a time without being published.
            [post.replacingOccurrences(of: "'queued'", with: "'published'"), job],
            // A zero-byte medium, and a digest that is not 64 lowercase hex digits.
            [medium(size: "0", sha256: "repeat('a', 64)", path: "'m1.png'")],
            [medium(size: "1", sha256: "repeat('A', 64)", path: "'m1.png'")],
            // A staging path that climbs out.
            [medium(size: "1", sha256: "repeat('a', 64)", path: "'../x'")],
            // An error message without a code; a finished job without a finish time.
            [post, "INSERT INTO jobs (id, post_id, state, run_at, created_at, error_message) VALUES ('j1', 'p1', 'queued', now(), now(), 'x')"],
            [post, job.replacingOccurrences(of: "'queued'", with: "'succeeded'")],
            // A lease without its holder.
            [post, "INSERT INTO jobs (id, post_id, state, run_at, created_at, locked_until) VALUES ('j1', 'p1', 'running', now(), now(), now())"],
            // A key with a name too long, or a scope that does not exist.
            ["INSERT INTO keys (id, name, hash, created_at) VALUES ('k1', repeat('n', 101), repeat('a', 64), now())"],
            ["INSERT INTO keys (id, name, scope, hash, created_at) VALUES ('k1', 'n', 'root', repeat('a', 64), now())"],
            // A pending delivery with no due time.
            [
                "INSERT INTO webhooks (id, tenant, url, events, secret, created_at) VALUES ('w1', 't', 'https://x', '[]', 'whsec_x', now())",
                "INSERT INTO webhook_events (id, type, body, created_at) VALUES ('e1', 'job.failed', '\\x00', now())",
                "INSERT INTO webhook_deliveries (id, webhook_id, event_id, created_at) VALUES ('d1', 'w1', 'e1', now())",
            ],
        ]
    )
    func refused(statements: [String]) async throws {
        // Class 23: an integrity constraint refused it (not a mistake in the statements).
        let refusal = try await Self.refusal(statements)
        #expect(refusal?.hasPrefix("23") == true, "\(statements.last ?? ""): \(refusal ?? "committed")")
    }
}
