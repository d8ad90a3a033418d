import HeraldCore
public import HeraldStorage
public import Logging
import Metrics
public import ServiceLifecycle
import Synchronization

/// Deletes from the store what failed and cancelled jobs may have left: the rows of ``ObjectDeletionRepository``.
///
/// The runner deletes a stopped job's objects at once; this is the durable second pass, for what that cannot
/// catch: a PUT already sent in full when its upload was cancelled, which the store completes after the runner's
/// DELETE (rows are due a few seconds after the job's end); a job re-queued by a crash and then cancelled while
/// queued; a DELETE that failed (retried with backoff, across restarts). A re-publish removes its post's rows,
/// and its uploads wait for a DELETE of the same key already under way (``settled(key:)``), so that DELETE never
/// lands after the new object.
public final class ObjectCleaner: Service, Sendable {
    private let queue: DeletionQueue
    private let loop: WorkLoop<DeletionQueue>

    /// How often the table is read when nothing is due sooner.
    static let interval: Duration = .seconds(Int(PendingObjectDeletion.settle / 1000))

    public init(deletions: any ObjectDeletionRepository, store: any MediaStore, logger: Logger) {
        queue = DeletionQueue(deletions: deletions, store: store, logger: logger)
        // One DELETE at a time: a clean-up, never in a hurry; a DELETE cut by shutdown is tried again at the next start.
        loop = WorkLoop(queue: queue, configuration: .init(concurrency: 1, idle: Self.interval, shutdownGrace: .seconds(5)), logger: logger)
    }

    public func run() async throws {
        await withGracefulShutdownHandler {
            await loop.run()
        } onGracefulShutdown: {
            self.loop.stopClaiming()
        }
    }

    /// Deletes every object due at `now`, one after another; returns how many were deleted.
    @discardableResult
    public func deleteDue(now: Timestamp) async -> Int {
        var deleted = 0
        do {
            for deletion in try await queue.claim(upTo: 100, inHand: [], now: now) where await queue.delete(deletion, now: now) {
                deleted += 1
            }
        } catch {
            queue.logger.error("object clean-up failed", metadata: ["error": "\(error)"])
        }
        return deleted
    }

    /// Returns once no DELETE of `key` is under way: an upload of it calls this first.
    public func settled(key: String) async {
        await queue.settled(key: key)
    }
}

/// The object deletions as a ``WorkQueue``: due rows, soonest first; a failed DELETE is due again later by
/// ``RetryStrategy/objectDeletions``.
final class DeletionQueue: WorkQueue {
    private let deletions: any ObjectDeletionRepository
    private let store: any MediaStore
    let logger: Logger
    /// Keys being deleted now, with the uploads waiting for them.
    private let deleting = Mutex<[String: [CheckedContinuation<Void, Never>]]>([:])

    init(deletions: any ObjectDeletionRepository, store: any MediaStore, logger: Logger) {
        self.deletions = deletions
        self.store = store
        self.logger = logger
    }

    func id(of item: PendingObjectDeletion) -> MediaID { item.mediaID }

    /// Claimed for a minute, far longer than a DELETE takes: in hand here, not due elsewhere.
    func claim(upTo limit: Int, inHand: Set<MediaID>, now: Timestamp) async throws -> [PendingObjectDeletion] {
        try await deletions.claimDue(now: now, leaseUntil: now.adding(milliseconds: 60_000), limit: limit)
    }

    func nextDue(inHand: Set<MediaID>) async throws -> Timestamp? {
        try await deletions.nextDue()
    }

    func work(_ deletion: PendingObjectDeletion, control: WorkControl) async {
        await delete(deletion, now: .now())
    }

    /// Deletes one object and records it, or its retry; whether it was deleted.
    @discardableResult
    func delete(_ deletion: PendingObjectDeletion, now: Timestamp) async -> Bool {
        guard let type = MediaType(rawValue: deletion.contentType) else { return false }
        let key = MediaObject.key(mediaID: deletion.mediaID.rawValue, fileExtension: type.fileExtension)
        // Marked first, then checked: a re-publish that removed the row before the check is seen, and one after it
        // finds the key marked and waits.
        deleting.withLock { $0[key] = $0[key] ?? [] }
        defer { for waiter in deleting.withLock({ $0.removeValue(forKey: key) }) ?? [] { waiter.resume() } }
        do {
            guard try await deletions.isPending(deletion) else { return false }
            do {
                try await store.delete(key: key)
                try await deletions.done(deletion)
                Counter(label: "herald_objects_cleaned_total").increment()
                return true
            } catch {
                let delay = RetryStrategy.objectDeletions.delay(after: deletion.attempts + 1)
                logger.warning("could not delete an object; will retry", metadata: ["key": "\(key)", "error": "\(error)", "in": "\(delay)"])
                try await deletions.retry(deletion, at: now.adding(delay), error: "\(error)")
                return false
            }
        } catch {
            logger.error("object clean-up failed", metadata: ["error": "\(error)"])
            return false
        }
    }

    /// Returns once no DELETE of `key` is under way.
    func settled(key: String) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = deleting.withLock { deleting -> Bool in
                guard deleting[key] != nil else { return true }
                deleting[key]?.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }
}
