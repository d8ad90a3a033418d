import Crypto
import Foundation
import HTTPTypes
import HeraldCore
import Metrics
import MicroHTTP
import NIOPosix
import Platform
import Publishing

/// Where uploaded bytes wait until their post is published: files under `<data-dir>/staging` for SQLite's one
/// process, or objects under `staging/` in the media store that every replica reads (PostgreSQL).
///
/// Either way a staged medium's path in its row is `staging/<media id>.<ext>`: a path in the data directory, or a key.
struct StagingArea: Sendable {
    /// Where the staged bytes are: files under `<directory>/staging` (the one process's data directory), or objects
    /// under `staging/` in the media store (every replica's).
    let place: StagedBytes
    /// The media store, which holds the staged bytes when ``place`` is ``StagedBytes/store``.
    let store: any MediaStore
    /// Bytes that must stay free on the staged bytes' filesystem beyond an incoming body (`--min-free-disk`).
    var minFreeBytes: Int = 0
    static let folder = "staging"
    /// What a 507 tells the client to wait: space comes back when the sweep or an operator frees it.
    static let retryAfterFull = 60

    /// The directory the `staging/` folder is in on this machine's filesystem: the data directory, a file store's root;
    /// none for S3. Its filesystem is the one the disk reserve watches; resumable uploads append to files under it.
    var directoryOnDisk: String? {
        switch place {
        case .directory(let directory): directory
        case .store: (store as? FileMediaStore)?.root
        }
    }

    /// The object store that takes resumable uploads in parts, when the staged bytes are in one (S3 with replicas); nil
    /// when they are files (the data directory, a file store), which uploads append to.
    var multipartStore: (any MultipartStore)? {
        guard case .store = place else { return nil }
        return store as? any MultipartStore
    }

    /// Removes the bytes of a resumable upload that will not become media (deleted, expired, refused): its file, or its
    /// multipart upload and the object holding the bytes after its last whole part.
    func discard(_ upload: Upload) async {
        guard let multipartID = upload.multipartID, let parts = multipartStore else { return await remove(upload.bytesPath) }
        await parts.abortParts(key: upload.stagingPath, uploadID: multipartID)
        if upload.offset % Int64(parts.partSize) != 0 { try? await parts.delete(key: upload.tailKey(at: upload.offset)) }
    }

    /// Whether the staged entry `key` is among the `live` paths: itself, or the bytes after a live upload's last whole
    /// part (`<bytes path>.<offset>`).
    static func isLive(_ key: String, among live: Set<String>) -> Bool {
        if live.contains(key) { return true }
        guard let dot = key.lastIndex(of: "."), key[key.index(after: dot)...].allSatisfy(\.isNumber) else { return false }
        return live.contains(String(key[..<dot]))
    }

    /// Bytes free for an unprivileged writer on the staged bytes' filesystem (also the `herald_disk_free_bytes`
    /// gauge); nil if the filesystem cannot say, or there is none (S3).
    func freeBytes() -> Int? {
        var stats = statvfs()
        guard let directory = directoryOnDisk, statvfs(directory, &stats) == 0 else { return nil }
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
                "the staging disk has \(free) bytes free; this body needs \(declaredLength ?? 0) and \(minFreeBytes) are kept in reserve")
        }
    }

    /// Staged bytes, complete and durable.
    struct Staged: Sendable {
        var relativePath: String
        var size: Int
        var sha256: String
    }

    /// Stages `chunks` for `mediaID`: hashed as they stream, their signature checked against `type`, durable before
    /// this returns. On any error (or cancellation) nothing is left behind.
    ///
    /// The client's file name is never used: the name is the media id and the type's extension.
    func stage<Chunks: AsyncSequence>(_ chunks: Chunks, mediaID: String, type: MediaType, maxBytes: Int) async throws -> Staged
    where Chunks.Element == [UInt8] {
        let relativePath = "\(Self.folder)/\(mediaID).\(type.fileExtension)"
        let inspection = Inspection(type: type, maxBytes: maxBytes)
        let inspected = InspectedChunks(base: chunks, inspection: inspection)
        switch place {
        case .directory(let directory):
            try await write(inspected, to: directory + "/" + relativePath, folder: directory + "/" + Self.folder)
        case .store:
            do {
                _ = try await store.write(inspected, key: relativePath, contentType: type.rawValue)
            } catch let error as MediaStoreError {
                throw StagingError.store(error)
            }
        }
        return Staged(relativePath: relativePath, size: inspection.size, sha256: inspection.hasher.finalize().hexString)
    }

    /// Writes a file in the data directory's staging folder: fsynced, then renamed into place from `<path>.partial`.
    private func write<Chunks: AsyncSequence>(_ chunks: Chunks, to finalPath: String, folder: String) async throws
    where Chunks.Element == [UInt8] {
        do {
            try Self.makeDirectory(folder)
            _ = try await WritableFile(creating: finalPath + ".partial").fill(with: chunks, batchSize: Self.batchSize, renamingTo: finalPath)
        } catch let error as WritableFile.Failure {
            throw StagingError.io(error.operation, error.code)
        }
    }

    /// Removes the `.partial` files a crash left mid-upload in the data directory; returns their relative paths.
    ///
    /// Called at start, once the data directory's lock is held and before anything serves: no upload of this
    /// process can be writing one yet, and no other process can be.
    func removeAbandonedUploads() -> [String] {
        guard case .directory(let directory) = place else { return [] }
        let folder = directory + "/" + Self.folder
        let names = (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []
        return names.filter { $0.hasSuffix(".partial") && unlink(folder + "/" + $0) == 0 }.map { Self.folder + "/" + $0 }
    }

    /// Everything staged (in the data directory also the `.partial` files), each with when it was written.
    func entries() async throws -> [StoredEntry] {
        switch place {
        case .directory(let directory):
            // The folder listed as a file store rooted at the directory lists it (on NIO's thread pool).
            try await FileMediaStore(root: directory).list(prefix: Self.folder + "/")
        case .store:
            try await store.list(prefix: Self.folder + "/")
        }
    }

    /// Removes staged bytes; missing ones are fine, and a store that fails leaves them to the sweep.
    func remove(_ relativePath: String) async {
        switch place {
        case .directory(let directory): unlink(directory + "/" + relativePath)
        case .store: try? await store.delete(key: relativePath)
        }
    }

    /// How many bytes a staged body gathers before each write to its file (fewer, larger writes); a `PATCH` too.
    static let batchSize = 256 << 10

    private static func makeDirectory(_ path: String) throws(WritableFile.Failure) {
        guard mkdir(path, 0o700) == 0 || errno == EEXIST else { throw WritableFile.Failure(operation: "mkdir \(path)", code: errno) }
    }
}

/// Why bytes could not be staged.
enum StagingError: Error, Equatable {
    case empty
    case tooLarge(limit: Int)
    case signatureMismatch(MediaType)
    case io(String, Int32)
    /// The media store that holds staged bytes failed.
    case store(MediaStoreError)
}

/// What the bytes of one upload were found to be as they streamed: their hash, size and first bytes.
///
/// A class read after the stream ends; used by the one task that stages.
private final class Inspection {
    let type: MediaType
    let maxBytes: Int
    var hasher = SHA256()
    var size = 0
    var head: [UInt8] = []

    init(type: MediaType, maxBytes: Int) {
        self.type = type
        self.maxBytes = maxBytes
    }

    /// Takes one chunk: throws once the bytes are too many or their signature is not the type's.
    func take(_ chunk: [UInt8]) throws {
        size += chunk.count
        guard size <= maxBytes else { throw StagingError.tooLarge(limit: maxBytes) }
        if head.count < MediaType.signatureLength {
            head.append(contentsOf: chunk.prefix(MediaType.signatureLength - head.count))
            if head.count == MediaType.signatureLength, !type.matches(signature: head) { throw StagingError.signatureMismatch(type) }
        }
        hasher.update(data: chunk)
    }

    /// At the end: throws for no bytes, or too few that are not the type's.
    func finish() throws {
        guard size > 0 else { throw StagingError.empty }
        if head.count < MediaType.signatureLength, !type.matches(signature: head) { throw StagingError.signatureMismatch(type) }
    }
}

/// A body's chunks passed through an ``Inspection``, which may refuse them: the writer then removes what it wrote.
private struct InspectedChunks<Base: AsyncSequence>: AsyncSequence where Base.Element == [UInt8] {
    let base: Base
    let inspection: Inspection

    struct AsyncIterator: AsyncIteratorProtocol {
        var base: Base.AsyncIterator
        let inspection: Inspection

        mutating func next() async throws -> [UInt8]? {
            guard let chunk = try await base.next() else {
                try inspection.finish()
                return nil
            }
            try inspection.take(chunk)
            return chunk
        }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(base: base.makeAsyncIterator(), inspection: inspection) }
}

extension Request {
    /// The body's `Content-Length`, if the client declared one.
    var declaredLength: Int? { fields[.contentLength].flatMap { Int($0) } }
}

extension Upload {
    /// Where the complete upload's bytes are staged, as media: `staging/<id>.<ext>` (in an object store, the multipart
    /// upload's key).
    var stagingPath: String { "\(StagingArea.folder)/\(id).\(contentType.fileExtension)" }

    /// In an object store, the object that holds the bytes after the last whole part when the offset is `offset`: named
    /// by its offset, so that a replica that lost its hold writes a name no row will read.
    func tailKey(at offset: Int64) -> String { "\(bytesPath).\(offset)" }
}
