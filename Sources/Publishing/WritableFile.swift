import NIOPosix
import Platform

/// A new file written by one task through plain descriptors, so no cancelled-task rule can leave it open: short writes
/// in the caller's task (they reach the page cache), the `fsync` on NIO's blocking-I/O pool.
///
/// `@unchecked Sendable`: used by one task at a time (the fsync hands its descriptor to a pool thread and waits).
public final class WritableFile: @unchecked Sendable {
    /// A system call that failed, and its `errno`.
    public struct Failure: Error, Equatable {
        public var operation: String
        public var code: Int32

        public init(operation: String, code: Int32) {
            self.operation = operation
            self.code = code
        }
    }

    public let path: String
    private var descriptor: Int32

    /// Creates (or truncates) the file at `path` with `mode`.
    public init(creating path: String, mode: mode_t = 0o600) throws(Failure) {
        self.path = path
        descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode)
        guard descriptor >= 0 else { throw Failure(operation: "open \(path)", code: errno) }
    }

    /// Opens (or creates) the file at `path` to write after its first `length` bytes, cutting off any past them (bytes
    /// written once but never counted durable). Throws `ENODATA` when the file holds fewer than `length` bytes.
    public init(appendingTo path: String, after length: Int64, mode: mode_t = 0o600) throws(Failure) {
        self.path = path
        descriptor = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, mode)
        guard descriptor >= 0 else { throw Failure(operation: "open \(path)", code: errno) }
        let size = lseek(descriptor, 0, SEEK_END)
        guard size >= 0 else { throw Failure(operation: "lseek \(path)", code: errno) }
        guard size >= length else { throw Failure(operation: "read \(path): \(size) of \(length) bytes", code: ENODATA) }
        try truncate(to: length)
    }

    /// Cuts the file to its first `length` bytes and writes on from there.
    public func truncate(to length: Int64) throws(Failure) {
        guard ftruncate(descriptor, off_t(length)) == 0 else { throw Failure(operation: "ftruncate \(path)", code: errno) }
        guard lseek(descriptor, off_t(length), SEEK_SET) >= 0 else { throw Failure(operation: "lseek \(path)", code: errno) }
    }

    deinit { if descriptor >= 0 { systemClose(descriptor) } }

    public func write(_ bytes: [UInt8]) throws(Failure) {
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeBytes { systemWrite(descriptor, $0.baseAddress! + offset, $0.count - offset) }
            if written < 0 {
                if errno == EINTR { continue }
                throw Failure(operation: "write \(path)", code: errno)
            }
            offset += written
        }
    }

    /// Starts writing `range` of the file to disk without waiting for it, so that a later ``synchronize()`` finds little
    /// left to write: the disk works while more bytes arrive. `posix_fadvise(DONTNEED)` starts the writeback of dirty
    /// pages (and drops them from the cache once clean), as PostgreSQL's `pg_flush_data` does where `sync_file_range` is
    /// missing (Swift's Glibc does not declare it). Advisory: a failure changes nothing.
    public func startWriteback(_ range: Range<Int64>) {
        _ = posix_fadvise(descriptor, off_t(range.lowerBound), off_t(range.count), POSIX_FADV_DONTNEED)
    }

    /// `fsync` on NIO's blocking-I/O pool: it can take milliseconds, too long for the cooperative pool.
    public func synchronize() async throws {
        try await NIOThreadPool.singleton.runIfActive { () throws -> Void in try self.synchronizeHere() }
    }

    /// `fsync` in the calling thread, which must not be one of the cooperative pool's.
    public func synchronizeHere() throws(Failure) {
        guard fsync(descriptor) == 0 else { throw Failure(operation: "fsync \(path)", code: errno) }
    }

    public func close() throws(Failure) {
        guard descriptor >= 0 else { return }
        let result = systemClose(descriptor)
        descriptor = -1
        guard result == 0 else { throw Failure(operation: "close \(path)", code: errno) }
    }

    /// Writes `chunks` in batches of `batchSize` bytes (short page-cache writes; the `fsync` once, on NIO's pool),
    /// closes the file and renames it to `finalPath`, so that readers see all of its bytes or none; returns how many.
    ///
    /// On any error, and on cancellation before the rename, the file is removed: a system call's error comes out as a
    /// ``Failure``, one of `chunks` (a body refused part way) as it came.
    public func fill<Chunks: AsyncSequence>(with chunks: Chunks, batchSize: Int, renamingTo finalPath: String) async throws -> Int
    where Chunks.Element == [UInt8] {
        do {
            var size = 0
            var batch: [UInt8] = []
            batch.reserveCapacity(batchSize)
            for try await chunk in chunks {
                size += chunk.count
                batch.append(contentsOf: chunk)
                if batch.count >= batchSize {
                    try write(batch)
                    batch.removeAll(keepingCapacity: true)
                }
            }
            try write(batch)
            try await synchronize()
            try close()
            try Task.checkCancellation()
            guard rename(path, finalPath) == 0 else { throw Failure(operation: "rename \(path)", code: errno) }
            return size
        } catch {
            discard()
            throw error
        }
    }

    /// Closes the file if still open and removes it: what a failed write leaves is nothing.
    public func discard() {
        try? close()
        unlink(path)
    }
}
