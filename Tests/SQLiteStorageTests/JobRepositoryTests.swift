import GRDB
import HeraldCore
import HeraldStorage
import SQLiteStorage
import Testing

@Suite("JobRepository")
struct JobRepositoryTests {
    private typealias At = RepositoryFixture

    // MARK: Cancelling

    @Test("cancel: queued and scheduled jobs at once, running ones requested, finished ones refused")
    func requestCancel() async throws {
        try await withRepositoryFixture { fixture in
            #expect(try await fixture.jobs.requestCancel(id: JobID.generate(), tenant: .default, now: At.at(0)) == .notFound)

            let media = try await fixture.stage(2)
            let queued = try await fixture.create(text: "q", media: media, at: At.at(0))
            let result = try await fixture.jobs.requestCancel(id: queued.job.id, tenant: .default, now: At.at(1))
            guard case .cancelledNow(let job) = result else {
                Issue.record("expected cancelledNow, got \(result)")
                return
            }
            #expect(job.state == .cancelled)
            #expect(job.error?.code == .cancelled)
            #expect(job.finishedAt == At.at(1))
            #expect(job.uploads.map(\.state) == [.cancelled, .cancelled])
            let post = try await fixture.posts.find(id: queued.post.id, tenant: .default)
            #expect(post?.state == .cancelled)
            #expect(post?.media.map(\.id) == media)
            #expect(post?.media.allSatisfy { $0.state == .staged && $0.postID == queued.post.id } == true)
            #expect(try await fixture.jobs.requestCancel(id: queued.job.id, tenant: .default, now: At.at(2)) == .alreadyCancelled(job))

            let scheduled = try await fixture.create(text: "s", scheduledAt: At.at(3600), at: At.at(0))
            guard
                case .cancelledNow(let cancelledScheduled) = try await fixture.jobs.requestCancel(
                    id: scheduled.job.id, tenant: .default, now: At.at(1))
            else {
                Issue.record("a scheduled job is cancelled at once")
                return
            }
            #expect(cancelledScheduled.state == .cancelled)
            #expect(try await fixture.posts.find(id: scheduled.post.id, tenant: .default)?.state == .cancelled)

            let running = try await fixture.create(text: "r", at: At.at(5))
            #expect(try await fixture.jobs.claim(runner: "a", leaseUntil: At.at(60), now: At.at(6))?.jobID == running.job.id)
            #expect(try await fixture.jobs.isCancelRequested(jobID: running.job.id) == false)
            guard case .requested(let requested) = try await fixture.jobs.requestCancel(id: running.job.id, tenant: .default, now: At.at(7)) else {
                Issue.record("a running job is only marked")
                return
            }
            #expect(requested.state == .running)
            #expect(requested.cancelRequested)
            #expect(try await fixture.jobs.isCancelRequested(jobID: running.job.id))
            #expect(try await fixture.jobs.requestCancel(id: running.job.id, tenant: .default, now: At.at(8)) == .requested(requested))

            let done = try await fixture.create(text: "d", at: At.at(10))
            _ = try await fixture.jobs.claim(runner: "a", leaseUntil: At.at(60), now: At.at(11))
            guard
                case .done(let succeeded) = try await fixture.jobs.commit(
                    JobLease(jobID: done.job.id, runner: "a", attempt: 1), objects: [:], now: At.at(12))
            else {
                Issue.record("commit was refused")
                return
            }
            #expect(try await fixture.jobs.requestCancel(id: done.job.id, tenant: .default, now: At.at(13)) == .finished(succeeded))
        }
    }

    // MARK: Scheduling

    @Test("promoteDue queues due scheduled jobs and their posts; nextScheduledRunAt is the earliest still waiting")
    func promoteDue() async throws {
        try await withRepositoryFixture { fixture in
            #expect(try await fixture.jobs.nextScheduledRunAt() == nil)
            let soon = try await fixture.create(text: "soon", scheduledAt: At.at(100), at: At.at(0))
            let later = try await fixture.create(text: "later", scheduledAt: At.at(200), at: At.at(0))
            #expect(try await fixture.jobs.nextScheduledRunAt() == At.at(100))
            #expect(try await fixture.jobs.claim(runner: "a", leaseUntil: At.at(500), now: At.at(150)) == nil)

            #expect(try await fixture.jobs.promoteDue(now: At.at(99.999)) == 0)
            #expect(try await fixture.jobs.promoteDue(now: At.at(100)) == 1)
            #expect(try await fixture.jobs.find(id: soon.job.id, tenant: .default)?.state == .queued)
            #expect(try await fixture.posts.find(id: soon.post.id, tenant: .default)?.state == .queued)
            #expect(try await fixture.posts.find(id: later.post.id, tenant: .default)?.state == .scheduled)
            #expect(try await fixture.jobs.nextScheduledRunAt() == At.at(200))
            let counts = try await fixture.jobs.counts()
            #expect(counts.queued == 1 && counts.scheduled == 1 && counts.running == 0)

            #expect(try await fixture.jobs.claim(runner: "a", leaseUntil: At.at(500), now: At.at(150))?.jobID == soon.job.id)
            #expect(try await fixture.jobs.promoteDue(now: At.at(1000)) == 1)
            #expect(try await fixture.jobs.nextScheduledRunAt() == nil)
            let after = try await fixture.jobs.counts()
            #expect(after.queued == 1 && after.scheduled == 0 && after.running == 1)
        }
    }

    // MARK: Claiming

    @Test("claims go by priority, then run_at, then age, one job per claim, only when due")
    func claimOrder() async throws {
        try await withRepositoryFixture { fixture in
            let low = try await fixture.create(text: "low", priority: .low, at: At.at(0))
            let older = try await fixture.create(text: "older, run at 3", scheduledAt: At.at(3), at: At.at(0.5))
            let newer = try await fixture.create(text: "newer, run at 3", scheduledAt: At.at(3), at: At.at(1))
            let early = try await fixture.create(text: "run at 2", at: At.at(2))
            let high = try await fixture.create(text: "high", priority: .high, at: At.at(4))

            // Before anything is due, nothing is claimed.
            #expect(try await fixture.jobs.claim(runner: "a", leaseUntil: At.at(30), now: At.at(-1)) == nil)
            #expect(try await fixture.jobs.promoteDue(now: At.at(10)) == 2)

            var claimed: [JobID] = []
            while let job = try await fixture.jobs.claim(runner: "a", leaseUntil: At.at(60), now: At.at(10)), claimed.count < 10 {
                claimed.append(job.jobID)
            }
            #expect(claimed == [high.job.id, early.job.id, older.job.id, newer.job.id, low.job.id])
            #expect(try await fixture.jobs.counts().running == 5)
        }
    }

    @Test("queue_heads holds each tenant's first queued job and running jobs through creation, claims, cancels, put-backs and ends")
    func queueHeads() async throws {
        try await withRepositoryFixture { fixture in
            func create(_ tenant: String, _ priority: Priority = .normal, at seconds: Double) async throws -> PostAndJob {
                let request = PostRequest(text: tenant, mediaIDs: [], scheduledAt: nil, priority: priority)
                guard
                    case .created(let created) = try await fixture.posts.create(
                        request, tenant: Tenant(rawValue: tenant)!, idempotency: nil, now: At.at(seconds))
                else { throw FixtureError(message: "expected a created post") }
                return created
            }
            func heads() async throws -> [String: String] {
                try await fixture.storage.pool.read { db in
                    try Dictionary(uniqueKeysWithValues: Row.fetchAll(db, sql: "SELECT tenant, job_id FROM queue_heads").map { ($0[0], $0[1]) })
                }
            }
            func running(_ tenant: String) async throws -> Int? {
                try await fixture.int("SELECT running FROM queue_heads WHERE tenant = ?", [tenant])
            }
            let a1 = try await create("a", at: 1)
            let a2 = try await create("a", at: 2)
            let b1 = try await create("b", .low, at: 0)
            #expect(try await heads() == ["a": a1.job.id.rawValue, "b": b1.job.id.rawValue])
            // A higher priority comes first, whatever its age.
            let a3 = try await create("a", .high, at: 3)
            #expect(try await heads()["a"] == a3.job.id.rawValue)
            // Claimed: the next one heads.
            #expect(try await fixture.jobs.claim(runner: "r", leaseUntil: At.at(60), now: At.at(4))?.jobID == a3.job.id)
            #expect(try await heads()["a"] == a1.job.id.rawValue)
            #expect(try await running("a") == 1)
            #expect(try await running("b") == 0)
            // Cancelled: a head gives way, another queued job changes nothing.
            _ = try await fixture.jobs.requestCancel(id: a2.job.id, tenant: Tenant(rawValue: "a")!, now: At.at(5))
            #expect(try await heads()["a"] == a1.job.id.rawValue)
            _ = try await fixture.jobs.requestCancel(id: a1.job.id, tenant: Tenant(rawValue: "a")!, now: At.at(5))
            #expect(try await heads() == ["b": b1.job.id.rawValue])
            // A tenant with a running job and none queued: its next queued job's row counts the running one.
            let a4 = try await create("a", .low, at: 6)
            #expect(try await heads()["a"] == a4.job.id.rawValue)
            #expect(try await running("a") == 1)
            // Put back: a3 heads its tenant again, running none.
            #expect(try await fixture.jobs.reclaimRunning(heldBy: "r") == [a3.job.id])
            #expect(try await heads() == ["a": a3.job.id.rawValue, "b": b1.job.id.rawValue])
            #expect(try await running("a") == 0)
            // Run and finished: the count goes back down.
            let b = try #require(try await fixture.jobs.claim(runner: "r", leaseUntil: At.at(60), now: At.at(7)))
            #expect(b.jobID == a3.job.id)
            #expect(try await running("a") == 1)
            _ = try await fixture.jobs.fail(
                JobLease(jobID: b.jobID, runner: "r", attempt: b.attempt), error: Job.Failure(code: .internal, message: "x"), now: At.at(8))
            #expect(try await running("a") == 0)
            #expect(try await fixture.storage.integrityProblems() == [])

            // A table that drifted is reported by the check (`herald check`).
            try await fixture.storage.pool.write { db in try db.execute(sql: "DELETE FROM queue_heads WHERE tenant = 'b'") }
            #expect(
                try await fixture.storage.integrityProblems() == [
                    "queue_heads: tenant b has no head (- running) where its first queued job is \(b1.job.id.rawValue) (0 running)"
                ])
        }
    }

    @Test("a runner with free workers claims up to that many jobs at once, in claim order, each with its own media")
    func claimSeveral() async throws {
        try await withRepositoryFixture { fixture in
            let media = try await fixture.stage(3)
            let first = try await fixture.create(text: "first", media: [media[0]], at: At.at(0))
            let second = try await fixture.create(text: "second", media: [media[1], media[2]], at: At.at(1))
            let third = try await fixture.create(text: "third", at: At.at(2))
            let fourth = try await fixture.create(text: "fourth, later", scheduledAt: At.at(100), at: At.at(3))

            #expect(try await fixture.jobs.claim(upTo: 0, runner: "a", leaseUntil: At.at(60), now: At.at(10)).isEmpty)
            let two = try await fixture.jobs.claim(upTo: 2, runner: "a", leaseUntil: At.at(60), now: At.at(10))
            #expect(two.map(\.jobID) == [first.job.id, second.job.id])
            #expect(two.map { $0.media.map(\.mediaID) } == [[media[0]], [media[1], media[2]]])
            #expect(two.map(\.attempt) == [1, 1])
            // Fewer are due than asked for: the rest, and nothing scheduled for later.
            let rest = try await fixture.jobs.claim(upTo: 5, runner: "a", leaseUntil: At.at(60), now: At.at(10))
            #expect(rest.map(\.jobID) == [third.job.id])
            #expect(rest.first?.media.isEmpty == true)
            #expect(try await fixture.jobs.counts().running == 3)
            #expect(try await fixture.jobs.find(id: fourth.job.id, tenant: .default)?.state == .scheduled)
            for id in [first.job.id, second.job.id, third.job.id] {
                #expect(try await fixture.string("SELECT locked_by FROM jobs WHERE id = ?", [id]) == "a")
            }
        }
    }

    @Test("a claim runs the job, leases it, starts the post and its media, and hands out the media in order")
    func claimDetails() async throws {
        try await withRepositoryFixture { fixture in
            let media = try await fixture.stage(2)
            let order = [media[1], media[0]]
            let created = try await fixture.create(text: "go", media: order, at: At.at(0))
            // An upload's attempts survive a re-claim.
            let claim = try await fixture.jobs.claim(runner: "runner-1", leaseUntil: At.at(30), now: At.at(1))
            #expect(claim?.jobID == created.job.id)
            #expect(claim?.postID == created.post.id)
            #expect(claim?.attempt == 1)
            #expect(claim?.media.map(\.mediaID) == order)
            #expect(claim?.media.first?.stagingPath == "staging/\(order[0])")
            #expect(claim?.media.first?.size == 101)
            #expect(claim?.media.first?.contentType == .mp4)
            #expect(claim?.media.first?.sha256 == String(repeating: "ab", count: 32))

            let job = try await fixture.jobs.find(id: created.job.id, tenant: .default)
            #expect(job?.state == .running)
            #expect(job?.attempt == 1)
            #expect(job?.startedAt == At.at(1))
            #expect(try await fixture.string("SELECT locked_by FROM jobs WHERE id = ?", [created.job.id]) == "runner-1")
            #expect(try await fixture.string("SELECT locked_until FROM jobs WHERE id = ?", [created.job.id]) == At.at(30).rfc3339)
            let post = try await fixture.posts.find(id: created.post.id, tenant: .default)
            #expect(post?.state == .publishing)
            #expect(post?.media.allSatisfy { $0.state == .uploading } == true)

            // An upload's state is kept in memory and shown by every read; SQLite gets it with the job's end.
            fixture.jobs.updateUpload(jobID: created.job.id, mediaID: order[0], state: .uploading, attempts: 2, error: "timeout")
            let progressed = try await fixture.jobs.find(id: created.job.id, tenant: .default)
            #expect(progressed?.uploads.first == Job.Upload(mediaID: order[0], state: .uploading, attempts: 2, error: "timeout", size: 101))
            #expect(try await fixture.int("SELECT attempts FROM uploads WHERE job_id = ? AND media_id = ?", [created.job.id, order[0]]) == 0)

            // The second claim finds nothing else.
            #expect(try await fixture.jobs.claim(runner: "runner-2", leaseUntil: At.at(30), now: At.at(2)) == nil)

            // Requeued and claimed again: attempt 2, started_at kept, the upload's attempts kept.
            try await fixture.jobs.requeue(JobLease(jobID: created.job.id, runner: "runner-1", attempt: 1))
            let again = try await fixture.jobs.claim(runner: "runner-2", leaseUntil: At.at(60), now: At.at(5))
            #expect(again?.attempt == 2)
            #expect(again?.media.first?.attempts == 2)
            #expect(try await fixture.jobs.find(id: created.job.id, tenant: .default)?.startedAt == At.at(1))
        }
    }

    @Test("only the runner holding a job renews its lease")
    func renewLease() async throws {
        try await withRepositoryFixture { fixture in
            let created = try await fixture.create(text: "lease", at: At.at(0))
            _ = try await fixture.jobs.claim(runner: "a", leaseUntil: At.at(30), now: At.at(1))
            #expect(try await fixture.jobs.renewLease(JobLease(jobID: created.job.id, runner: "a", attempt: 1), until: At.at(40)))
            #expect(try await fixture.string("SELECT locked_until FROM jobs WHERE id = ?", [created.job.id]) == At.at(40).rfc3339)
            #expect(try await fixture.jobs.renewLease(JobLease(jobID: created.job.id, runner: "b", attempt: 1), until: At.at(50)) == false)
            #expect(try await fixture.string("SELECT locked_until FROM jobs WHERE id = ?", [created.job.id]) == At.at(40).rfc3339)
            #expect(try await fixture.jobs.renewLease(JobLease(jobID: JobID.generate(), runner: "a", attempt: 1), until: At.at(50)) == false)
        }
    }

    @Test("jobs whose lease expired are put back in the queue, and their old runner has lost them")
    func reclaimExpired() async throws {
        try await withRepositoryFixture { fixture in
            let media = try await fixture.stage(1)
            let crashed = try await fixture.create(text: "crashed", media: media, at: At.at(0))
            let alive = try await fixture.create(text: "alive", at: At.at(1))
            _ = try await fixture.jobs.claim(runner: "dead", leaseUntil: At.at(30), now: At.at(2))
            _ = try await fixture.jobs.claim(runner: "live", leaseUntil: At.at(30), now: At.at(2))
            #expect(try await fixture.jobs.renewLease(JobLease(jobID: alive.job.id, runner: "live", attempt: 1), until: At.at(90)))

            #expect(try await fixture.jobs.reclaimExpired(now: At.at(29.999)).isEmpty)
            #expect(try await fixture.jobs.reclaimExpired(now: At.at(31)) == [crashed.job.id])

            let job = try await fixture.jobs.find(id: crashed.job.id, tenant: .default)
            #expect(job?.state == .queued)
            #expect(job?.uploads.map(\.state) == [.pending])
            #expect(try await fixture.string("SELECT locked_by FROM jobs WHERE id = ?", [crashed.job.id]) == nil)
            let post = try await fixture.posts.find(id: crashed.post.id, tenant: .default)
            #expect(post?.state == .queued)
            #expect(post?.media.first?.state == .staged)
            #expect(try await fixture.jobs.find(id: alive.job.id, tenant: .default)?.state == .running)

            let reclaimed = try await fixture.jobs.claim(runner: "new", leaseUntil: At.at(90), now: At.at(32))
            #expect(reclaimed?.jobID == crashed.job.id)
            #expect(reclaimed?.attempt == 2)
            // The dead runner, come back, can neither renew nor commit.
            #expect(try await fixture.jobs.renewLease(JobLease(jobID: crashed.job.id, runner: "dead", attempt: 1), until: At.at(100)) == false)
            let objects = [media[0]: StoredObject(key: "k", url: "u")]
            #expect(
                try await fixture.jobs.commit(JobLease(jobID: crashed.job.id, runner: "dead", attempt: 1), objects: objects, now: At.at(33))
                    == .lostLease)
            #expect(try await fixture.posts.find(id: crashed.post.id, tenant: .default)?.state == .publishing)
        }
    }

    // MARK: Finishing

    @Test("commit publishes the post, every medium with its url, every upload, and the job, in one go")
    func commit() async throws {
        try await withRepositoryFixture { fixture in
            let media = try await fixture.stage(3)
            let created = try await fixture.create(text: "publish", media: media, at: At.at(0))
            _ = try await fixture.jobs.claim(runner: "a", leaseUntil: At.at(30), now: At.at(1))
            var objects: [MediaID: StoredObject] = [:]
            for id in media { objects[id] = StoredObject(key: "\(id).png", url: "https://cdn.example/\(id).png") }

            // Missing a url: refused, nothing written.
            var partial = objects
            partial[media[2]] = nil
            await #expect(throws: (any Error).self) {
                try await fixture.jobs.commit(JobLease(jobID: created.job.id, runner: "a", attempt: 1), objects: partial, now: At.at(4))
            }
            #expect(try await fixture.posts.find(id: created.post.id, tenant: .default)?.state == .publishing)
            #expect(try await fixture.media.find(id: media[0], tenant: .default)?.url == nil)

            let completion = try await fixture.jobs.commit(JobLease(jobID: created.job.id, runner: "a", attempt: 1), objects: objects, now: At.at(5))
            guard case .done(let job) = completion else {
                Issue.record("expected done, got \(completion)")
                return
            }
            #expect(job.state == .succeeded)
            #expect(job.done)
            #expect(job.finishedAt == At.at(5))
            #expect(job.error == nil)
            #expect(job.uploads.allSatisfy { $0.state == .uploaded })
            #expect(job.progress.percent == 100)
            #expect(try await fixture.string("SELECT locked_by FROM jobs WHERE id = ?", [created.job.id]) == nil)

            let post = try await fixture.posts.find(id: created.post.id, tenant: .default)
            #expect(post?.state == .published)
            #expect(post?.publishedAt == At.at(5))
            #expect(post?.media.map(\.url) == media.map { "https://cdn.example/\($0).png" })
            #expect(post?.media.allSatisfy { $0.state == .uploaded } == true)
            #expect(try await fixture.string("SELECT object_key FROM media WHERE id = ?", [media[1]]) == "\(media[1]).png")

            // Done: a second commit finds no lease.
            #expect(
                try await fixture.jobs.commit(JobLease(jobID: created.job.id, runner: "a", attempt: 1), objects: objects, now: At.at(6)) == .lostLease
            )
        }
    }

    @Test("commit is refused once cancel was requested, or by a runner that does not hold the job")
    func commitRefused() async throws {
        try await withRepositoryFixture { fixture in
            let media = try await fixture.stage(1)
            let created = try await fixture.create(text: "x", media: media, at: At.at(0))
            _ = try await fixture.jobs.claim(runner: "a", leaseUntil: At.at(30), now: At.at(1))
            let objects = [media[0]: StoredObject(key: "k", url: "u")]

            #expect(
                try await fixture.jobs.commit(JobLease(jobID: created.job.id, runner: "b", attempt: 1), objects: objects, now: At.at(2)) == .lostLease
            )
            _ = try await fixture.jobs.requestCancel(id: created.job.id, tenant: .default, now: At.at(3))
            #expect(
                try await fixture.jobs.commit(JobLease(jobID: created.job.id, runner: "a", attempt: 1), objects: objects, now: At.at(4))
                    == .cancelRequested)

            let post = try await fixture.posts.find(id: created.post.id, tenant: .default)
            #expect(post?.state == .publishing)
            #expect(post?.publishedAt == nil)
            #expect(post?.media.first?.url == nil)
            #expect(try await fixture.jobs.find(id: created.job.id, tenant: .default)?.state == .running)
        }
    }

    @Test("fail: the job and post fail with the error, media go back to staged, unfinished uploads are cancelled")
    func fail() async throws {
        try await withRepositoryFixture { fixture in
            let media = try await fixture.stage(3)
            let created = try await fixture.create(text: "x", media: media, at: At.at(0))
            _ = try await fixture.jobs.claim(runner: "a", leaseUntil: At.at(30), now: At.at(1))
            fixture.jobs.updateUpload(jobID: created.job.id, mediaID: media[0], state: .uploaded, attempts: 1, error: nil)
            fixture.jobs.updateUpload(jobID: created.job.id, mediaID: media[1], state: .failed, attempts: 3, error: "HTTP 403")
            let failure = Job.Failure(code: .uploadFailed, message: "HTTP 403", mediaID: media[1])

            #expect(
                try await fixture.jobs.fail(JobLease(jobID: created.job.id, runner: "b", attempt: 1), error: failure, now: At.at(2)) == .lostLease)
            guard
                case .done(let job) = try await fixture.jobs.fail(
                    JobLease(jobID: created.job.id, runner: "a", attempt: 1), error: failure, now: At.at(3))
            else {
                Issue.record("fail was refused")
                return
            }
            #expect(job.state == .failed)
            #expect(job.error == failure)
            #expect(job.finishedAt == At.at(3))
            #expect(job.uploads.map(\.state) == [.uploaded, .failed, .cancelled])
            #expect(job.uploads[1].attempts == 3 && job.uploads[1].error == "HTTP 403", "the runner's last word, written with the end")
            #expect(job.progress.failed == 1)
            #expect(try await fixture.string("SELECT locked_by FROM jobs WHERE id = ?", [created.job.id]) == nil)

            let post = try await fixture.posts.find(id: created.post.id, tenant: .default)
            #expect(post?.state == .failed)
            #expect(post?.media.map(\.id) == media)
            #expect(post?.media.allSatisfy { $0.state == .staged && $0.url == nil && $0.postID == created.post.id } == true)

            // Finished: progress writes are ignored now.
            fixture.jobs.updateUpload(jobID: created.job.id, mediaID: media[2], state: .uploaded, attempts: 1, error: nil)
            #expect(try await fixture.jobs.find(id: created.job.id, tenant: .default)?.uploads.last?.state == .cancelled)
        }
    }

    @Test("finishCancelled: the job and post are cancelled, uploads not in the store cancelled, media staged")
    func finishCancelled() async throws {
        try await withRepositoryFixture { fixture in
            let media = try await fixture.stage(2)
            let created = try await fixture.create(text: "x", media: media, at: At.at(0))
            _ = try await fixture.jobs.claim(runner: "a", leaseUntil: At.at(30), now: At.at(1))
            _ = try await fixture.jobs.requestCancel(id: created.job.id, tenant: .default, now: At.at(2))
            fixture.jobs.updateUpload(jobID: created.job.id, mediaID: media[0], state: .uploaded, attempts: 1, error: nil)

            #expect(try await fixture.jobs.finishCancelled(JobLease(jobID: created.job.id, runner: "b", attempt: 1), now: At.at(3)) == .lostLease)
            guard
                case .done(let job) = try await fixture.jobs.finishCancelled(JobLease(jobID: created.job.id, runner: "a", attempt: 1), now: At.at(4))
            else {
                Issue.record("finishCancelled was refused")
                return
            }
            #expect(job.state == .cancelled)
            #expect(job.cancelRequested)
            #expect(job.error?.code == .cancelled)
            #expect(job.error?.mediaID == nil)
            #expect(job.finishedAt == At.at(4))
            #expect(job.uploads.map(\.state) == [.uploaded, .cancelled])
            let post = try await fixture.posts.find(id: created.post.id, tenant: .default)
            #expect(post?.state == .cancelled)
            #expect(post?.media.allSatisfy { $0.state == .staged && $0.postID == created.post.id } == true)
            #expect(try await fixture.jobs.requestCancel(id: created.job.id, tenant: .default, now: At.at(5)) == .alreadyCancelled(job))
        }
    }

    @Test("requeue on shutdown: queued again with the cancel flag cleared, post queued, media staged, uploads pending")
    func requeue() async throws {
        try await withRepositoryFixture { fixture in
            let media = try await fixture.stage(1)
            let created = try await fixture.create(text: "x", media: media, at: At.at(0))
            _ = try await fixture.jobs.claim(runner: "a", leaseUntil: At.at(30), now: At.at(1))
            fixture.jobs.updateUpload(jobID: created.job.id, mediaID: media[0], state: .uploading, attempts: 1, error: nil)
            _ = try await fixture.jobs.requestCancel(id: created.job.id, tenant: .default, now: At.at(2))

            // Another runner cannot requeue it.
            try await fixture.jobs.requeue(JobLease(jobID: created.job.id, runner: "b", attempt: 1))
            #expect(try await fixture.jobs.find(id: created.job.id, tenant: .default)?.state == .running)

            try await fixture.jobs.requeue(JobLease(jobID: created.job.id, runner: "a", attempt: 1))
            let job = try await fixture.jobs.find(id: created.job.id, tenant: .default)
            #expect(job?.state == .queued)
            #expect(job?.cancelRequested == false)
            #expect(job?.finishedAt == nil)
            #expect(job?.uploads == [Job.Upload(mediaID: media[0], state: .pending, attempts: 1, error: nil, size: 100)])
            #expect(try await fixture.string("SELECT locked_by FROM jobs WHERE id = ?", [created.job.id]) == nil)
            let post = try await fixture.posts.find(id: created.post.id, tenant: .default)
            #expect(post?.state == .queued)
            #expect(post?.media.first?.state == .staged)
        }
    }

    // MARK: Lists

    @Test("jobs list newest first with cursors and a state filter")
    func list() async throws {
        try await withRepositoryFixture { fixture in
            var created: [PostAndJob] = []
            for index in 0..<5 {
                created.append(try await fixture.create(text: "\(index)", at: At.at(Double(index))))
            }
            _ = try await fixture.jobs.requestCancel(id: created[1].job.id, tenant: .default, now: At.at(10))
            _ = try await fixture.jobs.requestCancel(id: created[3].job.id, tenant: .default, now: At.at(10))

            let first = try await fixture.jobs.list(tenant: .default, state: nil, limit: 2, after: nil)
            let second = try await fixture.jobs.list(tenant: .default, state: nil, limit: 2, after: first.nextCursor)
            let third = try await fixture.jobs.list(tenant: .default, state: nil, limit: 2, after: second.nextCursor)
            #expect((first.data + second.data + third.data).map(\.id) == created.reversed().map(\.job.id))
            #expect(third.nextCursor == nil)

            let cancelled = try await fixture.jobs.list(tenant: .default, state: .cancelled, limit: 1, after: nil)
            #expect(cancelled.data.map(\.id) == [created[3].job.id])
            let rest = try await fixture.jobs.list(tenant: .default, state: .cancelled, limit: 1, after: cancelled.nextCursor)
            #expect(rest.data.map(\.id) == [created[1].job.id])
            #expect(rest.data.first?.uploads.isEmpty == true)
            #expect(try await fixture.jobs.list(tenant: .default, state: .queued, limit: 10, after: nil).data.count == 3)
        }
    }
}
