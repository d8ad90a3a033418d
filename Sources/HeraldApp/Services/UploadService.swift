import Crypto
import FileReading
import Foundation
import HTTPTypes
import HeraldCore
import HeraldStorage
import MicroHTTP
import NIOCore
import Platform
import Publishing
import Synchronization

/// Resumable uploads (tus): creates them, appends each `PATCH` body durably, and makes a complete one a staged media.
///
/// The offset lives in the database and moves only once the bytes up to it are fsynced, so a crash never reports
/// bytes it then loses; a file longer than its offset (bytes written but never counted) is cut back before the next
/// append. One `PATCH` at a time holds an upload, on whichever replica (a hold in the database, renewed while bytes
/// come); the offset moves only for the holder. The SHA-256 of the whole media runs on across `PATCH`es from the state
/// kept in ``UploadSessions``; after a restart (or a `PATCH` through another replica) the bytes already received are
/// read again, once.
struct UploadService {
    let uploads: any UploadRepository
    let media: any MediaRepository
    let staging: StagingArea
    let sessions: UploadSessions
    let maxMediaBytes: Int
    /// Seconds an incomplete upload is kept (`--staged-media-ttl`).
    let ttl: Int
    /// This process's replica id: the start of its holders' names.
    let replica: String

    /// What a creation asks for.
    struct Creation {
        var length: Int64
        var type: MediaType
        var description: String?
        /// `Upload-Metadata` as sent, if it was.
        var metadata: String?
    }

    /// Records a new upload of `tenant`.
    func create(_ creation: Creation, tenant: Tenant) async throws -> Upload {
        let id = MediaID.generate()
        let now = Timestamp.now()
        var upload = Upload(
            id: id, contentType: creation.type, description: creation.description, length: creation.length,
            bytesPath: "\(StagingArea.folder)/\(id).upload", metadata: creation.metadata, createdAt: now,
            expiresAt: now.adding(milliseconds: Int64(ttl) * 1000))
        if let parts = staging.multipartStore {
            // An object store: the bytes become one multipart upload, whichever replica takes each PATCH.
            upload.multipartID = try await Self.storeCall { try await parts.beginParts(key: upload.stagingPath, contentType: creation.type.rawValue) }
        } else {
            guard let folder = staging.directoryOnDisk else {
                throw HTTPError(.notImplemented, detail: "resumable uploads need the data directory, a file store or an S3 store")
            }
            // Once an upload, where it begins (not per PATCH): a file store's root may not exist yet.
            try FileManager.default.createDirectory(
                atPath: folder + "/" + StagingArea.folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            try staging.ensureSpace(for: Int(creation.length))
        }
        do {
            try await uploads.insert(upload, tenant: tenant)
        } catch {
            await staging.discard(upload)
            throw error
        }
        return upload
    }

    /// The upload `id` of `tenant`; an upload that became media answers as a complete one, its metadata what the media
    /// kept of it (`filetype`, `description`).
    func find(_ id: String, tenant: Tenant) async throws -> Upload {
        guard let uploadID = MediaID(validating: id) else { throw ServiceError.notFound(kind: "upload", id: id) }
        if let upload = try await uploads.find(id: uploadID, tenant: tenant, now: .now()) {
            // Every byte counted but not yet media: a crash came between the two; finish it now (under a hold).
            if upload.isComplete { _ = try await held(uploadID, tenant: tenant) { upload, _ in upload } }
            return upload
        }
        guard let medium = try await media.find(id: uploadID, tenant: tenant) else { throw ServiceError.notFound(kind: "upload", id: id) }
        let kept = [("filetype", medium.contentType.rawValue)] + (medium.description.map { [("description", $0)] } ?? [])
        return Upload(
            id: uploadID, contentType: medium.contentType, description: medium.description, length: medium.size, offset: medium.size,
            bytesPath: "", metadata: TusHeaders.metadataText(kept), createdAt: medium.createdAt,
            expiresAt: medium.createdAt.adding(milliseconds: Int64(ttl) * 1000))
    }

    /// Deletes the upload `id` of `tenant` and its bytes.
    func delete(_ id: String, tenant: Tenant) async throws {
        guard let uploadID = MediaID(validating: id), let upload = try await uploads.delete(id: uploadID, tenant: tenant) else {
            throw ServiceError.notFound(kind: "upload", id: id)
        }
        sessions.forget(uploadID)
        await staging.discard(upload)
    }

    /// The checksum a `PATCH` body must have.
    struct Checksum {
        var algorithm: TusHeaders.ChecksumAlgorithm
        var digest: [UInt8]
    }

    /// How long a `PATCH`'s hold lasts unless renewed, and how often a `PATCH` that is taking bytes renews it.
    static let holdTime: Int64 = 60_000
    static let renewAfter: Duration = .seconds(10)
    /// How many bytes a `PATCH` writes before it asks the disk to start writing them.
    static let writebackStep: Int64 = 1 << 20

    /// Appends `body` to upload `id` at `offset` (the client's `Upload-Offset`); the upload as it then is.
    ///
    /// Bytes received before the body stops short (a dropped connection, a refused chunk) are kept and counted, unless a
    /// checksum was sent: it covers the whole body, so a short one is dropped like a mismatched one.
    func append(_ body: RequestBody, to id: String, offset: Int64, checksum: Checksum?, tenant: Tenant) async throws -> Upload {
        guard let uploadID = MediaID(validating: id) else { throw ServiceError.notFound(kind: "upload", id: id) }
        try staging.ensureSpace(for: body.declaredLength)
        return try await held(uploadID, tenant: tenant) { upload, holder in
            guard offset == upload.offset else {
                throw HTTPError(.conflict, detail: "Upload-Offset is \(offset), but the upload has \(upload.offset) bytes")
            }
            let remaining = upload.length - upload.offset
            if let declared = body.declaredLength, Int64(declared) > remaining {
                throw HTTPError(.contentTooLarge, detail: "the body has \(declared) bytes, but only \(remaining) are left of Upload-Length")
            }
            if let parts = staging.multipartStore, let multipartID = upload.multipartID {
                return try await appendParts(
                    body, to: upload, holder: holder, checksum: checksum, tenant: tenant, store: parts, multipartID: multipartID)
            }
            return try await append(body, to: upload, holder: holder, checksum: checksum, tenant: tenant)
        }
    }

    /// Runs `body` while this process holds upload `id` (one `PATCH` at a time, whichever replica takes it): 404 when
    /// there is none, 423 when another holds it. An upload found complete but not yet media is finished first.
    private func held(
        _ id: MediaID, tenant: Tenant, _ body: (Upload, String) async throws -> Upload
    ) async throws -> Upload {
        let holder = "\(replica):\(UInt64.random(in: 0...UInt64.max))"
        let now = Timestamp.now()
        let upload: Upload
        switch try await uploads.hold(id: id, tenant: tenant, holder: holder, now: now, until: now.adding(milliseconds: Self.holdTime)) {
        case .notFound: throw ServiceError.notFound(kind: "upload", id: id.rawValue)
        case .busy: throw HTTPError(.locked, detail: "another PATCH is taking bytes for this upload; try again when it has ended")
        case .held(let found): upload = found
        }
        let result: Result<Upload, any Error>
        do {
            if upload.isComplete {
                _ = try await finish(upload, tenant: tenant, hasher: nil)
                result = .success(upload)
            } else {
                result = .success(try await body(upload, holder))
            }
        } catch {
            result = .failure(error)
        }
        // A body that succeeded ended the hold already (the offset's last move, or the row became media); a failed one,
        // also after a dropped connection (the task is cancelled), ends it here: apart from the task, awaited.
        if case .failure = result {
            await Task.detached { [uploads] in try? await uploads.release(id: id, holder: holder) }.value
        }
        return try result.get()
    }

    /// Appends `body` to the upload's file (the data directory, a file store).
    private func append(_ body: RequestBody, to upload: Upload, holder: String, checksum: Checksum?, tenant: Tenant) async throws -> Upload {
        let path = try bytesFile(upload.bytesPath)
        let file = try Self.io { () throws(WritableFile.Failure) in try WritableFile(appendingTo: path, after: upload.offset) }
        defer { try? file.close() }
        // The hash state where the last PATCH left it, or (another replica took those bytes, or this one restarted) the
        // bytes received so far read again, once.
        var hasher = sessions.hashState(of: upload.id, at: upload.offset)
        if hasher == nil { hasher = try await Self.hash(path) }
        guard let before = hasher else { throw HTTPError(.internalServerError, detail: "the upload's bytes could not be read") }
        var intake = Intake(upload: upload, holder: holder, uploads: uploads, checksum: checksum, hasher: before)
        var writtenBack: Int64 = 0
        // Bytes reach the file a batch at a time (fewer, larger writes); what a body ends with, also when it breaks off.
        // A write that fails (a full disk) ends the body: only what was written before it counts.
        var batch: [UInt8] = []
        batch.reserveCapacity(StagingArea.batchSize)
        var flushed: Int64 = 0
        var writeFailed = false
        var failure: (any Error)?
        do {
            for try await chunk in body {
                try await intake.take(chunk)
                batch.append(contentsOf: chunk)
                guard batch.count >= StagingArea.batchSize else { continue }
                do {
                    try Self.io { () throws(WritableFile.Failure) in try file.write(batch) }
                } catch {
                    writeFailed = true
                    throw error
                }
                batch.removeAll(keepingCapacity: true)
                flushed = intake.written
                // The disk writes each MiB while the next arrives: the fsync before the answer has little left to wait for.
                if flushed - writtenBack >= Self.writebackStep {
                    file.startWriteback(upload.offset + writtenBack..<upload.offset + flushed)
                    writtenBack = flushed
                }
            }
            try intake.verify()
        } catch {
            failure = error
        }
        if let failure, checksum != nil || intake.written == 0 {
            // Nothing of this body counts: the next append cuts the file back to the offset anyway.
            sessions.keep(before, of: upload, at: upload.offset)
            throw failure
        }
        var hashed = intake.hasher
        if !writeFailed {
            do {
                try Self.io { () throws(WritableFile.Failure) in try file.write(batch) }
                flushed = intake.written
            } catch {
                writeFailed = true
                failure = failure ?? error
            }
        }
        if writeFailed {
            // What the failed batch held does not count, and the hash, past it, is of no use. What of it reached the file
            // is cut off now, not by the next append: on a full disk its blocks are the room the offset's commit needs
            // (the database may share the disk).
            try? file.truncate(to: upload.offset + flushed)
            hashed = nil
        }
        let reached = upload.offset + flushed
        // The bytes are durable before the offset says so; after a dropped connection the task is cancelled, and what
        // arrived is still kept: the save runs to its end whatever becomes of the task.
        let saved = try await uploads.advance(id: upload.id, holder: holder, from: upload.offset, to: reached) {
            try file.synchronizeHere()
        }
        guard saved else { throw ServiceError.notFound(kind: "upload", id: upload.id.rawValue) }
        if let hashed { sessions.keep(hashed, of: upload, at: reached) } else { sessions.forget(upload.id) }
        if let failure { throw failure }
        var advanced = upload
        advanced.offset = reached
        if advanced.isComplete {
            try? file.close()
            _ = try await finish(advanced, tenant: tenant, hasher: intake.hasher)
        }
        return advanced
    }

    /// Appends `body` to the upload's multipart upload in an object store: whole parts are sent as they fill, and what
    /// is left after the last whole part is stored as an object named by the offset it reaches (read back by the next
    /// `PATCH`, on whichever replica). As with a file, the offset moves only once all of it is stored.
    ///
    /// The SHA-256 runs on from the state this process kept; when it has none (another replica took the bytes before,
    /// or it restarted) the complete object is read once instead, parts being unreadable before then.
    private func appendParts(
        _ body: RequestBody, to upload: Upload, holder: String, checksum: Checksum?, tenant: Tenant, store: any MultipartStore,
        multipartID: String
    ) async throws -> Upload {
        let partSize = Int64(store.partSize)
        // Part n holds bytes (n-1)·partSize..<n·partSize: the parts before `sentParts` are whole and counted.
        var sentParts = Int(upload.offset / partSize)
        var buffer = ByteBuffer()
        if upload.offset % partSize != 0 {
            let tailKey = upload.tailKey(at: upload.offset)
            let found = try await Self.storeCall { try await store.read(key: tailKey, range: nil) { buffer.writeImmutableBuffer($0) } }
            guard found, Int64(buffer.readableBytes) == upload.offset % partSize else {
                throw HTTPError(.gone, detail: "the upload's bytes were lost; create it again")
            }
        }
        let before = sessions.hashState(of: upload.id, at: upload.offset)
        var intake = Intake(upload: upload, holder: holder, uploads: uploads, checksum: checksum, hasher: before)
        var failure: (any Error)?
        do {
            for try await chunk in body {
                try await intake.take(chunk)
                buffer.writeBytes(chunk)
                // A part sent before the body's checksum is known is past the offset: it counts only if the offset moves.
                while buffer.readableBytes >= Int(partSize) {
                    try await Self.storeCall {
                        try await store.sendPart(
                            buffer.getSlice(at: buffer.readerIndex, length: Int(partSize))!, number: sentParts + 1, key: upload.stagingPath,
                            uploadID: multipartID)
                    }
                    buffer.moveReaderIndex(forwardBy: Int(partSize))
                    buffer.discardReadBytes()
                    sentParts += 1
                }
            }
            try intake.verify()
        } catch {
            failure = error
        }
        if let failure, checksum != nil || intake.written == 0 {
            if let before { sessions.keep(before, of: upload, at: upload.offset) }
            throw failure
        }
        let reached = upload.offset + intake.written
        // What is left is stored before the offset says so, apart from the task: a dropped connection cancels it.
        let rest = buffer
        let saved = try await Task.detached { [uploads, sentParts] in
            var rest = rest
            var number = sentParts
            // Whole parts a cancelled send left in the buffer, then the last part (complete) or the bytes after the last
            // whole part.
            while rest.readableBytes >= Int(partSize) || (reached == upload.length && rest.readableBytes > 0) {
                let part = rest.readSlice(length: min(rest.readableBytes, Int(partSize)))!
                try await Self.storeCall { try await store.sendPart(part, number: number + 1, key: upload.stagingPath, uploadID: multipartID) }
                number += 1
            }
            if rest.readableBytes > 0 {
                try await Self.storeCall { try await store.putObject(rest, key: upload.tailKey(at: reached)) }
            }
            return try await uploads.advance(id: upload.id, holder: holder, from: upload.offset, to: reached)
        }.value
        guard saved else {
            if reached % partSize != 0 { try? await store.delete(key: upload.tailKey(at: reached)) }
            throw ServiceError.notFound(kind: "upload", id: upload.id.rawValue)
        }
        // The object of the old offset is read by no one now.
        if upload.offset % partSize != 0, intake.written > 0 { try? await store.delete(key: upload.tailKey(at: upload.offset)) }
        if let hasher = intake.hasher { sessions.keep(hasher, of: upload, at: reached) }
        if let failure { throw failure }
        var advanced = upload
        advanced.offset = reached
        if advanced.isComplete { _ = try await finish(advanced, tenant: tenant, hasher: intake.hasher) }
        return advanced
    }

    /// Completes the upload's multipart upload (again after a crash: then it may be complete already) and makes the
    /// object a staged media, its first bytes checked against the type and its SHA-256 read from it when not known.
    private func finishParts(
        _ upload: Upload, tenant: Tenant, hasher: SHA256?, store: any MultipartStore, multipartID: String
    ) async throws
        -> Media
    {
        sessions.forget(upload.id)
        let key = upload.stagingPath
        let partSize = Int64(store.partSize)
        do {
            try await store.completeParts(count: Int((upload.length + partSize - 1) / partSize), key: key, uploadID: multipartID)
        } catch let error as MediaStoreError where error.statusCode == 404 {
            // NoSuchUpload: completed before a crash, if the object is there.
            guard try await Self.storeCall({ try await store.exists(key: key) }) else { throw HTTPError.storeUnavailable(error) }
        } catch let error as MediaStoreError {
            throw HTTPError.storeUnavailable(error)
        }
        var head = ByteBuffer()
        let headRange = 0..<Int(min(Int64(MediaType.signatureLength), upload.length))
        _ = try await Self.storeCall { try await store.read(key: key, range: headRange) { head.writeImmutableBuffer($0) } }
        guard upload.contentType.matches(signature: Array(head.readableBytesView)) else {
            _ = try await uploads.delete(id: upload.id, tenant: tenant)
            try? await store.delete(key: key)
            throw HTTPError(.unsupportedMediaType, detail: "the bytes are not \(upload.contentType.rawValue); the upload is removed")
        }
        var whole = hasher
        if whole == nil {
            var reread = SHA256()
            _ = try await Self.storeCall {
                try await store.read(key: key, range: nil) { chunk in chunk.withUnsafeReadableBytes { reread.update(bufferPointer: $0) } }
            }
            whole = reread
        }
        let medium = Media(
            id: upload.id, contentType: upload.contentType, size: upload.length, sha256: whole!.finalize().hexString,
            description: upload.description, createdAt: .now())
        guard try await uploads.complete(id: upload.id, tenant: tenant, as: medium, stagingPath: key) else {
            throw ServiceError.notFound(kind: "upload", id: upload.id.rawValue)
        }
        return medium
    }

    /// Runs a call to the object store, answering its failures as HTTP: 503 with `Retry-After` (the client resumes).
    private static func storeCall<T>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch let error as MediaStoreError {
            throw HTTPError.storeUnavailable(error)
        }
    }

    /// Makes the complete `upload` a staged media as `POST /v1/media` makes one: its first bytes checked against the
    /// type (415, the upload gone, when they are not it), its SHA-256 and size; returns it.
    private func finish(_ upload: Upload, tenant: Tenant, hasher: SHA256?) async throws -> Media {
        if let parts = staging.multipartStore, let multipartID = upload.multipartID {
            return try await finishParts(upload, tenant: tenant, hasher: hasher, store: parts, multipartID: multipartID)
        }
        let path = try bytesFile(upload.bytesPath)
        let stagingPath = upload.stagingPath
        let finalPath = try bytesFile(stagingPath)
        sessions.forget(upload.id)
        // A crash between the rename and the commit leaves the bytes renamed already.
        let source = access(path, F_OK) == 0 ? path : finalPath
        guard upload.contentType.matches(signature: Self.head(of: source)) else {
            _ = try await uploads.delete(id: upload.id, tenant: tenant)
            unlink(source)
            throw HTTPError(.unsupportedMediaType, detail: "the bytes are not \(upload.contentType.rawValue); the upload is removed")
        }
        var whole = hasher
        if whole == nil { whole = try await Self.hash(source) }
        guard let digest = whole?.finalize() else {
            throw HTTPError(.internalServerError, detail: "the upload's bytes could not be read")
        }
        if source == path, rename(path, finalPath) != 0 {
            throw WritableFile.Failure(operation: "rename \(path)", code: errno)
        }
        let medium = Media(
            id: upload.id, contentType: upload.contentType, size: upload.length, sha256: digest.hexString, description: upload.description,
            createdAt: .now())
        guard try await uploads.complete(id: upload.id, tenant: tenant, as: medium, stagingPath: stagingPath) else {
            throw ServiceError.notFound(kind: "upload", id: upload.id.rawValue)
        }
        return medium
    }

    /// The path of staging file `relativePath` on disk (S3 has no file to append to: 501).
    private func bytesFile(_ relativePath: String) throws -> String {
        guard let folder = staging.directoryOnDisk else { throw HTTPError(.notImplemented, detail: "resumable uploads need a file store") }
        return folder + "/" + relativePath
    }

    /// Runs a file operation, answering a full disk as 507 and a file shorter than its offset as 410.
    private static func io<T>(_ body: () throws(WritableFile.Failure) -> T) throws -> T {
        do {
            return try body()
        } catch {
            switch error.code {
            case ENOSPC, EDQUOT, EFBIG: throw HTTPError.insufficientStorage("the staging disk is full")
            case ENODATA: throw HTTPError(.gone, detail: "the upload's bytes were lost; create it again")
            default: throw error
            }
        }
    }

    /// The SHA-256 state after every byte of the file at `path`, read in chunks off the cooperative pool; nil when it
    /// cannot be read.
    private static func hash(_ path: String) async throws -> SHA256? {
        guard let file = try? ReadableFile(path: path) else { return nil }
        var hasher = SHA256()
        let chunks = FileChunks(file: file, chunkSize: 1 << 20, progress: { _ in }, failure: { $0 })
        for try await chunk in chunks { chunk.withUnsafeReadableBytes { hasher.update(bufferPointer: $0) } }
        return hasher
    }

    /// The file's first bytes, as many as a type's signature needs.
    private static func head(of path: String) -> [UInt8] {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return [] }
        defer { close(descriptor) }
        var bytes = [UInt8](repeating: 0, count: MediaType.signatureLength)
        let count = bytes.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, $0.count, 0) }
        return Array(bytes.prefix(max(count, 0)))
    }
}

/// What one `PATCH` body has brought so far, whatever holds the bytes: each chunk counted against what is left of the
/// upload, hashed (the whole media, and the body for its checksum), and the hold renewed while the body comes.
private struct Intake {
    let upload: Upload
    let holder: String
    let uploads: any UploadRepository
    let checksum: UploadService.Checksum?
    /// The whole media's SHA-256 so far; nil when it is unknown (read again once complete).
    private(set) var hasher: SHA256?
    private var bodyHasher: BodyHasher?
    private(set) var written: Int64 = 0
    private var renewed = ContinuousClock.now

    init(upload: Upload, holder: String, uploads: any UploadRepository, checksum: UploadService.Checksum?, hasher: SHA256?) {
        self.upload = upload
        self.holder = holder
        self.uploads = uploads
        self.checksum = checksum
        self.hasher = hasher
        self.bodyHasher = checksum.map { BodyHasher($0.algorithm) }
    }

    /// Takes `chunk`: 413 past `Upload-Length`, 409 when this `PATCH` lost its hold.
    mutating func take(_ chunk: [UInt8]) async throws {
        guard written + Int64(chunk.count) <= upload.length - upload.offset else {
            throw HTTPError(.contentTooLarge, detail: "the body runs past Upload-Length (\(upload.length) bytes)")
        }
        // Bytes are stored only while the hold is this PATCH's: a slow body renews it before it could lapse.
        if renewed.duration(to: .now) > UploadService.renewAfter {
            let until = Timestamp.now().adding(milliseconds: UploadService.holdTime)
            guard try await uploads.renew(id: upload.id, holder: holder, until: until) else {
                throw HTTPError(.conflict, detail: "this PATCH lost its hold on the upload; send HEAD and resume")
            }
            renewed = .now
        }
        hasher?.update(data: chunk)
        bodyHasher?.update(chunk)
        written += Int64(chunk.count)
    }

    /// 460 when the body is not the `Upload-Checksum` sent.
    func verify() throws {
        guard let checksum, let digest = bodyHasher?.finalize(), digest != checksum.digest else { return }
        throw HTTPError(
            HTTPResponse.Status(code: 460, reasonPhrase: "Checksum Mismatch"),
            detail: "the body's \(checksum.algorithm.rawValue) is not the Upload-Checksum sent; nothing was appended")
    }
}

/// The checksum of one `PATCH` body, in the algorithm the client chose.
private enum BodyHasher {
    case sha1(Insecure.SHA1)
    case sha256(SHA256)

    init(_ algorithm: TusHeaders.ChecksumAlgorithm) {
        self = algorithm == .sha1 ? .sha1(Insecure.SHA1()) : .sha256(SHA256())
    }

    mutating func update(_ bytes: [UInt8]) {
        switch self {
        case .sha1(var hasher):
            hasher.update(data: bytes)
            self = .sha1(hasher)
        case .sha256(var hasher):
            hasher.update(data: bytes)
            self = .sha256(hasher)
        }
    }

    func finalize() -> [UInt8] {
        switch self {
        case .sha1(let hasher): Array(hasher.finalize())
        case .sha256(let hasher): Array(hasher.finalize())
        }
    }
}

/// The SHA-256 state of each upload this process took bytes for, at the offset it reached, so that the next `PATCH`
/// hashes on without re-reading the file. A `PATCH` asks for the state at the upload's offset: another replica's
/// `PATCH` in between leaves a state at an older offset, which is not used. The state of an upload past its
/// `Upload-Expires` (expired by any replica's sweep, or left by a client that never came back) is dropped by the next
/// ``keep(_:of:at:)``.
final class UploadSessions: Sendable {
    private struct Session {
        var hasher: SHA256
        var offset: Int64
        var expiresAt: Timestamp
    }

    private struct State {
        var sessions: [MediaID: Session] = [:]
        /// No session expires before it: a `keep` looks through them only once it has passed.
        var earliestExpiry: Timestamp?
    }

    private let state = Mutex(State())

    /// How many uploads' states are kept.
    var count: Int { state.withLock { $0.sessions.count } }

    /// The state after the upload's first `offset` bytes, if this process has it.
    func hashState(of id: MediaID, at offset: Int64) -> SHA256? {
        state.withLock { state in state.sessions[id].flatMap { $0.offset == offset ? $0.hasher : nil } }
    }

    /// Keeps `hasher` as the upload's state after its first `offset` bytes, and drops the expired uploads' states.
    func keep(_ hasher: SHA256, of upload: Upload, at offset: Int64, now: Timestamp = .now()) {
        state.withLock { state in
            if let earliest = state.earliestExpiry, earliest <= now {
                state.sessions = state.sessions.filter { $0.value.expiresAt > now }
                state.earliestExpiry = state.sessions.values.map(\.expiresAt).min()
            }
            state.sessions[upload.id] = Session(hasher: hasher, offset: offset, expiresAt: upload.expiresAt)
            state.earliestExpiry = min(state.earliestExpiry ?? upload.expiresAt, upload.expiresAt)
        }
    }

    /// Drops the upload's state (deleted, or became media).
    func forget(_ id: MediaID) {
        state.withLock { _ = $0.sessions.removeValue(forKey: id) }
    }
}

extension HTTPResponse.Status {
    /// 423 (RFC 4918): the upload is busy with another `PATCH`.
    static let locked = HTTPResponse.Status(code: 423, reasonPhrase: "Locked")
}
