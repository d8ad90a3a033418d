import HeraldTestSupport
import Logging
import PostgresNIO
import ServiceLifecycle
import Testing

@testable import PostgresStorage

/// Runs `body` with a client of a new database on the test server, the client running beside it.
func withDatabase<T: Sendable>(_ body: (PostgresClient) async throws -> T) async throws -> T {
    let server = try await PostgresServer.shared()
    let database = try await server.makeDatabase()
    let client = PostgresClient(configuration: server.configuration(database: database), backgroundLogger: quiet)
    let group = ServiceGroup(services: [client], logger: quiet)
    return try await whileRunning(group) { try await body(client) }
}

let quiet = Logger(label: "postgres-tests", factory: { _ in SwiftLogNoOpLogHandler() })

@Suite("PostgreSQL migrations")
struct PostgresMigrationsTests {
    @Test("replicas starting together apply each migration exactly once; a later start applies nothing")
    func appliedOnce() async throws {
        try await withDatabase { client in
            // Four starts at once, each on a connection of its own: the advisory lock queues them.
            let applied = try await withThrowingTaskGroup(of: [String].self) { group in
                for _ in 0..<4 { group.addTask { try await PostgresMigrations.apply(on: client, logger: quiet) } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            let names = PostgresMigrations.all.map(\.name)
            #expect(!names.isEmpty)
            #expect(applied.filter { !$0.isEmpty } == [names], "one start applied them all, the others none: \(applied)")
            let recorded = try await client.query("SELECT name FROM herald_migrations ORDER BY name", logger: quiet).decode(String.self)
                .reduce(into: []) { $0.append($1) }
            #expect(recorded == names)
            #expect(try await PostgresMigrations.apply(on: client, logger: quiet).isEmpty)
            let tables = try await client.query(
                "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public' AND table_name <> 'herald_migrations'",
                logger: quiet
            ).decode(Int.self).reduce(into: []) { $0.append($1) }
            #expect(tables == [13])
        }
    }

    @Test("a migration that fails applies nothing and records nothing")
    func failureAppliesNothing() async throws {
        try await withDatabase { client in
            let broken = [(name: "0001_a.sql", sql: "CREATE TABLE a (x integer);"), (name: "0002_b.sql", sql: "CREATE TABLE b (x nonsense);")]
            await #expect(throws: (any Error).self) { try await PostgresMigrations.apply(broken, on: client, logger: quiet) }
            let leftovers = try await client.query(
                "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public' AND table_name IN ('a', 'herald_migrations')",
                logger: quiet
            ).decode(Int.self).reduce(into: []) { $0.append($1) }
            #expect(leftovers == [0])
        }
    }

    @Test("a file splits into its statements, comments left out")
    func statements() {
        let sql = """
            -- A comment; with a semicolon.
            CREATE TABLE a (
                -- inside
                x integer CHECK (x > 0)
            );

            CREATE INDEX a_x ON a (x);
            """
        #expect(PostgresMigrations.statements(of: sql) == ["CREATE TABLE a (\n    x integer CHECK (x > 0)\n);", "CREATE INDEX a_x ON a (x);"])
        // A function's `$$` body keeps its own statements, comments and blank lines.
        let function = """
            CREATE FUNCTION f() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                -- kept
                PERFORM 1;

                RETURN NULL;
            END
            $$;
            CREATE TRIGGER t AFTER INSERT ON a FOR EACH ROW EXECUTE FUNCTION f();
            """
        let split = PostgresMigrations.statements(of: function)
        #expect(split.count == 2)
        #expect(split.first?.contains("-- kept\n    PERFORM 1;\n\n    RETURN NULL;") == true)
        #expect(split.last == "CREATE TRIGGER t AFTER INSERT ON a FOR EACH ROW EXECUTE FUNCTION f();")
    }
}
