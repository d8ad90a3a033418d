import Foundation
import GRDB
import HeraldCore
import HeraldStorage
import Logging
import SQLiteStorage
import Testing

@Suite("PostRepository")
struct PostRepositoryTests {
    // MARK: Creating

    @Test("an immediate post is queued with its job, one pending upload per medium and its media attached in order")
    func createQueued() async throws {
        try await withRepositoryFixture { fixture in
            let mediaIDs = try await fixture.stage(3)
            let order = [mediaIDs[2], mediaIDs[0], mediaIDs[1]]
            let now = RepositoryFixture.at(10)
            let creation = try await fixture.posts.create(
                PostRequest(text: "hello", mediaIDs: order, priority: .high),
                tenant: .default,
                idempotency: nil,
                now: now
            )
            guard case .created(let created) = creation else {
                Issue.record("expected created, got \(creation)")
                return
            }
            let post = created.post
            let job = created.job
            #expect(post.state == .queued)
            #expect(post.text == "hello")
            #expect(post.priority == .high)
            #expect(post.createdAt == now)
            #expect(post.scheduledAt == nil)
            #expect(post.publishedAt == nil)
            #expect(post.jobID == job.id)
            #expect(post.media.map(\.id) == order)
            #expect(post.media.allSatisfy { $0.postID == post.id && $0.state == .staged && $0.url == nil })
            #expect(Identifier.isValid(post.id.rawValue) && Identifier.isValid(job.id.rawValue))

            #expect(job.state == .queued)
            #expect(job.postID == post.id)
            #expect(job.priority == .high)
            #expect(job.attempt == 0)
            #expect(job.runAt == now)
            #expect(job.createdAt == now)
            #expect(job.cancelRequested == false)
            #expect(job.error == nil)
            #expect(job.startedAt == nil && job.finishedAt == nil)
            // Each upload carries its medium's size (staged as 100 + its index), none of it sent yet.
            let sizes = Dictionary(uniqueKeysWithValues: mediaIDs.enumerated().map { ($0.element, 100 + $0.offset) })
            #expect(job.uploads == order.map { Job.Upload(mediaID: $0, state: .pending, attempts: 0, error: nil, size: sizes[$0]!) })

            let positions = try await fixture.storage.pool.read { db in
                try Row.fetchAll(db, sql: "SELECT id, position FROM media WHERE post_id = ? ORDER BY position", arguments: [post.id])
                    .map { $0["id"] as MediaID }
            }
            #expect(positions == order)
            let rank = try await fixture.int("SELECT priority FROM jobs WHERE id = ?", [job.id])
            #expect(rank == 0)

            #expect(try await fixture.posts.find(id: post.id, tenant: .default) == post)
            #expect(try await fixture.jobs.find(id: job.id, tenant: .default) == job)
        }
    }

    @Test("a post scheduled in the future is scheduled until then; one scheduled in the past is queued now")
    func createScheduled() async throws {
        try await withRepositoryFixture { fixture in
            let now = RepositoryFixture.at(0)
            let later = RepositoryFixture.at(3600)
            let scheduled = try await fixture.create(text: "later", scheduledAt: later, at: now)
            #expect(scheduled.post.state == .scheduled)
            #expect(scheduled.post.scheduledAt == later)
            #expect(scheduled.job.state == .scheduled)
            #expect(scheduled.job.runAt == later)

            let past = RepositoryFixture.at(-60)
            let immediate = try await fixture.create(text: "past", scheduledAt: past, at: now)
            #expect(immediate.post.state == .queued)
            #expect(immediate.job.state == .queued)
            #expect(immediate.job.runAt == now)
        }
    }

    @Test("every unknown and already attached media id is reported at once, and nothing is written")
    func invalidMedia() async throws {
        try await withRepositoryFixture { fixture in
            let staged = try await fixture.stage(3)
            let other = try await fixture.create(text: "owner", media: [staged[0]], at: RepositoryFixture.at(1))
            let unknown = MediaID.generate(at: RepositoryFixture.at(2))

            let creation = try await fixture.posts.create(
                PostRequest(text: "bad", mediaIDs: [staged[1], staged[0], unknown, staged[2]]),
                tenant: .default,
                idempotency: nil,
                now: RepositoryFixture.at(5)
            )
            guard case .invalid(let issues) = creation else {
                Issue.record("expected invalid, got \(creation)")
                return
            }
            #expect(issues.map(\.pointer) == ["/media_ids/1", "/media_ids/2"])
            // Another post is not named: it may be someone else's.
            #expect(issues[0].detail.contains("attached to another post") && !issues[0].detail.contains(other.post.id.rawValue))
            #expect(issues[1].detail.contains(unknown.rawValue))

            #expect(try await fixture.int("SELECT count(*) FROM posts") == 1)
            #expect(try await fixture.int("SELECT count(*) FROM jobs") == 1)
            #expect(try await fixture.media.find(id: staged[1], tenant: .default)?.postID == nil)
            #expect(try await fixture.media.find(id: staged[2], tenant: .default)?.postID == nil)
        }
    }

    // MARK: Idempotency

    @Test("the same key and payload replays the same ids with the current state; another payload is refused")
    func idempotentReplay() async throws {
        try await withRepositoryFixture { fixture in
            let key = IdempotencyRecord(key: "abc", requestHash: "hash-1")
            let request = PostRequest(text: "once", mediaIDs: try await fixture.stage(1))
            let first = try await fixture.posts.create(request, tenant: .default, idempotency: key, now: RepositoryFixture.at(0))
            guard case .created(let created) = first else {
                Issue.record("expected created, got \(first)")
                return
            }

            // The job moves on; a replay shows where it is now.
            let claimed = try await fixture.jobs.claim(runner: "r", leaseUntil: RepositoryFixture.at(40), now: RepositoryFixture.at(10))
            #expect(claimed?.jobID == created.job.id)

            let again = try await fixture.posts.create(request, tenant: .default, idempotency: key, now: RepositoryFixture.at(20))
            guard case .replayed(let replayed) = again else {
                Issue.record("expected replayed, got \(again)")
                return
            }
            #expect(replayed.post.id == created.post.id)
            #expect(replayed.job.id == created.job.id)
            #expect(replayed.post.state == .publishing)
            #expect(replayed.job.state == .running)
            #expect(try await fixture.int("SELECT count(*) FROM posts") == 1)

            let other = IdempotencyRecord(key: "abc", requestHash: "hash-2")
            let mismatch = try await fixture.posts.create(
                PostRequest(text: "other", mediaIDs: []), tenant: .default, idempotency: other, now: RepositoryFixture.at(30))
            #expect(mismatch == .keyReusedWithOtherPayload)
            #expect(try await fixture.posts.reserve(other, tenant: .default, now: RepositoryFixture.at(30)) == .keyReusedWithOtherPayload)
            #expect(try await fixture.posts.reserve(key, tenant: .default, now: RepositoryFixture.at(30)) == again)

            // Still remembered just before 24 hours; forgotten after.
            let dayLater = RepositoryFixture.at(24 * 3600 - 1)
            let stillThere = try await fixture.posts.create(PostRequest(text: "x", mediaIDs: []), tenant: .default, idempotency: other, now: dayLater)
            #expect(stillThere == .keyReusedWithOtherPayload)
            let expired = try await fixture.posts.create(
                PostRequest(text: "x", mediaIDs: []),
                tenant: .default,
                idempotency: other,
                now: RepositoryFixture.at(24 * 3600 + 1)
            )
            guard case .created(let fresh) = expired else {
                Issue.record("expected created after expiry, got \(expired)")
                return
            }
            #expect(fresh.post.id != created.post.id)
            let expiresAt = try await fixture.string("SELECT expires_at FROM idempotency_keys WHERE key = 'abc'")
            #expect(expiresAt == RepositoryFixture.at(2 * 24 * 3600 + 1).rfc3339)
        }
    }

    @Test("a reservation answers 409 for 60 seconds, is then taken over, is completed by create and can be released")
    func reservations() async throws {
        try await withRepositoryFixture { fixture in
            let key = IdempotencyRecord(key: "multipart", requestHash: "h")
            #expect(try await fixture.posts.reserve(key, tenant: .default, now: RepositoryFixture.at(0)) == nil)
            #expect(try await fixture.posts.reserve(key, tenant: .default, now: RepositoryFixture.at(59.999)) == .keyInProgress)
            #expect(
                try await fixture.posts.reserve(
                    IdempotencyRecord(key: "multipart", requestHash: "other"), tenant: .default, now: RepositoryFixture.at(1))
                    == .keyReusedWithOtherPayload
            )
            // Abandoned after 60 s: the next request takes it over, and the 60 s start again.
            #expect(try await fixture.posts.reserve(key, tenant: .default, now: RepositoryFixture.at(60)) == nil)
            #expect(try await fixture.posts.reserve(key, tenant: .default, now: RepositoryFixture.at(100)) == .keyInProgress)

            // The owner of the reservation stages its media and creates: that completes the key.
            let media = try await fixture.stage(1, at: RepositoryFixture.at(101))
            let creation = try await fixture.posts.create(
                PostRequest(text: "multi", mediaIDs: media),
                tenant: .default,
                idempotency: key,
                now: RepositoryFixture.at(102)
            )
            guard case .created(let created) = creation else {
                Issue.record("expected created, got \(creation)")
                return
            }
            #expect(try await fixture.string("SELECT state FROM idempotency_keys WHERE key = 'multipart'") == "completed")
            #expect(try await fixture.posts.reserve(key, tenant: .default, now: RepositoryFixture.at(103)) == .replayed(created))
            // A completed key is never released.
            try await fixture.posts.release(key, tenant: .default)
            #expect(try await fixture.posts.reserve(key, tenant: .default, now: RepositoryFixture.at(104)) == .replayed(created))

            // A failed request releases its reservation, so a retry goes ahead at once.
            let second = IdempotencyRecord(key: "retry", requestHash: "h2")
            #expect(try await fixture.posts.reserve(second, tenant: .default, now: RepositoryFixture.at(200)) == nil)
            try await fixture.posts.release(second, tenant: .default)
            #expect(try await fixture.posts.reserve(second, tenant: .default, now: RepositoryFixture.at(201)) == nil)
        }
    }

    // MARK: Reading

    @Test("find returns nil for an unknown id; list pages newest first with cursors and a state filter")
    func findAndList() async throws {
        try await withRepositoryFixture { fixture in
            #expect(try await fixture.posts.find(id: PostID.generate(), tenant: .default) == nil)

            var created: [PostAndJob] = []
            for index in 0..<7 {
                // Two posts share each second, so the id breaks ties.
                let media = try await fixture.stage(1)
                created.append(try await fixture.create(text: "post \(index)", media: media, at: RepositoryFixture.at(Double(index / 2))))
            }
            // Ids made by parallel tests at other instants may reorder ids within one millisecond: expect the list's
            // own order, (created_at, id) descending, which puts both posts of a second together.
            let newestFirst = created.map(\.post)
                .sorted { ($0.createdAt, $0.id) > ($1.createdAt, $1.id) }
                .map(\.id)
            #expect(Set(newestFirst) == Set(created.map(\.post.id)))

            var seen: [PostID] = []
            var cursor: HeraldCore.Cursor?
            var pages = 0
            repeat {
                let page = try await fixture.posts.list(tenant: .default, state: nil, limit: 3, after: cursor)
                seen += page.data.map(\.id)
                #expect(page.data.allSatisfy { $0.media.count == 1 && $0.media[0].postID == $0.id })
                cursor = page.nextCursor
                pages += 1
            } while cursor != nil && pages < 10
            #expect(pages == 3)
            #expect(seen == newestFirst)

            // Three of them fail; the filter finds exactly those, in order, over pages of two.
            let failing = [created[1], created[4], created[6]]
            for (index, item) in failing.enumerated() {
                let time = RepositoryFixture.at(Double(20 + index))
                try await fixture.setStates(postID: item.post.id, jobID: item.job.id, post: .failed, job: .failed, at: time)
            }
            // One post per second among these (indexes 1, 4, 6 were made at seconds 0, 2, 3): no tie.
            let first = try await fixture.posts.list(tenant: .default, state: .failed, limit: 2, after: nil)
            #expect(first.data.map(\.id) == [created[6].post.id, created[4].post.id])
            let second = try await fixture.posts.list(tenant: .default, state: .failed, limit: 2, after: first.nextCursor)
            #expect(second.data.map(\.id) == [created[1].post.id])
            #expect(second.nextCursor == nil)
            #expect(try await fixture.posts.list(tenant: .default, state: .published, limit: 5, after: nil).data.isEmpty)
            #expect(try await fixture.posts.list(tenant: .default, state: .queued, limit: 10, after: nil).data.count == 4)
        }
    }

    // MARK: Re-publishing

    @Test("only a failed or cancelled post is published again, with a new queued job and fresh uploads")
    func republish() async throws {
        try await withRepositoryFixture { fixture in
            #expect(try await fixture.posts.republish(id: PostID.generate(), tenant: .default, now: RepositoryFixture.at(0)) == .notFound)

            let media = try await fixture.stage(2)
            let original = try await fixture.create(text: "again", media: media, priority: .low, at: RepositoryFixture.at(0))
            guard case .conflict = try await fixture.posts.republish(id: original.post.id, tenant: .default, now: RepositoryFixture.at(1)) else {
                Issue.record("a queued post must not be re-published")
                return
            }

            let claimed = try await fixture.jobs.claim(runner: "r", leaseUntil: RepositoryFixture.at(60), now: RepositoryFixture.at(2))
            fixture.jobs.updateUpload(jobID: original.job.id, mediaID: media[0], state: .failed, attempts: 3, error: "boom")
            let failure = Job.Failure(code: .uploadFailed, message: "boom", mediaID: media[0])
            #expect(claimed != nil)
            guard
                case .done = try await fixture.jobs.fail(
                    JobLease(jobID: original.job.id, runner: "r", attempt: 1), error: failure, now: RepositoryFixture.at(3))
            else {
                Issue.record("fail was refused")
                return
            }

            let result = try await fixture.posts.republish(id: original.post.id, tenant: .default, now: RepositoryFixture.at(10))
            guard case .queued(let again) = result else {
                Issue.record("expected queued, got \(result)")
                return
            }
            #expect(again.post.id == original.post.id)
            #expect(again.post.state == .queued)
            #expect(again.post.jobID == again.job.id)
            #expect(again.job.id != original.job.id)
            #expect(again.job.state == .queued)
            #expect(again.job.priority == .low)
            #expect(again.job.runAt == RepositoryFixture.at(10))
            #expect(again.job.attempt == 0)
            #expect(again.job.uploads == media.enumerated().map { Job.Upload(mediaID: $0.element, size: 100 + $0.offset) })
            #expect(again.post.media.map(\.id) == media)
            #expect(again.post.media.allSatisfy { $0.state == .staged })
            // The old job keeps its history.
            let old = try await fixture.jobs.find(id: original.job.id, tenant: .default)
            #expect(old?.state == .failed)
            #expect(old?.uploads.first?.error == "boom")

            // A job is active again: conflict; once published: conflict too.
            guard case .conflict = try await fixture.posts.republish(id: original.post.id, tenant: .default, now: RepositoryFixture.at(11)) else {
                Issue.record("a post with an active job must not be re-published")
                return
            }
            _ = try await fixture.jobs.claim(runner: "r", leaseUntil: RepositoryFixture.at(60), now: RepositoryFixture.at(12))
            let objects = Dictionary(uniqueKeysWithValues: media.map { ($0, StoredObject(key: $0.rawValue, url: "https://cdn/\($0)")) })
            #expect(
                try await fixture.jobs.commit(JobLease(jobID: again.job.id, runner: "r", attempt: 1), objects: objects, now: RepositoryFixture.at(13))
                    != .lostLease)
            let published = try await fixture.posts.republish(id: original.post.id, tenant: .default, now: RepositoryFixture.at(14))
            #expect(published == .conflict("The post is already published."))

            // A cancelled post can be published again as well.
            let cancelled = try await fixture.create(text: "cancel me", at: RepositoryFixture.at(20))
            _ = try await fixture.jobs.requestCancel(id: cancelled.job.id, tenant: .default, now: RepositoryFixture.at(21))
            guard
                case .queued(let revived) = try await fixture.posts.republish(id: cancelled.post.id, tenant: .default, now: RepositoryFixture.at(22))
            else {
                Issue.record("a cancelled post can be re-published")
                return
            }
            #expect(revived.job.state == .queued)
            #expect(revived.post.state == .queued)
        }
    }
}

// MARK: - Fixture (shared with JobRepositoryTests)

/// A fresh store in its own temporary directory, with the repositories over it.
struct RepositoryFixture: Sendable {
    let storage: SQLiteStorage
    let posts: any PostRepository
    let jobs: any JobRepository
    let media: any MediaRepository

    /// The tests' origin of time.
    static let origin = Timestamp(rfc3339: "2026-11-22T10:00:00.000Z")!

    /// `seconds` after ``origin``.
    static func at(_ seconds: Double) -> Timestamp {
        origin.adding(milliseconds: Int64((seconds * 1000).rounded()))
    }

    /// Inserts `count` staged media through ``MediaRepository``; returns their ids in insertion order.
    func stage(_ count: Int, at time: Timestamp = RepositoryFixture.origin) async throws -> [MediaID] {
        var ids: [MediaID] = []
        for index in 0..<count {
            let id = MediaID.generate(at: time)
            let medium = Media(
                id: id,
                contentType: index % 2 == 0 ? .png : .mp4,
                size: Int64(100 + index),
                sha256: String(repeating: "ab", count: 32),
                createdAt: time
            )
            try await media.insert(medium, tenant: .default, stagingPath: "staging/\(id)")
            ids.append(id)
        }
        return ids
    }

    /// Creates a post that must be accepted.
    func create(
        text: String,
        media: [MediaID] = [],
        priority: Priority = .normal,
        scheduledAt: Timestamp? = nil,
        at now: Timestamp
    ) async throws -> PostAndJob {
        let creation = try await posts.create(
            PostRequest(text: text, mediaIDs: media, scheduledAt: scheduledAt, priority: priority),
            tenant: .default,
            idempotency: nil,
            now: now
        )
        guard case .created(let created) = creation else {
            throw FixtureError(message: "expected a created post, got \(creation)")
        }
        return created
    }

    /// Forces a post and its job into terminal states (for list filters), keeping the schema's CHECKs.
    func setStates(postID: PostID, jobID: JobID, post: PostState, job: JobState, at time: Timestamp) async throws {
        try await storage.pool.write { db in
            try db.execute(sql: "UPDATE posts SET state = ? WHERE id = ?", arguments: [post.rawValue, postID])
            try db.execute(
                sql: "UPDATE jobs SET state = ?, finished_at = ?, error_code = 'internal' WHERE id = ?",
                arguments: [job.rawValue, time.rfc3339, jobID]
            )
        }
    }

    func int(_ sql: String, _ arguments: StatementArguments = []) async throws -> Int? {
        try await storage.pool.read { db in try Int.fetchOne(db, sql: sql, arguments: arguments) }
    }

    func string(_ sql: String, _ arguments: StatementArguments = []) async throws -> String? {
        try await storage.pool.read { db in try String.fetchOne(db, sql: sql, arguments: arguments) }
    }
}

struct FixtureError: Error, CustomStringConvertible {
    let message: String
    var description: String { message }
}

/// Runs `body` with a fresh store in a new temporary directory, removed afterwards.
func withRepositoryFixture(_ body: (RepositoryFixture) async throws -> Void) async throws {
    let directory = FileManager.default.temporaryDirectory
        .appendingPathComponent("herald-repository-tests-\(UUID().uuidString)", isDirectory: true)
        .path
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let storage = try SQLiteStorage.open(directory: directory, logger: Logger(label: "herald.tests") { _ in SwiftLogNoOpLogHandler() })
    defer { try? storage.close() }
    let fixture = RepositoryFixture(
        storage: storage,
        posts: storage.posts,
        jobs: storage.jobs,
        media: storage.media
    )
    try await body(fixture)
}
