import HeraldCore
import HeraldStorage
import HeraldTestSupport
import Publishing
import SQLiteStorage
import Testing

@Suite("Object clean-up", .serialized, .timeLimit(.minutes(1)))
struct ObjectCleanerTests {
    /// When the clean-up's rows written now are due.
    static func settled() -> Timestamp { Timestamp.now().adding(milliseconds: PendingObjectDeletion.settle) }

    @Test func anUploadTheStoreCompletesAfterTheCancelIsDeletedByTheSecondPass() async throws {
        let harness = try Harness()
        defer { harness.remove() }
        let store = TestStore(default: .landsWhenCancelled)
        let deletions = harness.storage.objectDeletions
        let cleaner = ObjectCleaner(deletions: deletions, store: store, logger: harness.logger)
        let created = try await harness.post(media: 2)
        let (job, cancelledAt) = try await harness.withRunner(store, harness.configuration(), cleaner: cleaner) { _ in
            await store.waitUntilInFlight(2)
            let cancelledAt = Timestamp.now()
            _ = try await harness.jobs.requestCancel(id: created.job.id, tenant: .default, now: cancelledAt)
            return (try await harness.waitUntilDone(created.job.id), cancelledAt)
        }
        #expect(job.state == .cancelled)
        // The runner deleted both keys at once; then the store completes the PUTs whose bodies it had whole.
        #expect(store.deleted.count == 2)
        store.landCancelled()
        #expect(store.stored.count == 2)
        #expect(Set(try await deletions.pendingMediaIDs()) == Set(created.post.media.map(\.id)))

        // The job ended after the cancel: its deletions are due a settle time after that, whatever the clock says now
        // (a slow run, under ThreadSanitizer, passed 10 s before reaching here).
        #expect(await cleaner.deleteDue(now: cancelledAt.adding(milliseconds: PendingObjectDeletion.settle - 1)) == 0, "not before the settle time")
        #expect(await cleaner.deleteDue(now: Self.settled()) == 2)
        #expect(store.stored.isEmpty)
        #expect(try await deletions.pendingMediaIDs().isEmpty)
    }

    @Test func aFailedDeleteIsTriedAgainLater() async throws {
        let harness = try Harness()
        defer { harness.remove() }
        let store = TestStore()
        let deletions = harness.storage.objectDeletions
        let cleaner = ObjectCleaner(deletions: deletions, store: store, logger: harness.logger)
        let created = try await harness.post(media: 1)
        // Cancelled while queued: no runner ran it, only the clean-up's rows know its keys.
        _ = try await harness.jobs.requestCancel(id: created.job.id, tenant: .default, now: .now())
        store.failDeletes(1)
        let due = Self.settled()
        #expect(await cleaner.deleteDue(now: due) == 0)
        #expect(try await deletions.pendingMediaIDs() == [created.post.media[0].id])
        #expect(await cleaner.deleteDue(now: due) == 0, "backed off")
        #expect(
            await cleaner.deleteDue(now: due.adding(milliseconds: Int64(RetryStrategy.objectDeletions.delay(after: 1).components.seconds) * 1000))
                == 1)
        #expect(try await deletions.pendingMediaIDs().isEmpty)
        #expect(store.deleted.count == 1)
    }

    @Test func aRepublishCancelsTheCleanUpAndItsUploadsWaitForADeleteUnderWay() async throws {
        let harness = try Harness()
        defer { harness.remove() }
        let store = TestStore()
        let deletions = harness.storage.objectDeletions
        let cleaner = ObjectCleaner(deletions: deletions, store: store, logger: harness.logger)
        let created = try await harness.post(media: 1)
        let key = MediaObject.key(mediaID: created.post.media[0].id.rawValue, fileExtension: "png")
        _ = try await harness.jobs.requestCancel(id: created.job.id, tenant: .default, now: .now())

        // The clean-up's DELETE of the key is under way (held inside the store) when the post is published again.
        store.holdDeletes()
        async let cleaning = cleaner.deleteDue(now: Self.settled())
        await store.waitUntilDeleteHeld()
        guard case .queued(let again) = try await harness.posts.republish(id: created.post.id, tenant: .default, now: .now()) else {
            Issue.record("the cancelled post is published again")
            return
        }
        #expect(try await deletions.pendingMediaIDs().isEmpty, "a re-publish takes its post's rows back")
        let job = try await harness.withRunner(store, harness.configuration(), cleaner: cleaner) { _ in
            // The new job's upload waits for the DELETE: it has not reached the store.
            try await Task.sleep(for: .milliseconds(200))
            #expect(store.calls(created.post.media[0].id) == 0)
            store.releaseDeletes()
            return try await harness.waitUntilDone(again.job.id)
        }
        _ = await cleaning
        #expect(job.state == .succeeded)
        #expect(store.stored == [key], "the DELETE landed before the new object, not after")
    }
}
