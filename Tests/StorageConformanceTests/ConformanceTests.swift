import HeraldCore
import HeraldStorage
import Synchronization
import Testing

/// What every storage backend must do, written against the protocols alone (River's `riverdrivertest` is the model):
/// each test runs once per ``Backend``. A backend passes when its behaviour is Herald's, whatever its SQL.
@Suite("Storage conformance")
struct ConformanceTests {
    private typealias At = Fixture

    @Test("a post is created with its job and one pending upload per medium, in order; read back and listed", arguments: Backend.allCases)
    func createAndRead(_ backend: Backend) async throws {
        try await backend.withStorage { storage in
            let fixture = Fixture(storage: storage)
            let media = try await fixture.stage(3)
            let created = try await fixture.create("hello", media: [media[2], media[0]])
            #expect(created.post.state == .queued && created.job.state == .queued)
            #expect(created.post.media.map(\.id) == [media[2], media[0]])
            #expect(created.job.uploads.map(\.mediaID) == [media[2], media[0]])
            #expect(created.job.uploads.allSatisfy { $0.state == .pending && $0.attempts == 0 })

            #expect(try await storage.posts.find(id: created.post.id, tenant: .default) == created.post)
            #expect(try await storage.jobs.find(id: created.job.id, tenant: .default) == created.job)
            #expect(try storage.statusReader(connections: 1).job(id: created.job.id, tenant: .default) == created.job)
            #expect(try await storage.statusReader(connections: 1).read(id: created.job.id, tenant: .default) == created.job)
            let medium = try #require(try await storage.media.find(id: media[0], tenant: .default))
            #expect(medium.postID == created.post.id && medium.state == .staged)

            // Newest first, a page at a time, and by state.
            let second = try await fixture.create("second", at: At.at(2))
            let first = try await storage.posts.list(tenant: .default, state: nil, limit: 1, after: nil)
            #expect(first.data.map(\.id) == [second.post.id])
            let cursor = try #require(first.nextCursor)
            let next = try await storage.posts.list(tenant: .default, state: nil, limit: 1, after: cursor)
            #expect(next.data.map(\.id) == [created.post.id] && next.nextCursor == nil)
            #expect(try await storage.jobs.list(tenant: .default, state: .queued, limit: 10, after: nil).data.count == 2)
            #expect(try await storage.jobs.list(tenant: .default, state: .running, limit: 10, after: nil).data.isEmpty)
            let counts = try await storage.jobs.counts()
            #expect(counts.queued == 2 && counts.running == 0 && counts.scheduled == 0)
        }
    }

    @Test("a post naming unknown or attached media is refused with every problem, and writes nothing", arguments: Backend.allCases)
    func invalidMediaWriteNothing(_ backend: Backend) async throws {
        try await backend.withStorage { storage in
            let fixture = Fixture(storage: storage)
            let media = try await fixture.stage(2)
            _ = try await fixture.create("holds the first", media: [media[0]])
            let unknown = MediaID.generate()
            let request = PostRequest(text: "x", mediaIDs: [media[1], media[0], unknown])
            guard case .invalid(let issues) = try await storage.posts.create(request, tenant: .default, idempotency: nil, now: At.at(2)) else {
                Issue.record("expected the post to be refused")
                return
            }
            #expect(issues.map(\.pointer) == ["/media_ids/1", "/media_ids/2"])
            let checked = try await storage.posts.mediaIssues(
                [(0, media[1].rawValue), (1, media[0].rawValue), (2, unknown.rawValue)], tenant: .default)
            #expect(checked.map(\.pointer) == issues.map(\.pointer))
            // The free medium stayed free: nothing of the refused post was written.
            #expect(try await storage.media.find(id: media[1], tenant: .default)?.postID == nil)
            #expect(try await storage.posts.list(tenant: .default, state: nil, limit: 10, after: nil).data.count == 1)
        }
    }

    @Test("posts created at once are each created whole, as read back; one naming another tenant's medium is refused", arguments: Backend.allCases)
    func postsCreatedAtOnce(_ backend: Backend) async throws {
        try await backend.withStorage { storage in
            let fixture = Fixture(storage: storage)
            let media = try await fixture.stage(19)
            let foreign = try await fixture.stage(1, tenant: Tenant(uncheckedName: "other"))[0]
            // Twelve posts of 0 to 2 media each (media 0-17 shared out), and one naming media[18] and the other tenant's.
            let lists = (0..<12).map { index in Array(media[(index * 3 / 2)..<(index * 3 / 2 + index % 4 / 2 + index % 2)]) }
            let outcomes = try await withThrowingTaskGroup(of: (Int, PostCreation).self) { group in
                for (index, list) in lists.enumerated() {
                    group.addTask {
                        let request = PostRequest(text: "post \(index)", mediaIDs: list, priority: index % 3 == 0 ? .high : .normal)
                        return (index, try await storage.posts.create(request, tenant: .default, idempotency: nil, now: At.at(2)))
                    }
                }
                group.addTask {
                    let request = PostRequest(text: "foreign", mediaIDs: [media[18], foreign])
                    return (12, try await storage.posts.create(request, tenant: .default, idempotency: nil, now: At.at(2)))
                }
                return try await group.reduce(into: [Int: PostCreation]()) { $0[$1.0] = $1.1 }
            }
            for (index, list) in lists.enumerated() {
                guard case .created(let created) = outcomes[index] else {
                    Issue.record("post \(index) was not created: \(String(describing: outcomes[index]))")
                    continue
                }
                #expect(created.post.media.map(\.id) == list && created.job.uploads.map(\.mediaID) == list)
                #expect(created.post.text == "post \(index)" && created.job.priority == (index % 3 == 0 ? .high : .normal))
                #expect(try await storage.posts.find(id: created.post.id, tenant: .default) == created.post)
                #expect(try await storage.jobs.find(id: created.job.id, tenant: .default) == created.job)
            }
            guard case .invalid(let issues) = outcomes[12] else {
                Issue.record("the post naming another tenant's medium was not refused: \(String(describing: outcomes[12]))")
                return
            }
            #expect(issues.map(\.pointer) == ["/media_ids/1"])
            #expect(try await storage.media.find(id: media[18], tenant: .default)?.postID == nil, "the refused post attached nothing")
            #expect(try await storage.jobs.counts().queued == 12)
        }
    }

    @Test("posts listing one medium at once: one takes it, every other is refused and writes nothing", arguments: Backend.allCases)
    func oneMediumIsTakenOnce(_ backend: Backend) async throws {
        try await backend.withStorage { storage in
            let fixture = Fixture(storage: storage)
            let media = try await fixture.stage(9)
            let shared = media[8]
            // Eight posts at once, each listing a medium of its own and the shared one.
            let outcomes = try await withThrowingTaskGroup(of: (Int, PostCreation).self) { group in
                for index in 0..<8 {
                    group.addTask {
                        let request = PostRequest(text: "\(index)", mediaIDs: [media[index], shared])
                        return (index, try await storage.posts.create(request, tenant: .default, idempotency: nil, now: At.at(2)))
                    }
                }
                return try await group.reduce(into: [(Int, PostCreation)]()) { $0.append($1) }
            }
            let created = outcomes.compactMap { index, outcome -> (Int, PostAndJob)? in
                if case .created(let created) = outcome { (index, created) } else { nil }
            }
            let refused = outcomes.filter { _, outcome in
                if case .invalid(let issues) = outcome { issues.map(\.pointer) == ["/media_ids/1"] } else { false }
            }
            try #require(created.count == 1, "\(outcomes)")
            #expect(refused.count == 7, "\(outcomes)")
            let (winner, post) = created[0]
            #expect(try await storage.media.find(id: shared, tenant: .default)?.postID == post.post.id)
            for index in 0..<8 where index != winner {
                #expect(try await storage.media.find(id: media[index], tenant: .default)?.postID == nil, "a refused post attached nothing")
            }
            #expect(try await storage.posts.list(tenant: .default, state: nil, limit: 10, after: nil).data.count == 1)
            #expect(try await storage.jobs.counts().queued == 1)
        }
    }

    @Test("an idempotency key replays its post, refuses another payload, and is held while in progress", arguments: Backend.allCases)
    func idempotency(_ backend: Backend) async throws {
        try await backend.withStorage { storage in
            let request = PostRequest(text: "once", mediaIDs: [])
            let key = IdempotencyRecord(key: "k1", requestHash: "h1")
            guard case .created(let created) = try await storage.posts.create(request, tenant: .default, idempotency: key, now: At.at(1)) else {
                Issue.record("expected a creation")
                return
            }
            let replay = try await storage.posts.create(request, tenant: .default, idempotency: key, now: At.at(2))
            guard case .replayed(let replayed) = replay else {
                Issue.record("expected a replay, got \(replay)")
                return
            }
            #expect(replayed.post.id == created.post.id && replayed.job.id == created.job.id)
            let other = IdempotencyRecord(key: "k1", requestHash: "h2")
            #expect(try await storage.posts.create(request, tenant: .default, idempotency: other, now: At.at(3)) == .keyReusedWithOtherPayload)
            // Keys are per tenant: another tenant's same key is a new post.
            let tenant = Tenant(uncheckedName: "other")
            guard case .created(let theirs) = try await storage.posts.create(request, tenant: tenant, idempotency: key, now: At.at(4)) else {
                Issue.record("another tenant's key is its own")
                return
            }
            #expect(theirs.post.id != created.post.id)

            // A reservation holds the key until it completes or is released.
            let reserved = IdempotencyRecord(key: "k2", requestHash: "h3")
            #expect(try await storage.posts.reserve(reserved, tenant: .default, now: At.at(5)) == nil)
            #expect(try await storage.posts.reserve(reserved, tenant: .default, now: At.at(6)) == .keyInProgress)
            try await storage.posts.release(reserved, tenant: .default)
            #expect(try await storage.posts.reserve(reserved, tenant: .default, now: At.at(7)) == nil)
        }
    }

    @Test("a tenant sees nothing of another's media, posts and jobs", arguments: Backend.allCases)
    func tenantsAreApart(_ backend: Backend) async throws {
        try await backend.withStorage { storage in
            let fixture = Fixture(storage: storage)
            let other = Tenant(uncheckedName: "other")
            let media = try await fixture.stage(1)
            let created = try await fixture.create("mine", media: media)
            #expect(try await storage.media.find(id: media[0], tenant: other) == nil)
            #expect(try await storage.posts.find(id: created.post.id, tenant: other) == nil)
            #expect(try await storage.jobs.find(id: created.job.id, tenant: other) == nil)
            #expect(try storage.statusReader(connections: 1).job(id: created.job.id, tenant: other) == nil)
            #expect(try await storage.jobs.list(tenant: other, state: nil, limit: 10, after: nil).data.isEmpty)
            #expect(try await storage.jobs.requestCancel(id: created.job.id, tenant: other, now: At.at(2)) == .notFound)
            // Another tenant's medium cannot be attached.
            let request = PostRequest(text: "theirs", mediaIDs: media)
            guard case .invalid = try await storage.posts.create(request, tenant: other, idempotency: nil, now: At.at(3)) else {
                Issue.record("another tenant's medium was attached")
                return
            }
        }
    }

    @Test("jobs are claimed by priority then due time, each once, leased to the runner", arguments: Backend.allCases)
    func claimOrder(_ backend: Backend) async throws {
        try await backend.withStorage { storage in
            let fixture = Fixture(storage: storage)
            let media = try await fixture.stage(2)
            let low = try await fixture.create("low", priority: .low, at: At.at(1))
            let normal = try await fixture.create("normal", media: media, at: At.at(2))
            let high = try await fixture.create("high", priority: .high, at: At.at(3))
            let claimed = try await storage.jobs.claim(upTo: 2, runner: "a", leaseUntil: At.at(60), now: At.at(4))
            #expect(claimed.map(\.jobID) == [high.job.id, normal.job.id])
            #expect(claimed.allSatisfy { $0.attempt == 1 })
            #expect(claimed[1].media.map(\.mediaID) == media && claimed[1].media.map(\.size) == [100, 101])
            let rest = try await storage.jobs.claim(upTo: 5, runner: "b", leaseUntil: At.at(60), now: At.at(5))
            #expect(rest.map(\.jobID) == [low.job.id])
            #expect(try await storage.jobs.claim(upTo: 5, runner: "c", leaseUntil: At.at(60), now: At.at(6)).isEmpty)
            let running = try #require(try await storage.jobs.find(id: normal.job.id, tenant: .default))
            #expect(running.state == .running && running.startedAt == At.at(4) && running.runner == "a")
            #expect(try storage.statusReader(connections: 1).job(id: normal.job.id, tenant: .default)?.runner == "a")
            #expect(try await storage.posts.find(id: normal.post.id, tenant: .default)?.state == .publishing)
        }
    }

    @Test(
        "a job put back runs again from the start: its uploads pending, without the last run's error and bytes, attempts kept",
        arguments: Backend.allCases)
    func aRunAgainStartsItsUploadsAfresh(_ backend: Backend) async throws {
        try await backend.withStorage { storage in
            let fixture = Fixture(storage: storage)
            let media = try await fixture.stage(2)
            let created = try await fixture.create("again", media: media)
            let first = try await fixture.claim("a")
            storage.jobs.updateUpload(jobID: created.job.id, mediaID: media[0], state: .uploaded, attempts: 1, error: nil)
            storage.jobs.reportBytes(jobID: created.job.id, mediaID: media[0], bytes: 100)
            storage.jobs.updateUpload(jobID: created.job.id, mediaID: media[1], state: .failed, attempts: 2, error: "timed out")
            storage.jobs.reportBytes(jobID: created.job.id, mediaID: media[1], bytes: 40)
            try await storage.jobs.requeue(first.lease)
            let requeued = try #require(try await storage.jobs.find(id: created.job.id, tenant: .default))
            #expect(requeued.state == .queued && requeued.uploads.map(\.attempts) == [1, 2])

            let second = try await fixture.claim("b", at: At.at(3))
            #expect(second.attempt == 2 && second.media.map(\.attempts) == [1, 2])
            let running = try #require(try await storage.jobs.find(id: created.job.id, tenant: .default))
            #expect(running.uploads.map(\.state) == [.pending, .pending])
            #expect(running.uploads.map(\.error) == [nil, nil] && running.uploads.map(\.bytesSent) == [0, 0])
            #expect(running.uploads.map(\.attempts) == [1, 2])
        }
    }

    @Test(
        "fair share: within a priority tenants take turns, each one's running jobs counted; a higher priority goes first",
        arguments: Backend.allCases)
    func tenantsTakeTurns(_ backend: Backend) async throws {
        try await backend.withStorage { storage in
            let fixture = Fixture(storage: storage)
            let (a, b, c) = (Tenant(uncheckedName: "a"), Tenant(uncheckedName: "b"), Tenant(uncheckedName: "c"))
            let backlog = try await fixture.backlog(5, tenant: a)
            let late = try await fixture.create("b", tenant: b, at: At.at(2)).job.id
            // A's oldest and B's only job share the first turn: B's does not wait behind A's backlog.
            let first = try await storage.jobs.claim(upTo: 2, runner: "r", leaseUntil: At.at(60), now: At.at(3))
            #expect(first.map(\.jobID) == [backlog[0], late])
            #expect(try await storage.jobs.claim(upTo: 1, runner: "r", leaseUntil: At.at(60), now: At.at(3)).map(\.jobID) == [backlog[1]])
            // A runs two, B one: C's new job (its first turn) goes before A's third (A's third turn).
            let newcomer = try await fixture.create("c", tenant: c, at: At.at(4)).job.id
            #expect(try await storage.jobs.claim(upTo: 1, runner: "r", leaseUntil: At.at(60), now: At.at(5)).map(\.jobID) == [newcomer])
            // A higher priority goes before every turn of a lower one; a tenant's own jobs keep their order.
            let urgent = try await fixture.create("urgent", tenant: a, priority: .high, at: At.at(6)).job.id
            let rest = try await storage.jobs.claim(upTo: 5, runner: "r", leaseUntil: At.at(60), now: At.at(7))
            #expect(rest.map(\.jobID) == [urgent, backlog[2], backlog[3], backlog[4]])
        }
    }

    @Test(
        "a tenant cap: no more of a tenant's jobs run at once than it allows, even with claims made at once; others go on",
        arguments: Backend.allCases)
    func tenantCap(_ backend: Backend) async throws {
        try await backend.withStorage { storage in
            let fixture = Fixture(storage: storage)
            let (a, b) = (Tenant(uncheckedName: "a"), Tenant(uncheckedName: "b"))
            let backlog = try await fixture.backlog(6, tenant: a)
            let other = try await fixture.create("b", tenant: b, at: At.at(2)).job.id
            let first = try await storage.jobs.claim(upTo: 5, runner: "r", leaseUntil: At.at(60), now: At.at(3), tenantCap: 2)
            #expect(first.map(\.jobID) == [backlog[0], other, backlog[1]])
            #expect(try await storage.jobs.claim(upTo: 5, runner: "r", leaseUntil: At.at(60), now: At.at(3), tenantCap: 2).isEmpty)
            // Eight claims at once, as eight replicas' would be, whose clocks differ: one job of A's is free to run. A
            // claim at 5 s sees A's next normal job first; one at 8 s sees A's urgent job (due at 7 s) first; only one
            // of them may run.
            let done = first[0]
            guard case .done = try await storage.jobs.commit(done.lease, objects: Fixture.objects(done), now: At.at(4)) else {
                throw Unexpected("the commit was refused")
            }
            let urgent = try await fixture.create("urgent", tenant: a, priority: .high, scheduledAt: At.at(7), at: At.at(4)).job.id
            #expect(try await storage.jobs.promoteDue(now: At.at(7)) == 1)
            let racing = try await withThrowingTaskGroup(of: [ClaimedJob].self) { group in
                for runner in 0..<8 {
                    group.addTask {
                        let now = runner % 2 == 0 ? At.at(5) : At.at(8)
                        return try await storage.jobs.claim(upTo: 2, runner: "r\(runner)", leaseUntil: At.at(60), now: now, tenantCap: 2)
                    }
                }
                return try await group.reduce(into: []) { $0 += $1 }
            }
            #expect(racing.count == 1 && [backlog[2], urgent].contains(racing.first?.jobID))
            let running = try await storage.jobs.list(tenant: a, state: .running, limit: 10, after: nil).data
            #expect(running.count == 2)
        }
    }

    @Test("the tenants with the longest queues, then the most running, with their counts", arguments: Backend.allCases)
    func busiestTenants(_ backend: Backend) async throws {
        try await backend.withStorage { storage in
            let fixture = Fixture(storage: storage)
            let (a, b, c) = (Tenant(uncheckedName: "a"), Tenant(uncheckedName: "b"), Tenant(uncheckedName: "c"))
            _ = try await fixture.backlog(3, tenant: a)
            _ = try await fixture.create("b", tenant: b, at: At.at(2))
            _ = try await fixture.create("c", tenant: c, at: At.at(3))
            // Fair share: A's oldest and B's take the first turn.
            #expect(try await storage.jobs.claim(upTo: 2, runner: "r", leaseUntil: At.at(60), now: At.at(4)).count == 2)
            #expect(
                try await storage.jobs.busiestTenants(limit: 2) == [
                    TenantJobCounts(tenant: a, queued: 2, running: 1), TenantJobCounts(tenant: c, queued: 1, running: 0),
                ])
            #expect(try await storage.jobs.busiestTenants(limit: 5).map(\.tenant) == [a, c, b])
        }
    }

    @Test("a runner that lost its lease changes nothing of the job (fencing); the new holder finishes it", arguments: Backend.allCases)
    func fencing(_ backend: Backend) async throws {
        try await backend.withStorage { storage in
            let fixture = Fixture(storage: storage)
            let media = try await fixture.stage(1)
            let created = try await fixture.create("fenced", media: media)
            let first = try await fixture.claim("a", leaseUntil: At.at(10), at: At.at(2))
            #expect(try await storage.jobs.renewLease(first.lease, until: At.at(20)))
            // Not yet expired at 19 s; expired at 20 s: back to the queue.
            #expect(try await storage.jobs.reclaimExpired(now: At.at(19)).isEmpty)
            #expect(try await storage.jobs.reclaimExpired(now: At.at(20)) == [created.job.id])
            let second = try await fixture.claim("b", leaseUntil: At.at(80), at: At.at(21))
            #expect(second.jobID == created.job.id && second.attempt == 2)

            let objects = Fixture.objects(first)
            let failure = Job.Failure(code: .internal, message: "late")
            #expect(try await storage.jobs.renewLease(first.lease, until: At.at(90)) == false)
            #expect(try await storage.jobs.commit(first.lease, objects: objects, now: At.at(22)) == .lostLease)
            #expect(try await storage.jobs.fail(first.lease, error: failure, now: At.at(22)) == .lostLease)
            #expect(try await storage.jobs.finishCancelled(first.lease, now: At.at(22)) == .lostLease)
            try await storage.jobs.requeue(first.lease)
            let untouched = try #require(try await storage.jobs.find(id: created.job.id, tenant: .default))
            #expect(untouched.state == .running && untouched.attempt == 2)

            guard case .done(let done) = try await storage.jobs.commit(second.lease, objects: objects, now: At.at(23)) else {
                Issue.record("the holder's commit was refused")
                return
            }
            #expect(done.state == .succeeded && done.finishedAt == At.at(23) && done.runner == nil)
            #expect(try await storage.jobs.find(id: created.job.id, tenant: .default) == done, "the commit answers the job as stored")
            let post = try #require(try await storage.posts.find(id: created.post.id, tenant: .default))
            #expect(post.state == .published && post.publishedAt == At.at(23))
            #expect(post.media.map(\.url) == [objects[media[0]]?.url] && post.media.allSatisfy { $0.state == .uploaded })
        }
    }

    @Test(
        "an earlier attempt of the same runner is fenced by its attempt; a runner restarted under its name takes its jobs back",
        arguments: Backend.allCases)
    func fencingByAttempt(_ backend: Backend) async throws {
        try await backend.withStorage { storage in
            let fixture = Fixture(storage: storage)
            let mine = try await fixture.create("mine", at: At.at(1))
            let theirs = try await fixture.create("theirs", at: At.at(2))
            let first = try await fixture.claim("a", at: At.at(3))
            let other = try await fixture.claim("b", at: At.at(3))
            #expect(first.jobID == mine.job.id && other.jobID == theirs.job.id)
            // "a" starts again: its own running job goes back at once, its lease not yet expired; "b"'s stays.
            #expect(try await storage.jobs.reclaimRunning(heldBy: "a") == [mine.job.id])
            #expect(try await storage.jobs.find(id: theirs.job.id, tenant: .default)?.state == .running)
            let again = try await fixture.claim("a", at: At.at(4))
            #expect(again.jobID == mine.job.id && again.attempt == 2)
            // The first attempt's writes are refused, though its runner's name is the same.
            #expect(try await storage.jobs.renewLease(first.lease, until: At.at(90)) == false)
            #expect(try await storage.jobs.commit(first.lease, objects: [:], now: At.at(5)) == .lostLease)
            #expect(try await storage.jobs.renewLease(again.lease, until: At.at(90)))
            #expect(try await storage.jobs.find(id: mine.job.id, tenant: .default)?.state == .running)
        }
    }

    @Test(
        "a replica's leases are renewed in one call, which names the jobs asked to cancel and leaves out those that moved on",
        arguments: Backend.allCases)
    func renewingTogether(_ backend: Backend) async throws {
        try await backend.withStorage { storage in
            let fixture = Fixture(storage: storage)
            let one = try await fixture.create("one", at: At.at(1))
            let two = try await fixture.create("two", at: At.at(2))
            let three = try await fixture.create("three", at: At.at(3))
            let first = try await fixture.claim("a", leaseUntil: At.at(10), at: At.at(4))
            let second = try await fixture.claim("a", leaseUntil: At.at(10), at: At.at(4))
            let third = try await fixture.claim("a", leaseUntil: At.at(10), at: At.at(4))
            #expect([first.jobID, second.jobID, third.jobID] == [one.job.id, two.job.id, three.job.id])
            _ = try await storage.jobs.requestCancel(id: two.job.id, tenant: .default, now: At.at(5))
            // The third moves on: its lease expires and another replica claims it.
            #expect(try await storage.jobs.renewLeases([first.lease, second.lease], until: At.at(30)).held.count == 2)
            #expect(try await storage.jobs.reclaimExpired(now: At.at(20)) == [three.job.id])
            let taken = try await fixture.claim("b", leaseUntil: At.at(60), at: At.at(21))
            #expect(taken.jobID == three.job.id)

            let renewal = try await storage.jobs.renewLeases([first.lease, second.lease, third.lease], until: At.at(50))
            #expect(renewal == LeaseRenewal(held: [one.job.id, two.job.id], cancelRequested: [two.job.id]))
            // Extended: not expired at 49 s; the lease that moved on is the other replica's, untouched.
            #expect(try await storage.jobs.reclaimExpired(now: At.at(49)).isEmpty)
            #expect(try await storage.jobs.find(id: three.job.id, tenant: .default)?.runner == "b")
            #expect(try await storage.jobs.renewLeases([], until: At.at(50)) == LeaseRenewal())
        }
    }

    @Test("a commit without every medium's object is refused and writes nothing: no half-published post", arguments: Backend.allCases)
    func commitNeedsEveryObject(_ backend: Backend) async throws {
        try await backend.withStorage { storage in
            let fixture = Fixture(storage: storage)
            let media = try await fixture.stage(2)
            let created = try await fixture.create("two", media: media)
            let claimed = try await fixture.claim()
            var objects = Fixture.objects(claimed)
            objects[media[1]] = nil
            await #expect(throws: (any Error).self) {
                try await storage.jobs.commit(claimed.lease, objects: objects, now: At.at(3))
            }
            let post = try #require(try await storage.posts.find(id: created.post.id, tenant: .default))
            #expect(post.state == .publishing && post.publishedAt == nil && post.media.allSatisfy { $0.url == nil })
            #expect(try await storage.jobs.find(id: created.job.id, tenant: .default)?.state == .running)
        }
    }

    @Test("commits at once: each whole, as read back; a lost lease, a cancel, a missing object refused", arguments: Backend.allCases)
    func commitsAtOnce(_ backend: Backend) async throws {
        try await backend.withStorage { storage in
            let fixture = Fixture(storage: storage)
            let media = try await fixture.stage(8)
            var lists: [PostID: [MediaID]] = [:]
            for list in [[media[0]], [media[1], media[2]], [media[3]], [media[4], media[5]], [], [media[6], media[7]]] {
                lists[try await fixture.create("post", media: list).post.id] = list
            }
            var claimed: [ClaimedJob] = []
            for _ in lists { claimed.append(try await fixture.claim()) }
            // Claimed in id order: the refusals go to the first three, the missing object to one with media.
            let missing = try #require(claimed.indices.first { $0 > 1 && !claimed[$0].media.isEmpty })
            let (cancelled, lost) = (0, missing == 2 ? 1 : 2)
            let committing = Set(claimed.indices).subtracting([cancelled, lost, missing])
            _ = try await storage.jobs.requestCancel(id: claimed[cancelled].jobID, tenant: .default, now: At.at(3))
            let outcomes = try await withThrowingTaskGroup(of: (Int, Result<JobCompletion, any Error>).self) { group in
                for (index, job) in claimed.enumerated() {
                    var lease = job.lease
                    var objects = Fixture.objects(job)
                    if index == lost { lease.attempt += 1 }  // a lease that moved on
                    if index == missing { objects[job.media[0].mediaID] = nil }
                    group.addTask {
                        do {
                            return (index, .success(try await storage.jobs.commit(lease, objects: objects, now: At.at(Double(4 + index)))))
                        } catch {
                            return (index, .failure(error))
                        }
                    }
                }
                return try await group.reduce(into: [Int: Result<JobCompletion, any Error>]()) { $0[$1.0] = $1.1 }
            }
            for index in committing.sorted() {
                guard case .success(.done(let job)) = outcomes[index] else {
                    Issue.record("job \(index) was not committed: \(String(describing: outcomes[index]))")
                    continue
                }
                #expect(job.state == .succeeded && job.finishedAt == At.at(Double(4 + index)) && job.uploads.allSatisfy { $0.state == .uploaded })
                #expect(try await storage.jobs.find(id: claimed[index].jobID, tenant: .default) == job)
                let post = try #require(try await storage.posts.find(id: claimed[index].postID, tenant: .default))
                #expect(post.state == .published && post.publishedAt == At.at(Double(4 + index)))
                #expect(post.media.map(\.url) == (lists[post.id] ?? []).map { "https://cdn.example/\($0)" })
            }
            #expect(try outcomes[cancelled]?.get() == .cancelRequested)
            #expect(try outcomes[lost]?.get() == .lostLease)
            #expect(throws: (any Error).self) { try outcomes[missing]?.get() }
            for index in [cancelled, lost, missing] {
                #expect(try await storage.jobs.find(id: claimed[index].jobID, tenant: .default)?.state == .running)
                #expect(try await storage.posts.find(id: claimed[index].postID, tenant: .default)?.state == .publishing)
            }
        }
    }

    @Test("cancelling: at once when queued, by request when running (the commit then refused), never when finished", arguments: Backend.allCases)
    func cancelling(_ backend: Backend) async throws {
        try await backend.withStorage { storage in
            let fixture = Fixture(storage: storage)
            let queued = try await fixture.create("queued", at: At.at(1))
            guard case .cancelledNow(let cancelled) = try await storage.jobs.requestCancel(id: queued.job.id, tenant: .default, now: At.at(2)) else {
                Issue.record("a queued job is cancelled at once")
                return
            }
            #expect(cancelled.state == .cancelled && cancelled.error?.code == .cancelled)
            guard case .alreadyCancelled = try await storage.jobs.requestCancel(id: queued.job.id, tenant: .default, now: At.at(3)) else {
                Issue.record("a cancelled job says so")
                return
            }

            let running = try await fixture.create("running", at: At.at(4))
            let claimed = try await fixture.claim(at: At.at(5))
            #expect(claimed.jobID == running.job.id)
            guard case .requested(let requested) = try await storage.jobs.requestCancel(id: running.job.id, tenant: .default, now: At.at(6)) else {
                Issue.record("a running job's cancel is a request")
                return
            }
            #expect(requested.state == .running && requested.cancelRequested)
            #expect(try await storage.jobs.isCancelRequested(jobID: running.job.id))
            #expect(try await storage.jobs.commit(claimed.lease, objects: [:], now: At.at(7)) == .cancelRequested)
            guard case .done(let ended) = try await storage.jobs.finishCancelled(claimed.lease, now: At.at(8)) else {
                Issue.record("the runner ends its cancelled job")
                return
            }
            #expect(ended.state == .cancelled)
            #expect(try await storage.posts.find(id: running.post.id, tenant: .default)?.state == .cancelled)

            let finished = try await fixture.create("finished", at: At.at(9))
            let third = try await fixture.claim(at: At.at(10))
            #expect(try await storage.jobs.commit(third.lease, objects: [:], now: At.at(11)) != .lostLease)
            guard case .finished = try await storage.jobs.requestCancel(id: finished.job.id, tenant: .default, now: At.at(12)) else {
                Issue.record("a succeeded job cannot be cancelled")
                return
            }
        }
    }

    @Test("a scheduled job waits for its time, then is promoted with its post", arguments: Backend.allCases)
    func scheduling(_ backend: Backend) async throws {
        try await backend.withStorage { storage in
            let fixture = Fixture(storage: storage)
            let later = try await fixture.create("later", scheduledAt: At.at(100), at: At.at(1))
            #expect(later.job.state == .scheduled && later.post.state == .scheduled)
            #expect(try await storage.jobs.nextScheduledRunAt() == At.at(100))
            #expect(try await storage.jobs.claim(upTo: 1, runner: "a", leaseUntil: At.at(200), now: At.at(150)).isEmpty)
            #expect(try await storage.jobs.promoteDue(now: At.at(99)) == 0)
            #expect(try await storage.jobs.promoteDue(now: At.at(100)) == 1)
            #expect(try await storage.jobs.nextScheduledRunAt() == nil)
            #expect(try await storage.posts.find(id: later.post.id, tenant: .default)?.state == .queued)
            #expect(try await fixture.claim(at: At.at(101)).jobID == later.job.id)
        }
    }

    @Test("every committed change to a job is announced, with a growing version; a failed write announces nothing", arguments: Backend.allCases)
    func changesAreAnnounced(_ backend: Backend) async throws {
        try await backend.withStorage { storage in
            let fixture = Fixture(storage: storage)
            let media = try await fixture.stage(1)
            var changes = storage.changes.subscribe().makeAsyncIterator()
            let created = try await fixture.create("announced", media: media)
            let first = try #require(await changes.next())
            #expect(first.jobID == created.job.id && first.state == .queued && first.kind == .committed)
            let claimed = try await fixture.claim()
            let second = try #require(await changes.next())
            #expect(second.state == .running && second.version > first.version)

            let generation = storage.changes.generation
            await #expect(throws: (any Error).self) {
                try await storage.jobs.commit(claimed.lease, objects: [:], now: At.at(3))
            }
            #expect(storage.changes.generation == generation)

            // A long-poll waiting for the job wakes with its end.
            async let woken: Void = storage.changes.waitForChange(of: created.job.id, after: generation, timeout: .seconds(30))
            _ = try await storage.jobs.commit(claimed.lease, objects: Fixture.objects(claimed), now: At.at(4))
            await woken
            let third = try #require(await changes.next())
            #expect(third.state == .succeeded && third.version > second.version)
            #expect(storage.changes.generation > generation)
        }
    }

    @Test("a failed or cancelled post is published again with a new job; a published one is not", arguments: Backend.allCases)
    func republishing(_ backend: Backend) async throws {
        try await backend.withStorage { storage in
            let fixture = Fixture(storage: storage)
            let media = try await fixture.stage(1)
            let created = try await fixture.create("again", media: media)
            let claimed = try await fixture.claim()
            #expect(try await storage.posts.republish(id: created.post.id, tenant: .default, now: At.at(3)) != .notFound)
            let failure = Job.Failure(code: .uploadFailed, message: "503", mediaID: media[0])
            _ = try await storage.jobs.fail(claimed.lease, error: failure, now: At.at(4))
            #expect(try await storage.jobs.find(id: created.job.id, tenant: .default)?.error == failure)

            guard case .queued(let again) = try await storage.posts.republish(id: created.post.id, tenant: .default, now: At.at(5)) else {
                Issue.record("a failed post is published again")
                return
            }
            #expect(again.job.id != created.job.id && again.post.jobID == again.job.id && again.job.state == .queued)
            #expect(again.job.uploads.map(\.state) == [.pending])
            let retry = try await fixture.claim(at: At.at(6))
            _ = try await storage.jobs.commit(retry.lease, objects: Fixture.objects(retry), now: At.at(7))
            guard case .conflict = try await storage.posts.republish(id: created.post.id, tenant: .default, now: At.at(8)) else {
                Issue.record("a published post is not published again")
                return
            }
            #expect(try await storage.posts.republish(id: PostID.generate(), tenant: .default, now: At.at(9)) == .notFound)
        }
    }

    @Test("a job keeps the traceparent of the request that made it; its claim and its webhook event carry it", arguments: Backend.allCases)
    func jobTraces(_ backend: Backend) async throws {
        try await backend.withStorage { storage in
            let fixture = Fixture(storage: storage)
            let hook = Webhook(id: WebhookID.generate(), url: "https://hooks.example/f", events: [.jobFailed], createdAt: At.at(0))
            try await storage.webhooks.insert(hook, tenant: .default, secret: "whsec_c2VjcmV0")
            let first = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
            let created = try await fixture.create("traced", traceparent: first)
            let claimed = try await fixture.claim()
            #expect(claimed.jobID == created.job.id && claimed.traceparent == first)
            _ = try await storage.jobs.fail(claimed.lease, error: Job.Failure(code: .internal, message: "x"), now: At.at(3))
            let due = try await storage.webhooks.claimDue(now: .now(), leaseUntil: .now().adding(milliseconds: 30_000), limit: 10, by: "a")
            #expect(due.map(\.traceparent) == [first])

            // Published again by another request: the new job links to that one.
            let second = "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01"
            guard
                case .queued(let again) = try await storage.posts.republish(id: created.post.id, tenant: .default, now: At.at(5), traceparent: second)
            else {
                Issue.record("a failed post is published again")
                return
            }
            let retry = try await fixture.claim(at: At.at(6))
            #expect(retry.jobID == again.job.id && retry.traceparent == second)
            // A request that was not traced leaves none.
            _ = try await fixture.create("untraced", at: At.at(7))
            #expect(try await fixture.claim(at: At.at(8)).traceparent == nil)
        }
    }

    @Test("a post is deleted only when no job of it is active, with its jobs and media", arguments: Backend.allCases)
    func deletingPosts(_ backend: Backend) async throws {
        try await backend.withStorage { storage in
            let fixture = Fixture(storage: storage)
            let media = try await fixture.stage(1)
            let created = try await fixture.create("gone", media: media)
            #expect(try await storage.posts.delete(id: created.post.id, tenant: .default) == .active(created.job.id))
            _ = try await storage.jobs.requestCancel(id: created.job.id, tenant: .default, now: At.at(2))
            #expect(
                try await storage.posts.deletionPlan(id: created.post.id, tenant: .default)
                    == .deletable(objectKeys: [], stagingPaths: ["staging/\(media[0])"]))
            #expect(try await storage.posts.delete(id: created.post.id, tenant: .default) != .notFound)
            #expect(try await storage.posts.find(id: created.post.id, tenant: .default) == nil)
            #expect(try await storage.jobs.find(id: created.job.id, tenant: .default) == nil)
            #expect(try await storage.media.find(id: media[0], tenant: .default) == nil)
            #expect(try await storage.posts.delete(id: created.post.id, tenant: .default) == .notFound)
        }
    }

    @Test("a staged medium is deleted while unattached, kept while attached, and expires unattached", arguments: Backend.allCases)
    func stagedMedia(_ backend: Backend) async throws {
        try await backend.withStorage { storage in
            let fixture = Fixture(storage: storage)
            let media = try await fixture.stage(3)
            let created = try await fixture.create("holds one", media: [media[0]])
            #expect(try await storage.media.deleteStaged(id: media[0], tenant: .default) == .attached(postID: created.post.id))
            #expect(try await storage.media.deleteStaged(id: media[1], tenant: .default) == .deleted(stagingPath: "staging/\(media[1])"))
            #expect(try await storage.media.deleteStaged(id: media[1], tenant: .default) == .notFound)
            #expect(try await storage.media.liveStagingPaths() == ["staging/\(media[0])", "staging/\(media[2])"])
            #expect(try await storage.media.expireUnattached(createdBy: At.at(0)) == ["staging/\(media[2])"])
            #expect(try await storage.media.holdings().map(\.mediaID) == [media[0]])
        }
    }

    @Test(
        "a resumable upload's offset moves only from where it is; complete, it becomes media in one step; it expires",
        arguments: Backend.allCases)
    func resumableUploads(_ backend: Backend) async throws {
        try await backend.withStorage { storage in
            let id = MediaID.generate(at: At.at(0))
            let upload = Upload(
                id: id, contentType: .jpeg, description: "alt", length: 300, bytesPath: "staging/\(id).upload",
                metadata: "filetype aW1hZ2UvanBlZw==,filename YS5qcGc=", createdAt: At.at(0), expiresAt: At.at(60))
            try await storage.uploads.insert(upload, tenant: .default)
            #expect(try await storage.uploads.find(id: id, tenant: .default, now: At.at(1)) == upload)
            #expect(try await storage.uploads.find(id: id, tenant: Tenant(rawValue: "other")!, now: At.at(1)) == nil)
            #expect(try await storage.uploads.find(id: id, tenant: .default, now: At.at(60)) == nil, "expired, even before the sweep")

            // One hold at a time, until it lapses; the offset moves only for the holder, and only from where it is.
            let other = Tenant(rawValue: "other")!
            #expect(try await storage.uploads.hold(id: id, tenant: .default, holder: "a:1", now: At.at(1), until: At.at(11)) == .held(upload))
            #expect(try await storage.uploads.hold(id: id, tenant: .default, holder: "b:1", now: At.at(2), until: At.at(12)) == .busy)
            #expect(try await storage.uploads.hold(id: id, tenant: other, holder: "b:1", now: At.at(2), until: At.at(12)) == .notFound)
            #expect(try await !storage.uploads.advance(id: id, holder: "a:1", from: 50, to: 100), "from another offset")
            #expect(try await !storage.uploads.advance(id: id, holder: "b:1", from: 0, to: 100), "not the holder")
            #expect(try await storage.uploads.renew(id: id, holder: "a:1", until: At.at(20)))
            #expect(try await !storage.uploads.renew(id: id, holder: "b:1", until: At.at(20)))
            #expect(try await storage.uploads.hold(id: id, tenant: .default, holder: "b:1", now: At.at(15), until: At.at(25)) == .busy)
            // Lapsed: another takes it, and the first (fenced off) can change nothing.
            #expect(try await storage.uploads.hold(id: id, tenant: .default, holder: "b:1", now: At.at(21), until: At.at(31)) == .held(upload))
            #expect(try await !storage.uploads.advance(id: id, holder: "a:1", from: 0, to: 100))
            #expect(try await !storage.uploads.renew(id: id, holder: "a:1", until: At.at(40)))
            try await storage.uploads.release(id: id, holder: "a:1")
            #expect(try await storage.uploads.hold(id: id, tenant: .default, holder: "c:1", now: At.at(22), until: At.at(32)) == .busy)
            try await storage.uploads.releaseHolds(prefix: "c:")
            #expect(try await storage.uploads.hold(id: id, tenant: .default, holder: "c:1", now: At.at(22), until: At.at(32)) == .busy, "b's")
            try await storage.uploads.releaseHolds(prefix: "b:")
            #expect(try await storage.uploads.hold(id: id, tenant: .default, holder: "c:1", now: At.at(22), until: At.at(32)) == .held(upload))
            // A PATCH's last move of the offset ends its hold in the same write: once the offset shows, the upload is free.
            #expect(try await storage.uploads.advance(id: id, holder: "c:1", from: 0, to: 100))
            var advanced = upload
            advanced.offset = 100
            #expect(try await storage.uploads.hold(id: id, tenant: .default, holder: "d:1", now: At.at(23), until: At.at(33)) == .held(advanced))
            #expect(try await storage.uploads.find(id: id, tenant: .default, now: At.at(1))?.offset == 100)
            #expect(try await storage.uploads.liveBytesPaths() == ["staging/\(id).upload"])

            // Not complete: no media. Complete: the row goes and the media comes, in one step, once.
            let medium = Media(
                id: id, contentType: .jpeg, size: 300, sha256: String(repeating: "cd", count: 32), description: "alt", createdAt: At.at(2))
            #expect(try await !storage.uploads.complete(id: id, tenant: .default, as: medium, stagingPath: "staging/\(id).jpg"))
            #expect(try await storage.media.find(id: id, tenant: .default) == nil)
            #expect(try await storage.uploads.advance(id: id, holder: "d:1", from: 100, to: 300))
            // Complete: the hold stays until the upload becomes media.
            #expect(try await storage.uploads.hold(id: id, tenant: .default, holder: "e:1", now: At.at(24), until: At.at(34)) == .busy)
            #expect(try await !storage.uploads.complete(id: id, tenant: Tenant(rawValue: "other")!, as: medium, stagingPath: "staging/\(id).jpg"))
            #expect(try await storage.uploads.complete(id: id, tenant: .default, as: medium, stagingPath: "staging/\(id).jpg"))
            #expect(try await !storage.uploads.complete(id: id, tenant: .default, as: medium, stagingPath: "staging/\(id).jpg"))
            #expect(try await storage.media.find(id: id, tenant: .default) == medium)
            #expect(try await storage.uploads.find(id: id, tenant: .default, now: At.at(3)) == nil)
            #expect(try await storage.uploads.liveBytesPaths().isEmpty)

            // Deleted by its tenant only; expired by the sweep once past its time.
            let second = Upload(
                id: MediaID.generate(at: At.at(1)), contentType: .png, description: nil, length: 10, bytesPath: "staging/b.upload",
                createdAt: At.at(1), expiresAt: At.at(61))
            // An object store's upload: its multipart upload's id comes back with it, to abort.
            let third = Upload(
                id: MediaID.generate(at: At.at(2)), contentType: .mp4, description: nil, length: 10, bytesPath: "staging/c.upload",
                multipartID: "2~mpu-c", createdAt: At.at(2), expiresAt: At.at(62))
            try await storage.uploads.insert(second, tenant: .default)
            try await storage.uploads.insert(third, tenant: .default)
            #expect(try await storage.uploads.delete(id: second.id, tenant: Tenant(rawValue: "other")!) == nil)
            #expect(try await storage.uploads.find(id: third.id, tenant: .default, now: At.at(3)) == third)
            #expect(try await storage.uploads.delete(id: second.id, tenant: .default) == second)
            #expect(try await storage.uploads.delete(id: second.id, tenant: .default) == nil)
            #expect(try await storage.uploads.expire(now: At.at(61)).isEmpty)
            #expect(try await storage.uploads.expire(now: At.at(62)) == [third])
            #expect(try await storage.uploads.liveBytesPaths().isEmpty)
        }
    }

    @Test(
        "an offset moved after the bytes' sync: not when the sync fails, and to the end when the caller is cancelled",
        arguments: Backend.allCases)
    func advanceAfterSync(_ backend: Backend) async throws {
        struct SyncFailed: Error {}
        try await backend.withStorage { storage in
            let id = MediaID.generate(at: At.at(0))
            let upload = Upload(
                id: id, contentType: .mp4, description: nil, length: 300, bytesPath: "staging/\(id).upload", createdAt: At.at(0),
                expiresAt: At.at(60))
            try await storage.uploads.insert(upload, tenant: .default)
            #expect(try await storage.uploads.hold(id: id, tenant: .default, holder: "a:1", now: At.at(1), until: At.at(11)) == .held(upload))
            // The sync comes first: when it fails, its error comes out and the offset stays.
            await #expect(throws: SyncFailed.self) {
                try await storage.uploads.advance(id: id, holder: "a:1", from: 0, to: 100) { throw SyncFailed() }
            }
            #expect(try await storage.uploads.find(id: id, tenant: .default, now: At.at(2))?.offset == 0)
            // A caller cancelled before it asks (a dropped connection) still gets both done: the bytes it has count.
            let synced = Mutex(0)
            let cancelled = Task {
                // Returns (throwing) once the task is cancelled, below.
                try? await Task.sleep(for: .seconds(600))
                return try await storage.uploads.advance(id: id, holder: "a:1", from: 0, to: 100) { synced.withLock { $0 += 1 } }
            }
            cancelled.cancel()
            #expect(try await cancelled.value)
            #expect(synced.withLock { $0 } == 1)
            #expect(try await storage.uploads.find(id: id, tenant: .default, now: At.at(2))?.offset == 100)
            // Fenced like any move: not from another offset, not for another holder, and the sync then changes nothing.
            #expect(try await !storage.uploads.advance(id: id, holder: "a:1", from: 0, to: 200) {})
            var moved = upload
            moved.offset = 100
            #expect(try await storage.uploads.hold(id: id, tenant: .default, holder: "b:1", now: At.at(3), until: At.at(13)) == .held(moved))
            #expect(try await !storage.uploads.advance(id: id, holder: "a:1", from: 100, to: 200) {})
            #expect(try await storage.uploads.advance(id: id, holder: "b:1", from: 100, to: 300) {})
            #expect(try await storage.uploads.find(id: id, tenant: .default, now: At.at(4))?.offset == 300)
        }
    }

    @Test("a job's end writes a delivery to each endpoint that takes its event; attempts are recorded", arguments: Backend.allCases)
    func webhookOutbox(_ backend: Backend) async throws {
        try await backend.withStorage { storage in
            let fixture = Fixture(storage: storage)
            let failures = Webhook(id: WebhookID.generate(), url: "https://hooks.example/f", events: [.jobFailed], createdAt: At.at(0))
            let successes = Webhook(id: WebhookID.generate(), url: "https://hooks.example/s", events: [.jobSucceeded], createdAt: At.at(0))
            try await storage.webhooks.insert(failures, tenant: .default, secret: "whsec_c2VjcmV0")
            try await storage.webhooks.insert(successes, tenant: .default, secret: "whsec_c2VjcmV0")
            #expect(try await storage.webhooks.find(id: failures.id, tenant: .default) == failures)
            #expect(try await storage.webhooks.find(id: failures.id, tenant: Tenant(uncheckedName: "other")) == nil)

            _ = try await fixture.create("fails")
            let claimed = try await fixture.claim()
            _ = try await storage.jobs.fail(claimed.lease, error: Job.Failure(code: .internal, message: "x"), now: At.at(3))
            let lease = Timestamp.now().adding(milliseconds: 30_000)
            let due = try await storage.webhooks.claimDue(now: .now(), leaseUntil: lease, limit: 10, by: "a")
            #expect(due.map(\.webhookID) == [failures.id] && due[0].attempts == 0 && due[0].secret == "whsec_c2VjcmV0")
            // Claimed: due again only when the claim ends (another replica would then attempt it)...
            #expect(try await storage.webhooks.claimDue(now: .now(), leaseUntil: lease, limit: 10, by: "b").isEmpty)
            #expect(try await storage.webhooks.nextDue() == lease)
            // ... or when its replica starts again: only its own claims go back.
            #expect(try await storage.webhooks.releaseClaims(heldBy: "b", now: .now()) == 0)
            #expect(try await storage.webhooks.releaseClaims(heldBy: "a", now: .now()) == 1)
            let again = try await storage.webhooks.claimDue(now: .now(), leaseUntil: lease, limit: 10, by: "a")
            #expect(again.map(\.id) == due.map(\.id))

            let next = Timestamp.now().adding(milliseconds: 60_000)
            try await storage.webhooks.record(due[0].id, .retry(statusCode: 503, error: "busy", next: next), now: .now())
            #expect(try await storage.webhooks.claimDue(now: lease, leaseUntil: next, limit: 10, by: "a").isEmpty)
            // Recorded: the claim is gone with the attempt.
            #expect(try await storage.webhooks.releaseClaims(heldBy: nil, now: .now()) == 0)
            #expect(try await storage.webhooks.nextDue() == next)
            try await storage.webhooks.record(due[0].id, .delivered(statusCode: 204), now: .now())
            #expect(try await storage.webhooks.nextDue() == nil)
            let deliveries = try #require(try await storage.webhooks.deliveries(of: failures.id, tenant: .default, limit: 10, after: nil))
            #expect(deliveries.data.map(\.attempts) == [2] && deliveries.data.map(\.status) == [.delivered])

            #expect(try await storage.webhooks.delete(id: failures.id, tenant: .default))
            #expect(try await storage.webhooks.deliveries(of: failures.id, tenant: .default, limit: 10, after: nil) == nil)
        }
    }

    @Test("a failed job's objects are to be deleted after the settle time; a re-publish wants them again", arguments: Backend.allCases)
    func objectDeletions(_ backend: Backend) async throws {
        try await backend.withStorage { storage in
            let fixture = Fixture(storage: storage)
            let media = try await fixture.stage(2)
            let created = try await fixture.create("left objects", media: media)
            let claimed = try await fixture.claim()
            _ = try await storage.jobs.fail(claimed.lease, error: Job.Failure(code: .internal, message: "x"), now: At.at(3))
            #expect(try await storage.objectDeletions.pendingMediaIDs() == media.sorted { $0.rawValue < $1.rawValue })
            let settled = At.at(3).adding(milliseconds: PendingObjectDeletion.settle)
            #expect(try await storage.objectDeletions.claimDue(now: At.at(4), leaseUntil: At.at(100), limit: 10).isEmpty)
            let due = try await storage.objectDeletions.claimDue(now: settled, leaseUntil: At.at(100), limit: 10)
            #expect(Set(due.map(\.mediaID)) == Set(media))
            // Claimed until 100 s: not due to anyone else before.
            #expect(try await storage.objectDeletions.claimDue(now: At.at(99), leaseUntil: At.at(200), limit: 10).isEmpty)
            #expect(try await storage.objectDeletions.nextDue() == At.at(100))
            try await storage.objectDeletions.retry(due[0], at: settled.adding(milliseconds: 1000), error: "503")
            #expect(try await storage.objectDeletions.isPending(due[1]))
            try await storage.objectDeletions.done(due[1])
            #expect(try await storage.objectDeletions.isPending(due[1]) == false)
            #expect(try await storage.objectDeletions.pendingMediaIDs() == [due[0].mediaID])
            // Retried at its time; a claim that lapsed unrecorded (its replica died) is due again, under a new version.
            let retried = try await storage.objectDeletions.claimDue(now: At.at(101), leaseUntil: At.at(200), limit: 10)
            #expect(retried.map(\.mediaID) == [due[0].mediaID] && retried[0].attempts == 1)
            let retaken = try await storage.objectDeletions.claimDue(now: At.at(201), leaseUntil: At.at(300), limit: 10)
            #expect(retaken.map(\.mediaID) == [due[0].mediaID] && retaken[0].dueAt != retried[0].dueAt)
            #expect(try await storage.objectDeletions.isPending(retried[0]) == false)
            #expect(try await storage.objectDeletions.isPending(retaken[0]))

            _ = try await storage.posts.republish(id: created.post.id, tenant: .default, now: At.at(5))
            #expect(try await storage.objectDeletions.pendingMediaIDs().isEmpty)
            #expect(try await storage.objectDeletions.nextDue() == nil)
        }
    }

    @Test("the queue's switch is one for every replica and announced; replicas count while their heartbeat lasts", arguments: Backend.allCases)
    func queueControl(_ backend: Backend) async throws {
        try await backend.withStorage { storage in
            let heard = Mutex<[Bool]>([])
            storage.changes.observeQueue { paused in heard.withLock { $0.append(paused) } }
            #expect(try await storage.queue.isPaused() == false)
            try await storage.queue.setPaused(true)
            #expect(try await storage.queue.isPaused())
            // Announced here before the call returns (other replicas hear it from the database; a listener connecting
            // meanwhile may also announce what it read, before the notification brings the change).
            #expect(heard.withLock { $0.contains(true) })
            #expect(try await storage.queue.heartbeat(replica: "a", workers: 4, until: At.at(10)))
            #expect(try await storage.queue.heartbeat(replica: "b", workers: 2, until: At.at(20)))
            let both = try await storage.queue.liveReplicas(now: At.at(5))
            #expect(both.replicas == 2 && both.workers == 6)
            let one = try await storage.queue.liveReplicas(now: At.at(15))
            #expect(one.replicas == 1 && one.workers == 2)
            try await storage.queue.leave(replica: "b")
            let left = try await storage.queue.liveReplicas(now: At.at(5))
            #expect(left.replicas == 1 && left.workers == 4)
            try await storage.queue.setPaused(false)
            #expect(try await storage.queue.heartbeat(replica: "a", workers: 4, until: At.at(30)) == false)
        }
    }

    @Test("keys: found by their hash, the first made only into an empty table, revoked once, listed newest first", arguments: Backend.allCases)
    func keys(_ backend: Backend) async throws {
        try await backend.withStorage { storage in
            let admin = APIKey(id: KeyID.generate(at: At.at(1)), name: "admin", tenant: .default, scope: .admin, createdAt: At.at(1))
            #expect(try await storage.keys.insertIfEmpty(admin, hash: String(repeating: "a", count: 64)))
            let reader = APIKey(id: KeyID.generate(at: At.at(2)), name: "reader", tenant: .default, scope: .read, createdAt: At.at(2))
            #expect(try await storage.keys.insertIfEmpty(reader, hash: String(repeating: "b", count: 64)) == false)
            try await storage.keys.insert(reader, hash: String(repeating: "b", count: 64))
            #expect(try storage.keys.find(hash: String(repeating: "b", count: 64)) == reader)
            #expect(try storage.keys.find(hash: String(repeating: "c", count: 64)) == nil)

            #expect(try await storage.keys.revoke(id: reader.id, now: At.at(3))?.revokedAt == At.at(3))
            #expect(try await storage.keys.revoke(id: reader.id, now: At.at(4))?.revokedAt == At.at(3))
            try await storage.keys.recordUse([admin.id: At.at(5)])
            try await storage.keys.recordUse([admin.id: At.at(4)])
            #expect(try await storage.keys.find(id: admin.id)?.lastUsedAt == At.at(5))
            let page = try await storage.keys.list(limit: 1, after: nil)
            #expect(page.data.map(\.id) == [reader.id] && page.nextCursor != nil)
        }
    }
}
