public import NIOCore

/// A media store that assembles one object from parts sent over many requests, by whichever replica (S3's multipart
/// upload): where a resumable upload's bytes go when the store is an object store.
///
/// A part's number fixes the bytes it holds (part `n` is bytes `(n-1)·partSize..<n·partSize`), so a part sent again, by
/// any replica, holds the same bytes: sending one is idempotent. The offset of what counts is kept elsewhere (the
/// database), which is what fences a replica that lost its hold.
public protocol MultipartStore: MediaStore {
    /// The size of every part but the last (S3 refuses parts under 5 MiB but the last).
    var partSize: Int { get }
    /// Begins the object under `key`, to be made of parts; the multipart upload's id.
    func beginParts(key: String, contentType: String) async throws -> String
    /// Sends part `number` (from 1) of the multipart upload `uploadID`; it replaces a part sent before with that number.
    func sendPart(_ bytes: ByteBuffer, number: Int, key: String, uploadID: String) async throws
    /// Makes the object of parts `1...count`, visible from then on; fails when one of them is missing.
    func completeParts(count: Int, key: String, uploadID: String) async throws
    /// Drops the multipart upload and its parts; one already gone is fine. Done even when the caller is cancelled.
    func abortParts(key: String, uploadID: String) async
    /// Stores `bytes` as the object `key` (a small one: the bytes of an upload after its last whole part).
    func putObject(_ bytes: ByteBuffer, key: String) async throws
    /// Passes the bytes of object `key` in `range` (all of it when nil) to `body` as they arrive; false when there is no
    /// such object.
    func read(key: String, range: Range<Int>?, _ body: (ByteBuffer) async throws -> Void) async throws -> Bool
}
