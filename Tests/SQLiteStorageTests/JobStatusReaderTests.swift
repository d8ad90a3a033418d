import GRDB
import HeraldCore
import HeraldStorage
import Testing

@testable import SQLiteStorage

@Suite("JobStatusReader")
struct JobStatusReaderTests {
    private typealias At = RepositoryFixture

    @Test("reads every job shape exactly as JobRepository.find does")
    func matchesFind() async throws {
        try await withRepositoryFixture { fixture in
            let reader = try fixture.storage.statusReader(connections: 2)
            #expect(try reader.job(id: JobID.generate(), tenant: .default) == nil)

            // No media: the LEFT JOIN's single row carries no upload.
            let textOnly = try await fixture.create(text: "text", at: At.at(0))
            // Media in an order other than their insertion: uploads follow the post's positions.
            let media = try await fixture.stage(3)
            let ordered = try await fixture.create(text: "media", media: [media[2], media[0], media[1]], priority: .high, at: At.at(1))
            let failing = try await fixture.create(text: "fails", media: try await fixture.stage(1), at: At.at(2))

            var shapes = [textOnly.job.id, ordered.job.id]
            try await expectSame(reader, fixture, shapes)

            // Running, with an upload's progress and error, then failed with a media error.
            _ = try await fixture.jobs.claim(runner: "a", leaseUntil: At.at(30), now: At.at(3))
            fixture.jobs.updateUpload(jobID: ordered.job.id, mediaID: media[0], state: .failed, attempts: 3, error: "quote \" and\nline")
            try await expectSame(reader, fixture, shapes)
            let failure = Job.Failure(code: .uploadFailed, message: "S3 said no", mediaID: media[0])
            #expect(
                try await fixture.jobs.fail(JobLease(jobID: ordered.job.id, runner: "a", attempt: 1), error: failure, now: At.at(4)) != .lostLease)
            #expect(try reader.job(id: ordered.job.id, tenant: .default)?.error == failure)

            // Cancelled while queued.
            _ = try await fixture.jobs.requestCancel(id: failing.job.id, tenant: .default, now: At.at(5))
            shapes.append(failing.job.id)
            try await expectSame(reader, fixture, shapes)
            #expect(try reader.job(id: ordered.job.id, tenant: .default)?.uploads.map(\.mediaID) == [media[2], media[0], media[1]])
        }
    }

    @Test("sees a write as soon as it commits")
    func seesCommittedWrites() async throws {
        try await withRepositoryFixture { fixture in
            let reader = try fixture.storage.statusReader(connections: 1)
            let created = try await fixture.create(text: "x", media: try await fixture.stage(1), at: At.at(0))
            #expect(try reader.job(id: created.job.id, tenant: .default)?.state == .queued)
            _ = try await fixture.jobs.claim(runner: "a", leaseUntil: At.at(30), now: At.at(1))
            #expect(try reader.job(id: created.job.id, tenant: .default)?.state == .running)
            #expect(try reader.job(id: created.job.id, tenant: .default)?.uploads.map(\.state) == [.pending])
        }
    }

    @Test("throws for a row it cannot read and for SQLite's errors, and reads again once they are gone")
    func errors() async throws {
        try await withRepositoryFixture { fixture in
            let reader = try fixture.storage.statusReader(connections: 1)
            let created = try await fixture.create(text: "x", media: try await fixture.stage(1), at: At.at(0))
            let id = created.job.id

            // A state no Herald writes (the CHECK constraint set aside to plant it).
            try await fixture.storage.pool.writeWithoutTransaction { db in
                try db.execute(sql: "PRAGMA ignore_check_constraints = ON")
                try db.execute(sql: "UPDATE jobs SET state = 'bogus' WHERE id = ?", arguments: [id.rawValue])
                try db.execute(sql: "PRAGMA ignore_check_constraints = OFF")
            }
            #expect(throws: UnreadableRow.self) { try reader.job(id: id, tenant: .default) }
            try await fixture.storage.pool.write { db in
                try db.execute(sql: "UPDATE jobs SET state = 'queued' WHERE id = ?", arguments: [id.rawValue])
            }
            #expect(try reader.job(id: id, tenant: .default)?.state == .queued)

            // A table the prepared statement reads is gone: SQLite's error, thrown (its message kept), not a crash.
            try await fixture.storage.pool.write { db in try db.execute(sql: "ALTER TABLE uploads RENAME TO uploads_away") }
            let error = #expect(throws: DatabaseError.self) { try reader.job(id: id, tenant: .default) }
            #expect(error?.message?.contains("uploads") == true, "\(String(describing: error))")
            // The connection is free again (the error released its lock and reset the statement).
            #expect(throws: DatabaseError.self) { try reader.job(id: id, tenant: .default) }
            try await fixture.storage.pool.write { db in try db.execute(sql: "ALTER TABLE uploads_away RENAME TO uploads") }
            #expect(try reader.job(id: id, tenant: .default)?.uploads.count == 1)
        }
    }

    private func expectSame(_ reader: any JobStatusReader, _ fixture: RepositoryFixture, _ ids: [JobID]) async throws {
        for id in ids {
            let expected = try await fixture.jobs.find(id: id, tenant: .default)
            #expect(expected != nil)
            #expect(try reader.job(id: id, tenant: .default) == expected, "job \(id)")
        }
    }
}
