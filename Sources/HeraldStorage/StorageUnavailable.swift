/// The database cannot be reached now (down, restarting, cut off, or not answering in time): the caller may try again
/// later. A write that fails so may still have committed; the API's idempotency keys make its retry safe.
public struct StorageUnavailable: Error, Sendable, CustomStringConvertible {
    /// What was seen, in a line (never a password).
    public let reason: String

    public init(reason: String) {
        self.reason = reason
    }

    public var description: String { "the database is unavailable: \(reason)" }
}
