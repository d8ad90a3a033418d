import NIOCore
import NIOPosix
import Platform

// `struct stat` is declared both by the C library and by NIO's C module (which includes <sys/stat.h>); which one a
// compile sees as its owner depends on how the module's files are batched, and MemberImportVisibility then wants that
// one imported to read `st_mode`: both are.
#if canImport(CNIOLinux)
    import CNIOLinux
#endif

/// Why a file could not be opened or read.
public enum FileReadError: Error, Sendable, Equatable {
    /// `open` or `fstat` failed with this `errno`.
    case cannotOpen(errno: Int32)
    /// The path names a directory, a device or anything else that is not a regular file.
    case notARegularFile
    /// `pread` failed with this `errno`.
    case cannotRead(errno: Int32)
    /// The file ended at this offset, short of the size it had when opened.
    case shortened(at: Int64)

    /// The failure in a few words, for a message.
    public var reason: String {
        switch self {
        case .cannotOpen(let code), .cannotRead(let code): "\(String(cString: strerror(code))) (errno \(code))"
        case .notARegularFile: "not a regular file"
        case .shortened(let offset): "shorter than when it was opened (ends at byte \(offset))"
        }
    }
}

/// An open regular file, closed when the last reference goes: a request body may outlive the call that opened it.
public final class ReadableFile: Sendable {
    public let path: String
    public let descriptor: Int32
    /// The size when opened.
    public let size: Int64

    /// Opens `path` for reading.
    public init(path: String) throws(FileReadError) {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw .cannotOpen(errno: errno) }
        var status = stat()
        guard fstat(descriptor, &status) == 0 else {
            let code = errno
            close(descriptor)
            throw .cannotOpen(errno: code)
        }
        guard (status.st_mode & S_IFMT) == S_IFREG else {
            close(descriptor)
            throw .notARegularFile
        }
        self.path = path
        self.descriptor = descriptor
        self.size = Int64(status.st_size)
    }

    deinit {
        close(descriptor)
    }
}

/// The bytes of a file as a request body: chunks read with `pread` on NIO's blocking-I/O thread pool.
///
/// Never holds more than one chunk, whatever the file's size: the HTTP client asks for the next chunk only once it has
/// written the last one, which is when `progress` hears of the bytes written so far. Cancellation is checked before
/// every read. The file must keep the length it had when opened; a failed read becomes the error `failure` makes of it,
/// so that each caller reports it in its own terms.
public struct FileChunks: AsyncSequence, Sendable {
    public typealias Element = ByteBuffer

    let file: ReadableFile
    let range: Range<Int64>
    let chunkSize: Int
    let progress: @Sendable (Int) -> Void
    let failure: @Sendable (FileReadError) -> any Error

    /// Chunks of `chunkSize` bytes of `file` (of its bytes in `range`, all of them when nil); `progress` hears the bytes
    /// the client has written (of the range) before each read.
    public init(
        file: ReadableFile, range: Range<Int64>? = nil, chunkSize: Int, progress: @escaping @Sendable (Int) -> Void,
        failure: @escaping @Sendable (FileReadError) -> any Error
    ) {
        self.file = file
        self.range = range.map { $0.clamped(to: 0..<file.size) } ?? 0..<file.size
        self.chunkSize = Swift.max(chunkSize, 1)
        self.progress = progress
        self.failure = failure
    }

    public func makeAsyncIterator() -> Iterator { Iterator(chunks: self, offset: range.lowerBound) }

    public struct Iterator: AsyncIteratorProtocol {
        let chunks: FileChunks
        var offset: Int64

        public mutating func next() async throws -> ByteBuffer? {
            // Asked for the next chunk: the client has written every byte of the range before `offset`.
            if offset > chunks.range.lowerBound { chunks.progress(Int(offset - chunks.range.lowerBound)) }
            let file = chunks.file
            guard offset < chunks.range.upperBound else { return nil }
            try Task.checkCancellation()
            let (offset, length) = (self.offset, Int(Swift.min(Int64(chunks.chunkSize), chunks.range.upperBound - self.offset)))
            let chunk: ByteBuffer
            do {
                chunk = try await NIOThreadPool.singleton.runIfActive { () throws(FileReadError) -> ByteBuffer in
                    var buffer = ByteBufferAllocator().buffer(capacity: length)
                    var errorNumber: Int32 = 0
                    let count = buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: length) { pointer in
                        let count = pread(file.descriptor, pointer.baseAddress, length, off_t(offset))
                        if count < 0 { errorNumber = errno }
                        return Swift.max(count, 0)
                    }
                    if errorNumber != 0 { throw .cannotRead(errno: errorNumber) }
                    if count == 0 { throw .shortened(at: offset) }
                    return buffer
                }
            } catch let error as FileReadError {
                throw chunks.failure(error)
            }
            self.offset += Int64(chunk.readableBytes)
            return chunk
        }
    }
}
