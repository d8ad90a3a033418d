import Dispatch
import GRDB
import HeraldCore
import HeraldStorage
import Synchronization
import Testing

@testable import SQLiteStorage

@Suite("Group commit: writes that arrive together commit together")
struct GroupCommitTests {
    @Test("writes queued while the writer is busy share one commit, in arrival order, each with its own value")
    func queuedWritesShareOneCommit() async throws {
        try await withNotes { storage, commits in
            let writes = storage.whileWriterBusy {
                (1...5).map { n in
                    storage.groupCommit.submit { db in
                        // Each sees the ones before it: one transaction, in arrival order.
                        let before = try Int.fetchOne(db, sql: "SELECT count(*) FROM notes")!
                        try db.execute(sql: "INSERT INTO notes (id) VALUES (?)", arguments: [n])
                        return before
                    }
                }
            }
            var values: [Int] = []
            for write in writes { values.append(try await write.value) }
            #expect(values == [0, 1, 2, 3, 4])
            #expect(commits.count == 1)
            #expect(try await storage.noteIDs() == [1, 2, 3, 4, 5])
        }
    }

    @Test("a write that throws, or breaks a constraint, is rolled back alone: the others commit")
    func aFailingWriteIsRolledBackAlone() async throws {
        struct Refused: Error {}
        try await withNotes { storage, commits in
            let (first, refused, duplicate, last) = storage.whileWriterBusy {
                (
                    storage.groupCommit.submit { db in try db.execute(sql: "INSERT INTO notes (id) VALUES (1)") },
                    storage.groupCommit.submit { db in
                        try db.execute(sql: "INSERT INTO notes (id) VALUES (2)")
                        throw Refused()
                    },
                    storage.groupCommit.submit { db in
                        try db.execute(sql: "INSERT INTO notes (id) VALUES (3)")
                        try db.execute(sql: "INSERT INTO notes (id) VALUES (1)")  // the first one's id
                    },
                    storage.groupCommit.submit { db in try db.execute(sql: "INSERT INTO notes (id) VALUES (4)") }
                )
            }
            try await first.value
            await #expect(throws: Refused.self) { try await refused.value }
            let error = try await #require(throws: DatabaseError.self) { try await duplicate.value }
            #expect(error.extendedResultCode == .SQLITE_CONSTRAINT_PRIMARYKEY)
            try await last.value
            #expect(commits.count == 1)
            #expect(try await storage.noteIDs() == [1, 4])
        }
    }

    @Test("a deferred foreign key left unsatisfied fails its own write, not the batch's commit")
    func deferredForeignKeysFailTheirOwnWrite() async throws {
        try await withNotes { storage, commits in
            let (orphan, adopted) = storage.whileWriterBusy {
                (
                    storage.groupCommit.submit { db in try db.execute(sql: "INSERT INTO replies (id, note) VALUES (1, 9)") },
                    storage.groupCommit.submit { db in
                        try db.execute(sql: "INSERT INTO replies (id, note) VALUES (2, 7)")  // its note comes after: deferred
                        try db.execute(sql: "INSERT INTO notes (id) VALUES (7)")
                    }
                )
            }
            let error = try await #require(throws: DatabaseError.self) { try await orphan.value }
            #expect(error.extendedResultCode == .SQLITE_CONSTRAINT_FOREIGNKEY)
            try await adopted.value
            #expect(commits.count == 1)

            // Alone, the same check is SQLite's own, at the commit.
            let lone = try await #require(throws: DatabaseError.self) {
                try await storage.groupCommit.write { db in try db.execute(sql: "INSERT INTO replies (id, note) VALUES (3, 9)") }
            }
            #expect(lone.extendedResultCode == .SQLITE_CONSTRAINT_FOREIGNKEY)
            let replies = try await storage.pool.read { db in try Int.fetchAll(db, sql: "SELECT id FROM replies ORDER BY id") }
            #expect(replies == [2])
        }
    }

    @Test("when the shared transaction is lost, no write of the batch is reported done")
    func aLostTransactionFailsEveryWrite() async throws {
        try await withNotes { storage, commits in
            let writes = storage.whileWriterBusy {
                [
                    storage.groupCommit.submit { db in try db.execute(sql: "INSERT INTO notes (id) VALUES (1)") },
                    // Ends the shared transaction under everyone's feet, as SQLite does on a full disk or an I/O error.
                    storage.groupCommit.submit { db in try db.execute(sql: "ROLLBACK") },
                    storage.groupCommit.submit { db in try db.execute(sql: "INSERT INTO notes (id) VALUES (3)") },
                ]
            }
            for write in writes {
                await #expect(throws: (any Error).self) { try await write.value }
            }
            #expect(commits.count == 0)
            #expect(try await storage.noteIDs() == [])
            // The writer goes on.
            try await storage.groupCommit.write { db in try db.execute(sql: "INSERT INTO notes (id) VALUES (4)") }
            #expect(try await storage.noteIDs() == [4])
        }
    }

    @Test("a write whose task is cancelled before its turn writes nothing and throws CancellationError")
    func aCancelledWriteWritesNothing() async throws {
        try await withNotes { storage, _ in
            let task = Task {
                withUnsafeCurrentTask { $0?.cancel() }
                try await storage.groupCommit.write { db in try db.execute(sql: "INSERT INTO notes (id) VALUES (1)") }
            }
            await #expect(throws: CancellationError.self) { try await task.value }
            let written = try await storage.noteIDs()
            #expect(written == [])
        }
    }

    @Test("the jobs a batch changed are announced in commit order, once it has committed")
    func changesAreAnnouncedInCommitOrder() async throws {
        try await withRepositoryFixture { fixture in
            let media = try await fixture.stage(3)
            let changes = fixture.storage.changes.subscribe()
            var iterator = changes.makeAsyncIterator()
            let storage = fixture.storage
            let posts = fixture.posts
            // Three creations queued behind a busy writer (in one batch or more): announced in the order they committed.
            let created = try await withThrowingTaskGroup(of: (Int, JobID).self) { group in
                let busy = DispatchSemaphore(value: 0)
                storage.pool.asyncWriteWithoutTransaction { _ in busy.wait() }
                for index in 0..<3 {
                    group.addTask {
                        let request = PostRequest(text: "post \(index)", mediaIDs: [media[index]])
                        guard case .created(let made) = try await posts.create(request, tenant: .default, idempotency: nil, now: .now()) else {
                            throw DatabaseError(message: "not created")
                        }
                        return (index, made.job.id)
                    }
                }
                busy.signal()
                var ids: [Int: JobID] = [:]
                for try await (index, id) in group { ids[index] = id }
                return ids
            }
            var announced: [JobID] = []
            for _ in 0..<3 { announced.append(try #require(await iterator.next()).jobID) }
            #expect(Set(announced) == Set(created.values))
            let committedOrder = try await storage.pool.read { db in
                try JobID.fetchAll(db, sql: "SELECT id FROM jobs ORDER BY rowid")
            }
            #expect(announced == committedOrder)
        }
    }
}

/// Counts the commits of the database it observes.
private final class CommitCount: TransactionObserver, Sendable {
    private let commits = Mutex(0)

    var count: Int { commits.withLock { $0 } }

    func observes(eventsOfKind eventKind: DatabaseEventKind) -> Bool { false }
    func databaseDidChange(with event: DatabaseEvent) {}
    func databaseDidRollback(_ db: Database) {}
    func databaseDidCommit(_ db: Database) { commits.withLock { $0 += 1 } }
}

/// A fresh storage with two tables of its own (`notes`, and `replies` whose note is a deferred foreign key), and a
/// count of the commits made from here on.
private func withNotes(_ body: (SQLiteStorage, CommitCount) async throws -> Void) async throws {
    try await withRepositoryFixture { fixture in
        let storage = fixture.storage
        try await storage.pool.write { db in
            try db.execute(
                sql: """
                    CREATE TABLE notes (id INTEGER PRIMARY KEY);
                    CREATE TABLE replies (id INTEGER PRIMARY KEY, note INTEGER NOT NULL REFERENCES notes (id) DEFERRABLE INITIALLY DEFERRED);
                    """)
        }
        let commits = CommitCount()
        storage.pool.add(transactionObserver: commits)
        try await body(storage, commits)
        storage.pool.remove(transactionObserver: commits)
    }
}

extension SQLiteStorage {
    /// Runs `submit` while the writer is held by another access, so that everything it submits waits and goes in one
    /// batch once the writer is free.
    fileprivate func whileWriterBusy<T>(_ submit: () throws -> T) rethrows -> T {
        let busy = DispatchSemaphore(value: 0)
        pool.asyncWriteWithoutTransaction { _ in busy.wait() }
        defer { busy.signal() }
        return try submit()
    }

    fileprivate func noteIDs() async throws -> [Int] {
        try await pool.read { db in try Int.fetchAll(db, sql: "SELECT id FROM notes ORDER BY id") }
    }
}
