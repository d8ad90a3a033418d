import Foundation
import GRDB
import HeraldCore
import HeraldStorage
import SQLiteStorage
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

            // An upload's state changes are kept in memory: announced to subscribers as live news of the same version,
            // never as commits (a long-poll waiting for the job's end is not woken by them).
            let generation = fixture.storage.changes.generation
            fixture.jobs.updateUpload(jobID: jobID, mediaID: media[0], state: .uploading, attempts: 1, error: nil)
            fixture.jobs.updateUpload(jobID: jobID, mediaID: media[0], state: .pending, attempts: 1, error: "HTTP 503")
            let uploading = try #require(await iterator.next())
            let retried = try #require(await iterator.next())
            #expect(uploading.kind == .live && retried.kind == .live)
            #expect(uploading.version == claimed.version && retried.version == claimed.version)
            #expect(fixture.storage.changes.generation == generation)
            #expect(!fixture.storage.changes.changedButNotDone(jobID, after: generation), "no change since")

            // A write that changes nothing says nothing: a lease renewal, a requeue by a runner that does not hold the job.
            #expect(try await fixture.jobs.renewLease(JobLease(jobID: jobID, runner: "a", attempt: 1), until: At.at(90)))
            try await fixture.jobs.requeue(JobLease(jobID: jobID, runner: "someone-else", attempt: 1))

            guard case .requested = try await fixture.jobs.requestCancel(id: jobID, tenant: .default, now: At.at(12)) else {
                Issue.record("a running job's cancel is a request")
                return
            }
            let requested = try #require(await iterator.next())
            #expect(requested.cancelRequested && requested.state == .running && requested.version > claimed.version)
            // A waiter for the job's end learns without a read that this change did not end it.
            #expect(fixture.storage.changes.changedButNotDone(jobID, after: generation))

            _ = try await fixture.jobs.finishCancelled(JobLease(jobID: jobID, runner: "a", attempt: 1), now: At.at(13))
            let cancelled = try #require(await iterator.next())
            #expect(cancelled.state == .cancelled && cancelled.version > requested.version)
            #expect(!fixture.storage.changes.changedButNotDone(jobID, after: generation), "its last change ended it")
            let stored = try await fixture.int("SELECT version FROM jobs WHERE id = ?", [jobID])
            #expect(stored == cancelled.version)
        }
    }

    @Test("an upload's state and bytes are kept in memory, shown by every read, announced, written with the job's end")
    func liveUploads() async throws {
        try await withRepositoryFixture { fixture in
            let media = try await fixture.stage(2)  // sizes 100 and 101
            let created = try await fixture.create(text: "bytes", media: media, at: At.at(0))
            let jobID = created.job.id
            _ = try await fixture.jobs.claim(runner: "a", leaseUntil: At.at(60), now: At.at(1))
            fixture.jobs.updateUpload(jobID: jobID, mediaID: media[0], state: .uploading, attempts: 1, error: nil)
            let before = try #require(try await fixture.jobs.snapshot(id: jobID, tenant: .default))
            #expect(before.job.uploads.map(\.state) == [.uploading, .pending])
            let changes = fixture.storage.changes.subscribe()
            var iterator = changes.makeAsyncIterator()
            let reader = try fixture.storage.statusReader(connections: 1)

            fixture.jobs.reportBytes(jobID: jobID, mediaID: media[0], bytes: 40)
            let announced = ContinuousClock.now
            fixture.jobs.reportBytes(jobID: jobID, mediaID: media[0], bytes: 60)  // within 250 ms of the first: not announced
            let first = try #require(await iterator.next())
            #expect(first.kind == .live && first.jobID == jobID)

            // Every read shows the latest count; SQLite still holds the claim's uploads and the same version.
            let live = try #require(try await fixture.jobs.snapshot(id: jobID, tenant: .default))
            #expect(live.job.uploads.map(\.bytesSent) == [60, 0])
            #expect(live.job.progress.bytesUploaded == 60 && live.job.progress.bytesTotal == 201 && live.job.progress.percent == 29)
            #expect(live.version == before.version && live.eventID == before.eventID + 1)  // one byte event, not two
            #expect(try await fixture.jobs.find(id: jobID, tenant: .default)?.uploads.first?.bytesSent == 60)
            #expect(try reader.job(id: jobID, tenant: .default)?.uploads.first?.bytesSent == 60)
            #expect(try await fixture.jobs.list(tenant: .default, state: nil, limit: 10, after: nil).data.first?.uploads.first?.bytesSent == 60)
            #expect(try await fixture.string("SELECT state FROM uploads WHERE job_id = ? AND media_id = ?", [jobID, media[0]]) == "pending")
            #expect(try await fixture.int("SELECT bytes_sent FROM uploads WHERE job_id = ? AND media_id = ?", [jobID, media[0]]) == 0)
            // Another tenant's read finds nothing, bytes or not.
            #expect(try await fixture.jobs.snapshot(id: jobID, tenant: Tenant(rawValue: "other")!) == nil)

            // A report once the interval has passed is announced, with a newer event id for the same version. (The wait
            // is the interval under test, not a synchronisation.)
            try await Task.sleep(until: announced + fixture.storage.uploadProgress.interval)
            fixture.jobs.reportBytes(jobID: jobID, mediaID: media[0], bytes: 80)
            let second = try #require(await iterator.next())
            #expect(second.kind == .live)
            let later = try #require(try await fixture.jobs.snapshot(id: jobID, tenant: .default))
            #expect(later.job.uploads.first?.bytesSent == 80 && later.version == before.version && later.eventID == live.eventID + 1)

            // A state change is announced at once, interval or not. A retry keeps what the attempt reached; the next
            // attempt starts from 0; an uploaded medium counts every byte. SQLite is not written.
            fixture.jobs.updateUpload(jobID: jobID, mediaID: media[0], state: .pending, attempts: 1, error: "HTTP 503")
            #expect(await iterator.next()?.kind == .live)
            let retrying = try #require(try await fixture.jobs.find(id: jobID, tenant: .default)?.uploads.first)
            #expect(retrying == Job.Upload(mediaID: media[0], state: .pending, attempts: 1, error: "HTTP 503", size: 100, bytesSent: 80))
            fixture.jobs.updateUpload(jobID: jobID, mediaID: media[0], state: .uploading, attempts: 2, error: nil)
            let restarted = try #require(try await fixture.jobs.snapshot(id: jobID, tenant: .default))
            #expect(restarted.job.uploads.first?.bytesSent == 0 && restarted.eventID > later.eventID)
            fixture.jobs.updateUpload(jobID: jobID, mediaID: media[0], state: .uploaded, attempts: 2, error: nil)
            #expect(try await fixture.jobs.find(id: jobID, tenant: .default)?.uploads.first?.bytesSent == 100)
            #expect(try await fixture.int("SELECT attempts FROM uploads WHERE job_id = ? AND media_id = ?", [jobID, media[0]]) == 0)

            // Back in the queue, to run from the start: the attempts are written, every upload's bytes forgotten.
            fixture.jobs.updateUpload(jobID: jobID, mediaID: media[1], state: .uploading, attempts: 1, error: nil)
            fixture.jobs.reportBytes(jobID: jobID, mediaID: media[1], bytes: 50)
            try await fixture.jobs.requeue(JobLease(jobID: jobID, runner: "a", attempt: 1))
            let queued = try #require(try await fixture.jobs.find(id: jobID, tenant: .default))
            #expect(queued.uploads.map(\.bytesSent) == [0, 0] && queued.uploads.map(\.state) == [.pending, .pending])
            #expect(queued.uploads.map(\.attempts) == [2, 1])
            #expect(try await fixture.int("SELECT sum(bytes_sent) FROM uploads WHERE job_id = ?", [jobID]) == 0)
            // A change for a job that is not running is dropped.
            fixture.jobs.reportBytes(jobID: jobID, mediaID: media[1], bytes: 70)
            fixture.jobs.updateUpload(jobID: jobID, mediaID: media[1], state: .uploaded, attempts: 9, error: nil)
            #expect(try await fixture.jobs.find(id: jobID, tenant: .default)?.uploads == queued.uploads)

            // Claimed again: the uploads start from what SQLite says. The commit writes them as last set, in its own
            // transaction; a read that saw the job still running shows them too.
            let again = try #require(try await fixture.jobs.claim(runner: "a", leaseUntil: At.at(90), now: At.at(61)))
            var stale = try #require(try await fixture.jobs.find(id: jobID, tenant: .default))
            #expect(stale.uploads.map(\.state) == [.pending, .pending] && stale.uploads.map(\.attempts) == [2, 1])
            fixture.jobs.updateUpload(jobID: jobID, mediaID: media[0], state: .uploaded, attempts: 3, error: nil)
            fixture.jobs.updateUpload(jobID: jobID, mediaID: media[1], state: .uploaded, attempts: 2, error: nil)
            let objects = Dictionary(uniqueKeysWithValues: media.map { ($0, StoredObject(key: "k/\($0)", url: "file:///k/\($0)")) })
            guard case .done(let published) = try await fixture.jobs.commit(again.lease, objects: objects, now: At.at(62)) else {
                Issue.record("the commit was refused")
                return
            }
            #expect(published.uploads.map(\.attempts) == [3, 2] && published.uploads.map(\.bytesSent) == [100, 101])
            #expect(try await fixture.int("SELECT sum(attempts) FROM uploads WHERE job_id = ? AND state = 'uploaded'", [jobID]) == 5)
            fixture.storage.uploadProgress.apply(to: &stale)
            #expect(stale.uploads.map(\.state) == [.uploaded, .uploaded] && stale.uploads.map(\.attempts) == [3, 2])
        }
    }

    @Test("a job's end announces webhook deliveries only when its transaction wrote some (the outbox)")
    func deliveriesAreAnnouncedWhenWritten() async throws {
        try await withRepositoryFixture { fixture in
            let announced = Mutex(0)
            fixture.storage.changes.observeDeliveries { announced.withLock { $0 += 1 } }
            let webhooks = fixture.storage.webhooks
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
            #expect(try await fixture.jobs.fail(JobLease(jobID: second.job.id, runner: "a", attempt: 1), error: error, now: At.at(4)) != .lostLease)
            #expect(announced.withLock { $0 } == 1)
            let pending = try await webhooks.claimDue(now: .now(), leaseUntil: Timestamp.now().adding(milliseconds: 30_000), limit: 10, by: "a")
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

    @Test("a write that bypasses the repositories is announced too: the commit announces, not the code that wrote")
    func everyCommitAnnounces() async throws {
        try await withRepositoryFixture { fixture in
            let media = try await fixture.stage(1)
            let created = try await fixture.create(text: "x", media: media, at: At.at(0))
            let jobID = created.job.id
            let version = try #require(try await fixture.int("SELECT version FROM jobs WHERE id = ?", [jobID]))
            let delivered = Mutex(0)
            fixture.storage.changes.observeDeliveries { delivered.withLock { $0 += 1 } }
            let generation = fixture.storage.changes.generation
            var iterator = fixture.storage.changes.subscribe().makeAsyncIterator()

            // A long-poll waits for the job while a write outside `Storage.write` changes it.
            async let woken: Void = fixture.storage.changes.waitForChange(of: jobID, after: generation, timeout: .seconds(30))
            try await fixture.storage.pool.write { db in
                try db.execute(sql: "UPDATE jobs SET cancel_requested = 1, version = version + 1 WHERE id = ?", arguments: [jobID])
            }
            await woken
            try #require(fixture.storage.changes.generation == generation + 1, "the long-poll was woken by the change, not its timeout")
            let change = try #require(await iterator.next())
            #expect(change.jobID == jobID && change.cancelRequested && change.version == version + 1)

            // A row of a job written without moving its version is not a change (as a lease's renewal).
            try await fixture.storage.pool.write { db in
                try db.execute(sql: "UPDATE jobs SET run_at = ? WHERE id = ?", arguments: [At.at(90).rfc3339, jobID])
            }
            #expect(fixture.storage.changes.generation == generation + 1, "no change announced")

            // Webhook deliveries inserted by any write wake the dispatcher.
            let webhook = Webhook(id: WebhookID.generate(), url: "https://hooks.example/h", events: [.jobFailed], createdAt: At.at(0))
            try await fixture.storage.webhooks.insert(webhook, tenant: .default, secret: "whsec_c2VjcmV0")
            #expect(delivered.withLock { $0 } == 0)
            let time = At.at(0).rfc3339
            try await fixture.storage.pool.write { db in
                try db.execute(
                    sql: "INSERT INTO webhook_events (id, type, body, created_at) VALUES ('e', 'job.failed', X'7B7D', ?)", arguments: [time])
                try db.execute(
                    sql: "INSERT INTO webhook_deliveries (id, webhook_id, event_id, next_attempt_at, created_at) VALUES ('d', ?, 'e', ?, ?)",
                    arguments: [webhook.id, time, time])
            }
            #expect(delivered.withLock { $0 } == 1)
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
                try await fixture.jobs.commit(JobLease(jobID: created.job.id, runner: "a", attempt: 1), objects: [:], now: At.at(2))
            }
            #expect(fixture.storage.changes.generation == generation)
        }
    }
}
