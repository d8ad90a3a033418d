import FileReading
import HeraldCore
import Platform

/// A local file opened for upload: its bytes, and what its first bytes say it is.
struct UploadFile: Sendable {
    let file: ReadableFile
    /// The type its signature shows; nil when not a type Herald accepts.
    let mediaType: MediaType?

    var path: String { file.path }
    var size: Int { Int(file.size) }

    init(path: String) throws(ClientError) {
        do {
            file = try ReadableFile(path: path)
        } catch {
            throw .file(path: path, reason: error.reason)
        }
        var signature = [UInt8](repeating: 0, count: MediaType.signatureLength)
        let count = signature.withUnsafeMutableBytes { [descriptor = file.descriptor] in pread(descriptor, $0.baseAddress, $0.count, 0) }
        let prefix = signature.prefix(max(count, 0))
        mediaType = MediaType.allCases.first { $0.matches(signature: prefix) }
    }

    /// The bytes (those in `range`, all when nil) as a request body, 64 KiB at a time; `progress` hears the bytes sent.
    func body(range: Range<Int64>? = nil, progress: @escaping @Sendable (Int) -> Void) -> FileChunks {
        FileChunks(file: file, range: range, chunkSize: 64 * 1024, progress: progress) { [path] error in
            ClientError.file(path: path, reason: error.reason)
        }
    }
}
