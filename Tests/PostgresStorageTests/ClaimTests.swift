import HeraldCore
import HeraldStorage
import HeraldTestSupport
import PostgresNIO
import Testing

@testable import PostgresStorage

/// What the PostgreSQL backend's claims do beyond the conformance suite: another replica's view, the claim lock.
@Suite("PostgreSQL claims", .timeLimit(.minutes(1)))
struct ClaimTests {
    @Test("a job run again shows another replica its uploads afresh: pending, without the last run's error and bytes")
    func aRunAgainIsFreshOnAnotherReplica() async throws {
        try await withTwoReplicas { a, b in
            let mediaIDs = try await stage(sizes: [100, 100], on: a)
            let creation = try await a.posts.create(
                PostRequest(text: "again", mediaIDs: mediaIDs), tenant: .default, idempotency: nil, now: .now())
            guard case .created(let created) = creation else { throw PostgresTestError("expected a creation, got \(creation)") }
            let id = created.job.id
            let first = try #require(try await a.jobs.claim(runner: "a", leaseUntil: Timestamp.now().adding(milliseconds: 60_000), now: .now()))
            a.jobs.updateUpload(jobID: id, mediaID: mediaIDs[1], state: .failed, attempts: 2, error: "timed out")
            a.jobs.reportBytes(jobID: id, mediaID: mediaIDs[1], bytes: 40)
            try await a.jobs.requeue(first.lease)
            let requeued = try #require(try await b.jobs.find(id: id, tenant: .default))
            #expect(requeued.uploads.map(\.error) == [nil, nil] && requeued.uploads.map(\.attempts) == [0, 2], "put back: pending again")
            // Whatever a row holds when the job is claimed again (a put back leaves none of this), the run starts afresh.
            try await a.run("UPDATE uploads SET error = 'stale', bytes_sent = 7 WHERE job_id = \(id) AND media_id = \(mediaIDs[0])")
            _ = try #require(try await a.jobs.claim(runner: "a", leaseUntil: Timestamp.now().adding(milliseconds: 60_000), now: .now()))
            let seen = try #require(try await b.jobs.find(id: id, tenant: .default))
            #expect(seen.state == .running && seen.attempt == 2)
            #expect(seen.uploads.map(\.state) == [.pending, .pending] && seen.uploads.map(\.error) == [nil, nil])
            #expect(seen.uploads.map(\.bytesSent) == [0, 0] && seen.uploads.map(\.attempts) == [0, 2])
        }
    }

    @Test("a capped claim waits for the claim lock, then counts the jobs claimed meanwhile: two claims never both pass the cap")
    func aCappedClaimTakesItsTurn() async throws {
        try await withTwoReplicas { a, b in
            let tenant = Tenant(uncheckedName: "capped")
            for text in ["first", "second"] {
                _ = try await a.posts.create(PostRequest(text: text, mediaIDs: []), tenant: tenant, idempotency: nil, now: .now())
            }
            let lease = Timestamp.now().adding(milliseconds: 60_000)
            // B holds the lock capped claims take, as another replica's capped claim would.
            let held = StartGate()
            let release = StartGate()
            async let holder: Void = b.write { transaction in
                try await transaction.run("SELECT pg_advisory_xact_lock(\(PostgresJobRepository.claimLock))")
                held.open()
                await release.wait()
            }
            await held.wait()
            async let capped = a.jobs.claim(upTo: 2, runner: "capped", leaseUntil: lease, now: .now(), tenantCap: 1)
            // Once the capped claim waits for the lock (looked for every 10 ms, 5 s at most), an uncapped one takes a job.
            var waiting = false
            for _ in 0..<500 where !waiting {
                waiting =
                    try await b.run("SELECT count(*)::int FROM pg_locks WHERE locktype = 'advisory' AND NOT granted").first?.decode(Int.self) == 1
                if !waiting { try await Task.sleep(for: .milliseconds(10)) }
            }
            #expect(waiting, "the capped claim waits for the lock")
            #expect(try await a.jobs.claim(upTo: 1, runner: "free", leaseUntil: lease, now: .now()).count == 1)
            release.open()
            try await holder
            #expect(try await capped.isEmpty, "the capped claim counted the job claimed while it waited")
        }
    }
}
