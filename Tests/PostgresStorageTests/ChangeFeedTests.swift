import HeraldCore
import HeraldStorage
import HeraldTestSupport
import Logging
import NIOPosix
import PostgresNIO
import Synchronization
import Testing

@testable import PostgresStorage

/// Runs `storage` (its pool and listener) while `body` runs.
func running<T: Sendable>(_ storage: PostgresStorage, _ body: () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await storage.run() }
        defer { group.cancelAll() }
        return try await body()
    }
}

/// Two replicas' storages on one new database, running (pools and listeners) while `body` runs.
func withTwoReplicas(_ body: (PostgresStorage, PostgresStorage) async throws -> Void) async throws {
    let url = try await freshDatabase()
    let a = try await PostgresStorage.open(url: url, logger: quiet)
    let b = try await PostgresStorage.open(url: url, logger: quiet)
    try await running(a) {
        try await running(b) { try await body(a, b) }
    }
}

/// A new database on the tests' shared PostgreSQL.
func freshDatabase() async throws -> DatabaseURL {
    let server = try await PostgresServer.shared()
    return try DatabaseURL(parsing: server.url(database: try await server.makeDatabase()))
}

/// The next change of `jobID` that `matches`, from a subscription of the storage's changes (the suite's time limit
/// bounds the wait). Called outside `#expect`, whose expansion would work on a copy of the iterator.
func next(
    _ changes: inout AsyncStream<JobChange>.Iterator, of jobID: JobID, where matches: (JobChange) -> Bool
) async -> JobChange? {
    while let change = await changes.next() {
        if change.jobID == jobID, matches(change) { return change }
    }
    return nil
}

/// Staged PNGs of these sizes, of the default tenant: their ids, in order.
func stage(sizes: [Int64], on storage: PostgresStorage) async throws -> [MediaID] {
    var ids: [MediaID] = []
    for size in sizes {
        let medium = Media(
            id: MediaID.generate(at: .now()), contentType: .png, size: size, sha256: String(repeating: "ab", count: 32), createdAt: .now())
        try await storage.media.insert(medium, tenant: .default, stagingPath: "staging/\(medium.id)")
        ids.append(medium.id)
    }
    return ids
}

@Suite("PostgreSQL change feed", .timeLimit(.minutes(1)))
struct ChangeFeedTests {
    @Test("a replica hears another's commits: those made before it listened, and those made while its listener was cut")
    func acrossReplicas() async throws {
        let url = try await freshDatabase()
        let a = try await PostgresStorage.open(url: url, logger: quiet)
        try await running(a) {
            let creation = try await a.posts.create(PostRequest(text: "heard", mediaIDs: []), tenant: .default, idempotency: nil, now: .now())
            guard case .created(let created) = creation else { throw PostgresTestError("expected a creation, got \(creation)") }
            let b = try await PostgresStorage.open(url: url, logger: quiet)
            var heard = b.changes.subscribe().makeAsyncIterator()
            try await running(b) {
                // B started after the job was created: its listener's first connection read it back.
                let queued = await next(&heard, of: created.job.id) { $0.state == .queued }
                #expect(queued != nil)

                // Cut B's listener; the claim A commits once its backend has gone is read back after B reconnects.
                let listener = try await terminateListener(url)
                let claimed = try await a.jobs.claim(runner: "a", leaseUntil: Timestamp.now().adding(milliseconds: 60_000), now: .now())
                #expect(claimed?.jobID == created.job.id)
                let ran = await next(&heard, of: created.job.id) { $0.state == .running }
                #expect(ran?.version ?? 0 > 0)
                #expect(b.listenerConnections >= 2, "listener \(listener) was cut; B heard the claim on a new connection")

                // A cancel request made through A reaches B as a change, with its flag.
                _ = try await a.jobs.requestCancel(id: created.job.id, tenant: .default, now: .now())
                let cancel = await next(&heard, of: created.job.id) { $0.cancelRequested }
                #expect(cancel != nil)
            }
        }
    }

    @Test("a status poll is answered from memory while its job has not moved, and read again once a change is heard")
    func pollsFromMemory() async throws {
        try await withTwoReplicas { a, b in
            // Hearing every change first (bounded: the listener connects within a second or two).
            for _ in 0..<100 where !a.feed.isListening {
                try await Task.sleep(for: .milliseconds(50))
            }
            let creation = try await a.posts.create(PostRequest(text: "polled", mediaIDs: []), tenant: .default, idempotency: nil, now: .now())
            guard case .created(let created) = creation else { throw PostgresTestError("expected a creation, got \(creation)") }
            let id = created.job.id
            let reader = try a.statusReader(connections: 1)
            let read = try reader.job(id: id, tenant: .default)
            #expect(read?.state == .queued)
            let before = a.feed.polledAnswers
            #expect(try reader.job(id: id, tenant: .default) == read)
            #expect(a.feed.polledAnswers == before + 1)
            // Another tenant's poll of the id is no hit.
            #expect(try reader.job(id: id, tenant: try #require(Tenant(rawValue: "other"))) == nil)

            // Cancelled through B: once A hears it, A's poll reads the job again and shows it.
            var heard = a.changes.subscribe().makeAsyncIterator()
            _ = try await b.jobs.requestCancel(id: id, tenant: .default, now: .now())
            let cancelled = await next(&heard, of: id) { $0.state == .cancelled }
            #expect(cancelled != nil)
            #expect(try reader.job(id: id, tenant: .default)?.state == .cancelled)
            #expect(a.feed.polledAnswers == before + 1)
            #expect(try reader.job(id: id, tenant: .default)?.state == .cancelled)
            #expect(a.feed.polledAnswers == before + 2)
        }
    }

    @Test(
        "a job this replica creates, claims or commits answers the next long poll from memory, as a read would; another tenant's or another replica's read it"
    )
    func writtenJobAnswersFromMemory() async throws {
        try await withTwoReplicas { a, b in
            for _ in 0..<100 where !(a.feed.isListening && b.feed.isListening) {
                try await Task.sleep(for: .milliseconds(50))
            }
            let mediaIDs = try await stage(sizes: [100, 200], on: a)
            let creation = try await a.posts.create(
                PostRequest(text: "written", mediaIDs: mediaIDs), tenant: .default, idempotency: nil, now: .now())
            guard case .created(let created) = creation else { throw PostgresTestError("expected a creation, got \(creation)") }
            var heard = b.changes.subscribe().makeAsyncIterator()
            // Each answer from memory is the job as the database has it then (`find` always reads).
            var before = a.feed.polledAnswers
            #expect(try await a.jobs.snapshot(id: created.job.id, tenant: .default)?.job == a.jobs.find(id: created.job.id, tenant: .default))
            #expect(a.feed.polledAnswers == before + 1, "the created job answered without a read")

            let claimed = try #require(try await a.jobs.claim(runner: "a", leaseUntil: Timestamp.now().adding(milliseconds: 60_000), now: .now()))
            before = a.feed.polledAnswers
            let running = try #require(try await a.jobs.snapshot(id: created.job.id, tenant: .default))
            #expect(running.job.state == .running && running.job.uploads.map(\.size) == [100, 200])
            #expect(running.job == (try await a.jobs.find(id: created.job.id, tenant: .default)))
            #expect(a.feed.polledAnswers == before + 1, "the claimed job answered without a read")
            // A long poll's read (through the pool) is answered the same way.
            #expect(try await a.statusReader(connections: 1).read(id: created.job.id, tenant: .default) == running.job)
            #expect(a.feed.polledAnswers == before + 2)

            let objects = Dictionary(uniqueKeysWithValues: mediaIDs.map { ($0, StoredObject(key: "k/\($0)", url: "https://cdn.example/\($0)")) })
            guard case .done(let done) = try await a.jobs.commit(claimed.lease, objects: objects, now: .now()) else {
                throw PostgresTestError("the commit was refused")
            }
            before = a.feed.polledAnswers
            let snapshot = try #require(try await a.jobs.snapshot(id: created.job.id, tenant: .default))
            #expect(snapshot.job == done && snapshot.job.state == .succeeded)
            #expect(a.feed.polledAnswers == before + 1, "answered without a read")
            #expect(try await a.jobs.snapshot(id: created.job.id, tenant: try #require(Tenant(rawValue: "other"))) == nil)
            // B did not commit it: B reads it (and then remembers it).
            _ = await next(&heard, of: created.job.id) { $0.state == .succeeded }
            let readByB = b.feed.polledAnswers
            #expect(try await b.jobs.snapshot(id: created.job.id, tenant: .default)?.job == done)
            #expect(b.feed.polledAnswers == readByB)
            #expect(try await b.jobs.snapshot(id: created.job.id, tenant: .default)?.job == done)
            #expect(b.feed.polledAnswers == readByB + 1)
        }
    }

    @Test("a slow call and a cut listener are no outage: the call is answered, and the next calls too")
    func slowIsNotDown() async throws {
        let url = try await freshDatabase()
        let storage = try await PostgresStorage.open(url: url, logger: quiet)
        try await running(storage) {
            // Longer than any deadline a call could be given for an outage (the API answers one within 5 s).
            async let slow = storage.run("SELECT pg_sleep(5.5)::text")
            _ = try await storage.run("SELECT 1")
            let cut = try await terminateListener(url)
            // Answered through the pool while the listener connects again.
            let answered = try await storage.run("SELECT 2").first?.decode(Int.self)
            #expect(answered == 2)
            let slept = try await slow
            #expect(slept.count == 1, "the listener \(cut) was cut meanwhile")
            #expect(storage.reachability.problem == nil)
        }
    }

    @Test("the listener's probe is timed from when its event loop sends it: a loop running late is no outage")
    func lateLoopIsNotDown() async throws {
        let url = try await freshDatabase()
        // A loop of its own: the stall below holds up nothing else.
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let loop = group.next()
        let connection = try await PostgresConnection.connect(on: loop, configuration: try url.connectionConfiguration(), id: 9, logger: quiet)
            .get()
        // The loop is held for twice the patience before it can send the probe (a starved thread, a busy handler).
        let held = loop.submit { usleep(2_000_000) }
        let asked = ChangeFeed.ask(connection, within: .seconds(1), logger: quiet)
        _ = try await held.get()
        await #expect(throws: Never.self) { try await asked.get() }
        // A server that does not answer is still found out.
        // (Sent by the loop before the probe: the loop runs what it is given in order.)
        let slept = loop.flatSubmit { connection.query("SELECT pg_sleep(2)", logger: quiet) }
        await #expect(throws: DeadlinePassed.self) { try await ChangeFeed.ask(connection, within: .milliseconds(500), logger: quiet).get() }
        #expect(try await slept.get().rows.count == 1)
        try await connection.close()
        try await group.shutdownGracefully()
    }

    /// Terminates the listener connection of the one storage that listens on `url`'s database and waits until its
    /// backend has gone; its pid.
    @Test("a blocking read on a connection the server has closed since (a restart) is answered on a new one, not failed")
    func blockingReadAfterItsConnectionClosed() async throws {
        let url = try await freshDatabase()
        let storage = try await PostgresStorage.open(url: url, logger: quiet)
        try await running(storage) {
            // Every connection of the blocking reads made (they are taken in turn).
            for _ in 0..<8 { #expect(try storage.keys.find(hash: "none") == nil) }
            let connection = try await PostgresConnection.connect(configuration: try url.connectionConfiguration(), id: 9, logger: quiet)
            let terminated = try await connection.query(
                """
                SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 5000))::int FROM pg_stat_activity
                WHERE application_name = \(BlockingConnections.applicationName) AND datname = current_database()
                """, logger: quiet
            ).decode(Int.self).reduce(0, +)
            try await connection.close()
            #expect(terminated == 4)
            // Each read lands on a closed connection first: it is made again and the read answered.
            for _ in 0..<8 { #expect(try storage.keys.find(hash: "none") == nil) }
        }
    }

    private func terminateListener(_ url: DatabaseURL) async throws -> Int {
        let connection = try await PostgresConnection.connect(configuration: try url.connectionConfiguration(), id: 9, logger: quiet)
        do {
            let pid = try await terminateListener(on: connection)
            try await connection.close()
            return pid
        } catch {
            try? await connection.close()
            throw error
        }
    }

    private func terminateListener(on connection: PostgresConnection) async throws -> Int {
        let listening = """
            SELECT pid FROM pg_stat_activity WHERE application_name = 'herald-listener' AND datname = current_database()
            """
        // The one listener that is up now (the storage that created the job has one too: take B's, the newer).
        let pids = try await connection.query(PostgresQuery(unsafeSQL: listening + " ORDER BY backend_start DESC"), logger: quiet)
            .decode(Int.self).reduce(into: [Int]()) { $0.append($1) }
        guard let pid = pids.first else { throw PostgresTestError("no listener to cut") }
        try await connection.query("SELECT pg_terminate_backend(\(pid)::integer)", logger: quiet)
        // Bounded: a terminated backend exits within milliseconds.
        for _ in 0..<200 {
            let alive = try await connection.query("SELECT count(*) FROM pg_stat_activity WHERE pid = \(pid)", logger: quiet)
                .decode(Int.self).reduce(0, +)
            if alive == 0 { return pid }
            try await Task.sleep(for: .milliseconds(10))
        }
        throw PostgresTestError("the listener's backend \(pid) did not exit")
    }
}

struct PostgresTestError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
