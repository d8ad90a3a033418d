import NIOCore
import NIOPosix
import Platform

// `struct stat` is declared both by the C library and by NIO's C module (which includes <sys/stat.h>); which one a
// compile sees as its owner depends on how the module's files are batched, and MemberImportVisibility then wants that
// one imported to read `st_mode`: both are.
#if canImport(CNIOLinux)
    import CNIOLinux
#endif

/// An open file, closed when the last reference goes: the request body may outlive the call that opened it.
final class ReadOnlyFile: Sendable {
    let descriptor: Int32
    /// The size when opened.
    let size: Int64

    /// Opens `path` for reading; a missing file is ``MediaStoreError/stagedFileMissing(_:file:line:)``.
    init(path: String) throws(MediaStoreError) {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            let code = errno
            if code == ENOENT { throw .stagedFileMissing(path) }
            throw .transient("Cannot open '\(path)': \(String(cString: strerror(code))) (errno \(code))")
        }
        var status = stat()
        guard fstat(descriptor, &status) == 0, (status.st_mode & S_IFMT) == S_IFREG else {
            close(descriptor)
            throw .permanent("The staged file '\(path)' is not a regular file.")
        }
        self.descriptor = descriptor
        self.size = Int64(status.st_size)
    }

    deinit {
        close(descriptor)
    }
}

/// The bytes of a file as a request body: chunks read with `pread` on NIO's blocking-I/O thread pool.
///
/// Never holds more than one chunk, whatever the file's size: the HTTP client asks for the next chunk
/// only once it has written the last one, which is when `progress` hears of that chunk's bytes.
/// Cancellation is checked before every read. The file must keep the length it had when opened; if it is
/// cut short, the body fails with a size mismatch.
struct FileChunks: AsyncSequence, Sendable {
    typealias Element = ByteBuffer

    let file: ReadOnlyFile
    let key: String
    let chunkSize: Int
    let progress: BytesTaken

    func makeAsyncIterator() -> Iterator {
        Iterator(file: file, key: key, chunkSize: chunkSize, progress: progress)
    }

    struct Iterator: AsyncIteratorProtocol {
        let file: ReadOnlyFile
        let key: String
        let chunkSize: Int
        let progress: BytesTaken
        var offset: Int64 = 0

        mutating func next() async throws -> ByteBuffer? {
            // Asked for the next chunk: the client has written every byte before `offset`.
            if offset > 0 { progress(Int(offset)) }
            guard offset < file.size else { return nil }
            try Task.checkCancellation()
            let (file, key, offset, length) = (self.file, self.key, self.offset, Int(Swift.min(Int64(chunkSize), file.size - self.offset)))
            let chunk = try await NIOThreadPool.singleton.runIfActive { () throws(MediaStoreError) -> ByteBuffer in
                var buffer = ByteBufferAllocator().buffer(capacity: length)
                var errorNumber: Int32 = 0
                let count = buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: length) { pointer in
                    let count = pread(file.descriptor, pointer.baseAddress, length, off_t(offset))
                    if count < 0 { errorNumber = errno }
                    return Swift.max(count, 0)
                }
                if errorNumber != 0 {
                    throw .transient("Cannot read the staged file of '\(key)': \(String(cString: strerror(errorNumber)))")
                }
                if count == 0 {
                    throw .sizeMismatch(key: key, expected: Int(file.size), actual: Int(offset))
                }
                return buffer
            }
            self.offset += Int64(chunk.readableBytes)
            return chunk
        }
    }
}
