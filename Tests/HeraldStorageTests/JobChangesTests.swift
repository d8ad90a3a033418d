import Foundation
import GRDB
import HeraldCore
import HeraldStorage
import Synchronization
import Testing

@Suite("Job changes come from the writes")
struct JobChangesTests {
    private typealias At = RepositoryFixture

    @Test("every committed change to a job is announced once, after the commit, with a growing version")
    func everyWriteAnnounces() async throws {
        try await withRepositoryFixture { fixture in
            let changes = fixture.storage.changes.subscribe()
            var iterator = changes.makeAsyncIterator()
            let media = try await fixture.stage(1)

            let scheduled = try await fixture.create(text: "later", media: media, scheduledAt: At.at(10), at: At.at(0))
            let jobID = scheduled.job.id
            let created = try #require(await iterator.next())
            #expect(created.jobID == jobID && created.state == .scheduled)

            // Scheduled to queued: told to whoever listens (a long-poll used to see it only at its next re-read).
            #expect(try await fixture.jobs.promoteDue(now: At.at(10)) == 1)
            let promoted = try #require(await iterator.next())
            #expect(promoted.state == .queued && promoted.version > created.version)

            _ = try await fixture.jobs.claim(runner: "a", leaseUntil: At.at(60), now: At.at(11))
            let claimed = try #require(await iterator.next())
            #expect(claimed.state == .running && claimed.version > promoted.version)

            // An upload back to pending for a retry changes the job too.
            try await fixture.jobs.updateUpload(jobID: jobID, mediaID: media[0], state: .uploading, attempts: 1, error: nil)
            try await fixture.jobs.updateUpload(jobID: jobID, mediaID: media[0], state: .pending, attempts: 1, error: "HTTP 503")
            let uploading = try #require(await iterator.next())
            let retried = try #require(await iterator.next())
            #expect(uploading.version > claimed.version && retried.version > uploading.version)

            // A waiter for the job's end learns without a read that these changes did not end it.
            let generation = fixture.storage.changes.generation
            #expect(!fixture.storage.changes.changedButNotDone(jobID, after: generation), "no change since")
            try await fixture.jobs.updateUpload(jobID: jobID, mediaID: media[0], state: .uploading, attempts: 2, error: nil)
            _ = try #require(await iterator.next())
            #expect(fixture.storage.changes.changedButNotDone(jobID, after: generation))

            // A write that changes nothing says nothing: a lease renewal, a requeue by a runner that does not hold the job.
            #expect(try await fixture.jobs.renewLease(jobID: jobID, runner: "a", until: At.at(90)))
            try await fixture.jobs.requeue(jobID: jobID, runner: "someone-else")

            guard case .requested = try await fixture.jobs.requestCancel(id: jobID, tenant: .default, now: At.at(12)) else {
                Issue.record("a running job's cancel is a request")
                return
            }
            let requested = try #require(await iterator.next())
            #expect(requested.cancelRequested && requested.state == .running && requested.version > retried.version)

            _ = try await fixture.jobs.finishCancelled(jobID: jobID, runner: "a", now: At.at(13))
            let cancelled = try #require(await iterator.next())
            #expect(cancelled.state == .cancelled && cancelled.version > requested.version)
            #expect(!fixture.storage.changes.changedButNotDone(jobID, after: generation), "its last change ended it")
            let stored = try await fixture.int("SELECT version FROM jobs WHERE id = ?", [jobID])
            #expect(stored == cancelled.version)
        }
    }

    @Test("bytes taken are kept in memory, shown by every read, announced at most every 250 ms, written at state changes")
    func byteProgress() async throws {
        try await withRepositoryFixture { fixture in
            let media = try await fixture.stage(2)  // sizes 100 and 101
            let created = try await fixture.create(text: "bytes", media: media, at: At.at(0))
            let jobID = created.job.id
            _ = try await fixture.jobs.claim(runner: "a", leaseUntil: At.at(60), now: At.at(1))
            try await fixture.jobs.updateUpload(jobID: jobID, mediaID: media[0], state: .uploading, attempts: 1, error: nil)
            let before = try #require(try await fixture.jobs.snapshot(id: jobID, tenant: .default))
            let changes = fixture.storage.changes.subscribe()
            var iterator = changes.makeAsyncIterator()
            let reader = try JobStatusReader(fixture.storage, connections: 1)

            fixture.jobs.reportBytes(jobID: jobID, mediaID: media[0], bytes: 40)
            let announced = ContinuousClock.now
            fixture.jobs.reportBytes(jobID: jobID, mediaID: media[0], bytes: 60)  // within 250 ms of the first: not announced
            let first = try #require(await iterator.next())
            #expect(first.kind == .bytes && first.jobID == jobID)

            // Every read shows the latest count; SQLite still holds the state change's 0 and the same version.
            let live = try #require(try await fixture.jobs.snapshot(id: jobID, tenant: .default))
            #expect(live.job.uploads.map(\.bytesSent) == [60, 0])
            #expect(live.job.progress.bytesUploaded == 60 && live.job.progress.bytesTotal == 201 && live.job.progress.percent == 29)
            #expect(live.version == before.version && live.eventID == before.eventID + 1)  // one byte event, not two
            #expect(try await fixture.jobs.find(id: jobID, tenant: .default)?.uploads.first?.bytesSent == 60)
            #expect(try reader.job(id: jobID, tenant: .default)?.uploads.first?.bytesSent == 60)
            #expect(try await fixture.jobs.list(tenant: .default, state: nil, limit: 10, after: nil).data.first?.uploads.first?.bytesSent == 60)
            #expect(try await fixture.int("SELECT bytes_sent FROM uploads WHERE job_id = ? AND media_id = ?", [jobID, media[0]]) == 0)
            // Another tenant's read finds nothing, bytes or not.
            #expect(try await fixture.jobs.snapshot(id: jobID, tenant: Tenant(rawValue: "other")!) == nil)

            // A report once the interval has passed is announced, with a newer event id for the same version. (The wait
            // is the interval under test, not a synchronisation.)
            try await Task.sleep(until: announced + fixture.storage.uploadProgress.interval)
            fixture.jobs.reportBytes(jobID: jobID, mediaID: media[0], bytes: 80)
            let second = try #require(await iterator.next())
            #expect(second.kind == .bytes)
            let later = try #require(try await fixture.jobs.snapshot(id: jobID, tenant: .default))
            #expect(later.job.uploads.first?.bytesSent == 80 && later.version == before.version && later.eventID == live.eventID + 1)

            // A retry writes what the attempt reached; the next attempt starts from 0; uploaded counts every byte.
            try await fixture.jobs.updateUpload(jobID: jobID, mediaID: media[0], state: .pending, attempts: 1, error: "HTTP 503")
            #expect(try await fixture.int("SELECT bytes_sent FROM uploads WHERE job_id = ? AND media_id = ?", [jobID, media[0]]) == 80)
            try await fixture.jobs.updateUpload(jobID: jobID, mediaID: media[0], state: .uploading, attempts: 2, error: nil)
            let restarted = try #require(try await fixture.jobs.snapshot(id: jobID, tenant: .default))
            #expect(restarted.job.uploads.first?.bytesSent == 0 && restarted.eventID > later.eventID)
            try await fixture.jobs.updateUpload(jobID: jobID, mediaID: media[0], state: .uploaded, attempts: 2, error: nil)
            #expect(try await fixture.int("SELECT bytes_sent FROM uploads WHERE job_id = ? AND media_id = ?", [jobID, media[0]]) == 100)

            // Back in the queue, to run from the start: every upload's bytes are forgotten, in memory and in SQLite.
            try await fixture.jobs.updateUpload(jobID: jobID, mediaID: media[1], state: .uploading, attempts: 1, error: nil)
            fixture.jobs.reportBytes(jobID: jobID, mediaID: media[1], bytes: 50)
            try await fixture.jobs.requeue(jobID: jobID, runner: "a")
            let queued = try #require(try await fixture.jobs.find(id: jobID, tenant: .default))
            #expect(queued.uploads.map(\.bytesSent) == [0, 0])
            #expect(try await fixture.int("SELECT sum(bytes_sent) FROM uploads WHERE job_id = ?", [jobID]) == 0)
            // A report for a job that is not running is dropped.
            fixture.jobs.reportBytes(jobID: jobID, mediaID: media[1], bytes: 70)
            #expect(try await fixture.jobs.find(id: jobID, tenant: .default)?.uploads.map(\.bytesSent) == [0, 0])
        }
    }

    @Test("a job's end announces webhook deliveries only when its transaction wrote some (the outbox)")
    func deliveriesAreAnnouncedWhenWritten() async throws {
        try await withRepositoryFixture { fixture in
            let announced = Mutex(0)
            fixture.storage.changes.observeDeliveries { announced.withLock { $0 += 1 } }
            let webhooks = WebhookRepository(fixture.storage)
            let failures = Webhook(id: WebhookID.generate(), url: "https://hooks.example/h", events: [.jobFailed], createdAt: At.at(0))
            try await webhooks.insert(failures, tenant: .default, secret: "whsec_c2VjcmV0")

            // Cancelled: no endpoint takes job.cancelled, nothing written, nothing announced.
            let first = try await fixture.create(text: "a", scheduledAt: At.at(100), at: At.at(0))
            _ = try await fixture.jobs.requestCancel(id: first.job.id, tenant: .default, now: At.at(1))
            #expect(announced.withLock { $0 } == 0)
            #expect(try await fixture.int("SELECT count(*) FROM webhook_deliveries") == 0)

            // Failed: one delivery, written with the job's end and announced once.
            let second = try await fixture.create(text: "b", at: At.at(2))
            _ = try await fixture.jobs.claim(runner: "a", leaseUntil: At.at(60), now: At.at(3))
            let error = Job.Failure(code: .internal, message: "boom")
            #expect(try await fixture.jobs.fail(jobID: second.job.id, runner: "a", error: error, now: At.at(4)) != .lostLease)
            #expect(announced.withLock { $0 } == 1)
            let pending = try await webhooks.due(now: .now(), excluding: [], limit: 10)
            #expect(pending.count == 1 && pending.first?.webhookID == failures.id)
            let body = try #require(try JSONSerialization.jsonObject(with: Data(pending[0].body)) as? [String: Any])
            #expect(body["type"] as? String == "job.failed")
            #expect(((body["data"] as? [String: Any])?["job"] as? [String: Any])?["id"] as? String == second.job.id.rawValue)
        }
    }

    @Test("a long-poll's wait ends with the promotion of its scheduled job")
    func promotionWakesAWaiter() async throws {
        try await withRepositoryFixture { fixture in
            let scheduled = try await fixture.create(text: "later", scheduledAt: At.at(10), at: At.at(0))
            let feed = fixture.storage.changes
            let generation = feed.generation
            async let woken: Void = feed.waitForChange(of: scheduled.job.id, after: generation, timeout: .seconds(60))
            let started = ContinuousClock.now
            #expect(try await fixture.jobs.promoteDue(now: At.at(10)) == 1)
            await woken
            #expect(ContinuousClock.now - started < .seconds(30), "woken by the change, not the timeout")
            // A change already made before the wait began ends it at once.
            await feed.waitForChange(of: scheduled.job.id, after: generation, timeout: .seconds(60))
        }
    }

    @Test("a transaction that fails announces nothing")
    func rollbackAnnouncesNothing() async throws {
        try await withRepositoryFixture { fixture in
            let media = try await fixture.stage(1)
            let created = try await fixture.create(text: "x", media: media, at: At.at(0))
            _ = try await fixture.jobs.claim(runner: "a", leaseUntil: At.at(60), now: At.at(1))
            let generation = fixture.storage.changes.generation
            // The commit lacks the medium's object: refused, rolled back.
            await #expect(throws: (any Error).self) {
                try await fixture.jobs.commit(jobID: created.job.id, runner: "a", objects: [:], now: At.at(2))
            }
            #expect(fixture.storage.changes.generation == generation)
        }
    }
}
