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

            // A state no Herald writes.
            try await plant(fixture, "UPDATE jobs SET state = 'bogus' WHERE id = ?", [id.rawValue])
            #expect(throws: UnreadableRow.self) { try reader.job(id: id, tenant: .default) }
            try await fixture.storage.pool.write { db in
                try db.execute(sql: "UPDATE jobs SET state = 'queued' WHERE id = ?", arguments: [id.rawValue])
            }
            #expect(try reader.job(id: id, tenant: .default)?.state == .queued)
            // An upload's state no Herald writes, one a case's prefix or one longer than a case: each unreadable.
            for state in ["bogus", "pend", "pendings", "PENDING"] {
                try await plant(fixture, "UPDATE uploads SET state = ? WHERE job_id = ?", [state, id.rawValue])
                #expect(throws: UnreadableRow.self, "\(state)") { try reader.job(id: id, tenant: .default) }
            }
            try await plant(fixture, "UPDATE uploads SET state = 'pending' WHERE job_id = ?", [id.rawValue])
            #expect(try reader.job(id: id, tenant: .default)?.uploads.first?.state == .pending)

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

    @Test("a timestamp stored in another RFC 3339 form is written in the fixed one; one that is none is an unreadable row")
    func storedTimestampForms() async throws {
        try await withRepositoryFixture { fixture in
            let reader = try fixture.storage.statusReader(connections: 1)
            let created = try await fixture.create(text: "x", media: try await fixture.stage(1), at: At.at(0))
            let id = created.job.id
            // The schema's CHECK keeps every stored timestamp in the fixed form: set aside to plant others.
            func plant(_ text: String) async throws {
                try await self.plant(fixture, "UPDATE jobs SET created_at = ? WHERE id = ?", [text, id.rawValue])
            }
            for (stored, written) in [
                ("2026-11-22T11:15:30.5+01:00", "2026-11-22T10:15:30.500Z"), ("2026-11-22t10:15:30z", "2026-11-22T10:15:30.000Z"),
                ("2016-12-31T23:59:60.000Z", "2017-01-01T00:00:00.000Z"), ("2026-11-22T10:15:30.123Z", "2026-11-22T10:15:30.123Z"),
            ] {
                try await plant(stored)
                var writer = JSONWriter()
                #expect(try reader.write(id: id, tenant: .default, to: &writer) == .queued)
                let json = String(decoding: writer.bytes, as: UTF8.self)
                #expect(json.contains(#""created_at":"\#(written)""#), "\(stored): \(json)")
                #expect(try reader.job(id: id, tenant: .default)?.createdAt == Timestamp(rfc3339: written))
            }
            for unreadable in ["yesterday", "2026-13-22T10:15:30.123Z", "2026-02-30T10:15:30.123Z", "2026-11-22T10:15:3x.123Z"] {
                try await plant(unreadable)
                var writer = JSONWriter()
                #expect(throws: UnreadableRow.self, "\(unreadable)") { try reader.write(id: id, tenant: .default, to: &writer) }
                #expect(writer.bytes.isEmpty)
                #expect(throws: UnreadableRow.self, "\(unreadable)") { try reader.job(id: id, tenant: .default) }
            }
        }
    }

    /// Runs `sql` with the schema's CHECK constraints set aside: to plant a value no Herald writes.
    private func plant(_ fixture: RepositoryFixture, _ sql: String, _ arguments: StatementArguments) async throws {
        try await fixture.storage.pool.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA ignore_check_constraints = ON")
            try db.execute(sql: sql, arguments: arguments)
            try db.execute(sql: "PRAGMA ignore_check_constraints = OFF")
        }
    }

    /// The reader's job and its JSON (written from the row) are the repository's job and that job's JSON.
    private func expectSame(_ reader: any JobStatusReader, _ fixture: RepositoryFixture, _ ids: [JobID]) async throws {
        for id in ids {
            let expected = try await fixture.jobs.find(id: id, tenant: .default)
            #expect(expected != nil)
            #expect(try reader.job(id: id, tenant: .default) == expected, "job \(id)")
            var writer = JSONWriter()
            #expect(try reader.write(id: id, tenant: .default, to: &writer) == expected?.state)
            #expect(writer.bytes == expected?.json, "job \(id): \(String(decoding: writer.bytes, as: UTF8.self))")
        }
        var writer = JSONWriter()
        #expect(try reader.write(id: JobID.generate(), tenant: .default, to: &writer) == nil)
        #expect(try reader.write(id: ids[0], tenant: Tenant(uncheckedName: "another"), to: &writer) == nil)
        #expect(writer.bytes.isEmpty)
    }
}
