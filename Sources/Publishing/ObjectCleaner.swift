import HeraldCore
public import HeraldStorage
public import Logging
import Metrics
public import ServiceLifecycle

/// Deletes from the store what failed and cancelled jobs may have left: the rows of ``ObjectDeletionRepository``.
///
/// The runner deletes a stopped job's objects at once; this is the durable second pass, for what that cannot
/// catch: a PUT already sent in full when its upload was cancelled, which the store completes after the runner's
/// DELETE (rows are due a few seconds after the job's end); a job re-queued by a crash and then cancelled while
/// queued; a DELETE that failed (retried with backoff, across restarts). A re-publish removes its post's rows,
/// and its uploads wait for a DELETE of the same key already under way (``settled(key:)``), so that DELETE never
/// lands after the new object.
public actor ObjectCleaner: Service {
    private let deletions: any ObjectDeletionRepository
    private let store: any MediaStore
    private let logger: Logger
    /// Keys being deleted now, with the uploads waiting for them.
    private var deleting: [String: [CheckedContinuation<Void, Never>]] = [:]

    /// How often the table is read when nothing is due sooner.
    static let interval: Duration = .seconds(Int(PendingObjectDeletion.settle / 1000))

    public init(deletions: any ObjectDeletionRepository, store: any MediaStore, logger: Logger) {
        self.deletions = deletions
        self.store = store
        self.logger = logger
    }

    public func run() async throws {
        while !Task.isShuttingDownGracefully, !Task.isCancelled {
            await deleteDue(now: .now())
            let next = try? await deletions.nextDue()
            let wait = next.map { min(Self.interval, .milliseconds(max(50, $0.milliseconds(since: .now())))) } ?? Self.interval
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: wait) }
        }
    }

    /// Deletes every object due at `now`; returns how many were deleted.
    @discardableResult
    public func deleteDue(now: Timestamp) async -> Int {
        var deleted = 0
        do {
            for deletion in try await deletions.due(now: now, limit: 100) {
                guard let type = MediaType(rawValue: deletion.contentType) else { continue }
                let key = MediaObject.key(mediaID: deletion.mediaID.rawValue, fileExtension: type.fileExtension)
                // Marked first, then checked: a re-publish that removed the row before the check is seen, and one
                // after it finds the key marked and waits.
                deleting[key] = deleting[key] ?? []
                defer { for waiter in deleting.removeValue(forKey: key) ?? [] { waiter.resume() } }
                guard try await deletions.isPending(deletion) else { continue }
                do {
                    try await store.delete(key: key)
                    try await deletions.done(deletion)
                    deleted += 1
                } catch {
                    let delay = RetryStrategy.objectDeletions.delay(after: deletion.attempts + 1)
                    logger.warning(
                        "could not delete an object; will retry", metadata: ["key": "\(key)", "error": "\(error)", "in": "\(delay)"])
                    try await deletions.retry(deletion, at: now.adding(delay), error: "\(error)")
                }
            }
        } catch {
            logger.error("object clean-up failed", metadata: ["error": "\(error)"])
        }
        if deleted > 0 { Counter(label: "herald_objects_cleaned_total").increment(by: deleted) }
        return deleted
    }

    /// Returns once no DELETE of `key` is under way: an upload of it calls this first.
    public func settled(key: String) async {
        guard deleting[key] != nil else { return }
        await withCheckedContinuation { deleting[key]?.append($0) ?? $0.resume() }
    }

}
