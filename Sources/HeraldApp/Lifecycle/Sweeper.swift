import Foundation
import HeraldCore
import HeraldStorage
import Logging
import Metrics
import Publishing
import ServiceLifecycle

/// Expires what has outlived its time, at start and every minute: unattached media past `--staged-media-ttl` (row,
/// then file), incomplete uploads past their `Upload-Expires`, idempotency keys past their 24 hours and webhook deliveries past their 7 days. At start and every hour it also removes staged files that no
/// live row needs (left by a crash between a publish's commit and its clean-up, or between a file and its row).
///
/// Each pass is one indexed query that reads nothing when nothing has expired.
struct Sweeper: Service {
    let media: any MediaRepository
    let uploads: any UploadRepository
    let posts: any PostRepository
    let webhooks: any WebhookRepository
    let staging: StagingArea
    /// Seconds an unattached medium is kept.
    let stagedMediaTTL: Int
    let logger: Logger

    static let interval: Duration = .seconds(60)
    /// How long webhook deliveries are kept, delivered or not.
    static let deliveryRetention: Int64 = 7 * 86_400_000
    static let filesInterval: Duration = .seconds(3600)
    /// A staged file younger than this may be an upload in progress (`.partial`) or a file whose row is being
    /// written: the file sweep leaves it for the next pass.
    static let fileGrace: TimeInterval = 600

    func run() async throws {
        var filesSwept: ContinuousClock.Instant?
        while !Task.isShuttingDownGracefully, !Task.isCancelled {
            _ = await sweep(now: .now())
            if filesSwept.map({ $0.duration(to: .now) >= Self.filesInterval }) ?? true {
                filesSwept = .now
                _ = await sweepFiles(olderThan: Self.fileGrace)
            }
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: Self.interval) }
        }
    }

    /// Expires unattached media, idempotency keys and webhook deliveries as of `now`; returns how many of each went.
    func sweep(now: Timestamp) async -> (media: Int, uploads: Int, keys: Int, deliveries: Int) {
        var result = (media: 0, uploads: 0, keys: 0, deliveries: 0)
        do {
            let paths = try await media.expireUnattached(createdBy: now.adding(milliseconds: -Int64(stagedMediaTTL) * 1000))
            // After the commit: a crash in between leaves files, which the file sweep removes, never rows without files.
            for path in paths { await staging.remove(path) }
            result.media = paths.count
            let expired = try await uploads.expire(now: now)
            for upload in expired { await staging.discard(upload) }
            result.uploads = expired.count
            result.keys = try await posts.forgetExpiredKeys(now: now)
            result.deliveries = try await webhooks.expire(before: now.adding(milliseconds: -Self.deliveryRetention))
        } catch {
            logger.error("sweep failed", metadata: ["error": "\(error)"])
        }
        if result.media > 0 || result.uploads > 0 || result.keys > 0 || result.deliveries > 0 {
            logger.info(
                "swept",
                metadata: [
                    "expired_media": "\(result.media)", "expired_uploads": "\(result.uploads)", "forgotten_idempotency_keys": "\(result.keys)",
                    "forgotten_webhook_deliveries": "\(result.deliveries)",
                ])
        }
        Counter(label: "herald_swept_total", dimensions: [("what", "media")]).increment(by: result.media)
        Counter(label: "herald_swept_total", dimensions: [("what", "uploads")]).increment(by: result.uploads)
        _ = staging.freeBytes()
        return result
    }

    /// Removes staged bytes older than `grace` seconds that no live row needs (and abandoned `.partial` files);
    /// returns their data-directory-relative paths (store keys).
    func sweepFiles(olderThan grace: TimeInterval) async -> [String] {
        do {
            let live = try await media.liveStagingPaths().union(uploads.liveBytesPaths())
            let cutoff = Date().timeIntervalSince1970 - grace
            let stray = try await staging.entries().filter { !StagingArea.isLive($0.key, among: live) && $0.modified <= cutoff }.map(\.key)
            for path in stray { await staging.remove(path) }
            if !stray.isEmpty { logger.notice("removed staged files no row needs", metadata: ["count": "\(stray.count)"]) }
            return stray
        } catch {
            logger.error("staging sweep failed", metadata: ["error": "\(error)"])
            return []
        }
    }
}
