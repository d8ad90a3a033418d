/// Bytes in memory of their own, from `malloc`, freed with the object: a buffer its writer hands to its reader (a JSON
/// body to libmicrohttpd) without a copy.
///
/// `@unchecked Sendable`: read-only once made, and its memory is freed once, in `deinit`.
public final class OwnedBytes: @unchecked Sendable {
    /// The first byte.
    public let start: UnsafePointer<UInt8>
    public let count: Int

    /// Takes `count` bytes at `start`, memory from `malloc` that nothing else frees.
    public init(taking start: UnsafeMutablePointer<UInt8>, count: Int) {
        self.start = UnsafePointer(start)
        self.count = count
    }

    deinit { free(UnsafeMutablePointer(mutating: start)) }

    /// The bytes, valid while this object lives.
    public var buffer: UnsafeBufferPointer<UInt8> { UnsafeBufferPointer(start: start, count: count) }
}
