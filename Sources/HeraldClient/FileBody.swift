import HeraldCore
import NIOCore
import NIOPosix
import Platform

// Both owners of `struct stat` imported: see Publishing/S3/FileChunks.swift.
#if canImport(CNIOLinux)
    import CNIOLinux
#endif

/// A local file opened for upload, closed when the last reference goes (the request body may outlive the call).
final class UploadFile: Sendable {
    let path: String
    let descriptor: Int32
    let size: Int
    /// What its first bytes say it is; nil when not a type Herald accepts.
    let mediaType: MediaType?

    init(path: String) throws(ClientError) {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw .file(path: path, reason: String(cString: strerror(errno))) }
        var status = stat()
        guard fstat(descriptor, &status) == 0, (status.st_mode & S_IFMT) == S_IFREG else {
            close(descriptor)
            throw .file(path: path, reason: "not a regular file")
        }
        var signature = [UInt8](repeating: 0, count: MediaType.signatureLength)
        let count = signature.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, $0.count, 0) }
        let prefix = signature.prefix(max(count, 0))
        self.path = path
        self.descriptor = descriptor
        self.size = Int(status.st_size)
        self.mediaType = MediaType.allCases.first { $0.matches(signature: prefix) }
    }

    deinit {
        close(descriptor)
    }
}

/// A file's bytes as a request body, one chunk at a time, read on NIO's blocking-I/O pool.
///
/// The HTTP client asks for the next chunk once it has written the last, which is when `progress` hears of its
/// bytes. Cancellation is checked before every read.
struct FileBody: AsyncSequence, Sendable {
    typealias Element = ByteBuffer

    let file: UploadFile
    let chunkSize: Int
    let progress: @Sendable (Int) -> Void

    func makeAsyncIterator() -> Iterator { Iterator(body: self) }

    struct Iterator: AsyncIteratorProtocol {
        let body: FileBody
        var offset = 0

        mutating func next() async throws -> ByteBuffer? {
            if offset > 0 { body.progress(offset) }
            guard offset < body.file.size else { return nil }
            try Task.checkCancellation()
            let (file, offset, length) = (body.file, self.offset, Swift.min(body.chunkSize, body.file.size - self.offset))
            let chunk = try await NIOThreadPool.singleton.runIfActive { () throws(ClientError) -> ByteBuffer in
                var buffer = ByteBufferAllocator().buffer(capacity: length)
                var failure: Int32 = 0
                let count = buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: length) { pointer in
                    let count = pread(file.descriptor, pointer.baseAddress, length, off_t(offset))
                    if count < 0 { failure = errno }
                    return Swift.max(count, 0)
                }
                if failure != 0 { throw .file(path: file.path, reason: String(cString: strerror(failure))) }
                if count == 0 { throw .file(path: file.path, reason: "shorter than when it was opened") }
                return buffer
            }
            self.offset += chunk.readableBytes
            return chunk
        }
    }
}
