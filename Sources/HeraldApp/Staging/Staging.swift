import Crypto
import Foundation
import HTTPTypes
import HeraldCore
import Metrics
import MicroHTTP
import NIOPosix
import Platform

/// Where uploaded bytes wait, under `<data-dir>/staging`, until their post is published.
struct StagingArea: Sendable {
    /// The data directory; staged paths are stored relative to it.
    let dataDirectory: String
    /// Bytes that must stay free on the data directory's filesystem beyond an incoming body (`--min-free-disk`).
    var minFreeBytes: Int = 0
    static let folder = "staging"
    /// What a 507 tells the client to wait: space comes back when the sweep or an operator frees it.
    static let retryAfterFull = 60

    /// Bytes free for an unprivileged writer on the data directory's filesystem (also the `herald_disk_free_bytes`
    /// gauge); nil if the filesystem cannot say.
    func freeBytes() -> Int? {
        var stats = statvfs()
        guard statvfs(dataDirectory, &stats) == 0 else { return nil }
        let free = Int(stats.f_bavail) * Int(stats.f_frsize)
        Gauge(label: "herald_disk_free_bytes").record(free)
        return free
    }

    /// Refuses (507) a body of `declaredLength` bytes (0 when not declared) that would leave less than `minFreeBytes`.
    func ensureSpace(for declaredLength: Int?) throws {
        guard let free = freeBytes() else { return }
        let needed = (declaredLength ?? 0) + minFreeBytes
        guard free >= needed else {
            throw HTTPError.insufficientStorage(
                "the data directory has \(free) bytes free; this body needs \(declaredLength ?? 0) and \(minFreeBytes) are kept in reserve")
        }
    }

    /// The absolute path of a data-directory-relative staged path.
    func path(of relativePath: String) -> String { dataDirectory + "/" + relativePath }

    /// A staged file, complete and durable.
    struct Staged: Sendable {
        var relativePath: String
        var size: Int
        var sha256: String
    }

    /// Writes `chunks` to a new staging file for `mediaID`: hashed as it streams, its signature checked
    /// against `type`, fsynced, then renamed into place. On any error (or cancellation) nothing is left behind.
    ///
    /// The client's file name is never used: the name is the media id and the type's extension.
    func stage<Chunks: AsyncSequence>(_ chunks: Chunks, mediaID: String, type: MediaType, maxBytes: Int) async throws -> Staged
    where Chunks.Element == [UInt8] {
        let relativePath = "\(Self.folder)/\(mediaID).\(type.fileExtension)"
        let finalPath = path(of: relativePath)
        let partialPath = finalPath + ".partial"
        try Self.makeDirectory(path(of: Self.folder))
        let file = try StagingFile(creating: partialPath)
        do {
            var hasher = SHA256()
            var size = 0
            var head: [UInt8] = []
            var batch: [UInt8] = []
            batch.reserveCapacity(Self.batchSize)
            for try await chunk in chunks {
                size += chunk.count
                guard size <= maxBytes else { throw StagingError.tooLarge(limit: maxBytes) }
                if head.count < MediaType.signatureLength {
                    head.append(contentsOf: chunk.prefix(MediaType.signatureLength - head.count))
                    if head.count == MediaType.signatureLength, !type.matches(signature: head) {
                        throw StagingError.signatureMismatch(type)
                    }
                }
                hasher.update(data: chunk)
                batch.append(contentsOf: chunk)
                // Short page-cache writes in batches; the long wait (fsync) goes to NIO's thread pool below.
                if batch.count >= Self.batchSize {
                    try file.write(batch)
                    batch.removeAll(keepingCapacity: true)
                }
            }
            guard size > 0 else { throw StagingError.empty }
            if head.count < MediaType.signatureLength, !type.matches(signature: head) { throw StagingError.signatureMismatch(type) }
            try file.write(batch)
            try await file.synchronize()
            try file.close()
            guard rename(partialPath, finalPath) == 0 else { throw StagingError.io("rename", errno) }
            return Staged(relativePath: relativePath, size: size, sha256: hasher.finalize().hexString)
        } catch {
            try? file.close()
            unlink(partialPath)
            throw error
        }
    }

    /// Removes the `.partial` files a crash left mid-upload; returns their data-directory-relative paths.
    ///
    /// Called at start, once the data directory's lock is held and before anything serves: no upload of this
    /// process can be writing one yet, and no other process can be.
    func removeAbandonedUploads() -> [String] {
        let folder = path(of: Self.folder)
        let names = (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []
        return names.filter { $0.hasSuffix(".partial") && unlink(folder + "/" + $0) == 0 }.map { Self.folder + "/" + $0 }
    }

    /// Removes a staged file; a missing one is fine.
    func remove(_ relativePath: String) {
        unlink(path(of: relativePath))
    }

    private static let batchSize = 256 << 10

    private static func makeDirectory(_ path: String) throws {
        guard mkdir(path, 0o700) == 0 || errno == EEXIST else { throw StagingError.io("mkdir \(path)", errno) }
    }
}

/// Why bytes could not be staged.
enum StagingError: Error, Equatable {
    case empty
    case tooLarge(limit: Int)
    case signatureMismatch(MediaType)
    case io(String, Int32)
}

/// A file being written by one task: plain descriptors, so no cancelled-task rule can leave it open.
///
/// `@unchecked Sendable`: used by one task at a time (the fsync hands it to a pool thread and waits).
private final class StagingFile: @unchecked Sendable {
    private var descriptor: Int32

    init(creating path: String) throws {
        descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw StagingError.io("open \(path)", errno) }
    }

    deinit { if descriptor >= 0 { systemClose(descriptor) } }

    func write(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeBytes { systemWrite(descriptor, $0.baseAddress! + offset, $0.count - offset) }
            if written < 0 {
                if errno == EINTR { continue }
                throw StagingError.io("write", errno)
            }
            offset += written
        }
    }

    /// `fsync` on NIO's blocking-I/O pool: it can take milliseconds, too long for the cooperative pool.
    func synchronize() async throws {
        let descriptor = self.descriptor
        let result = try await NIOThreadPool.singleton.runIfActive { fsync(descriptor) == 0 ? 0 : errno }
        guard result == 0 else { throw StagingError.io("fsync", result) }
    }

    func close() throws {
        guard descriptor >= 0 else { return }
        let result = systemClose(descriptor)
        descriptor = -1
        guard result == 0 else { throw StagingError.io("close", errno) }
    }
}

extension Request {
    /// The body's `Content-Length`, if the client declared one.
    var declaredLength: Int? { head.headerFields[.contentLength].flatMap { Int($0) } }
}
