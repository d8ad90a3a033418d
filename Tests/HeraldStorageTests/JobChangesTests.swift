import GRDB
import HeraldCore
import HeraldStorage
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
            let stored = try await fixture.int("SELECT version FROM jobs WHERE id = ?", [jobID])
            #expect(stored == cancelled.version)
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
