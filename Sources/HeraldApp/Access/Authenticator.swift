import Crypto
import HeraldCore
import HeraldStorage
import Logging
import Platform
import ServiceLifecycle
import Synchronization

/// Checks API keys on HTTP threads, cheaply: a small cache of the keys seen, by a keyed hash of their text.
///
/// A key is read from the database when the cache has not checked it within the last second, so a revocation made
/// anywhere (another process, `herald keys revoke`) takes effect within a second; one made through this process
/// takes effect at once (``forget(_:)``). As a `Service` it writes the keys' `last_used_at`, at most a minute late.
final class Authenticator: Service, Sendable {
    /// What a key's text authenticates.
    enum Outcome {
        /// The key's caller, made once per key (the cache hands out the same object).
        case valid(Caller)
        /// Unknown or revoked: both answer the same, so a caller cannot tell a revoked key from a wrong one.
        case invalid
        /// The database did not answer: the key could not be checked (503, not a failed authentication).
        case unavailable
    }

    /// A key's text as the cache knows it: two 64-bit SipHash values under keys drawn at start (a keyed function, so
    /// nobody outside the process can aim at one), never the text itself, and computed in a few hundred instructions
    /// where the SHA-256 costs thousands: the digest is computed only when the cache has no fresh answer.
    ///
    /// Two different keys share a slot with probability 2^-128; both halves are compared, without an early exit.
    private struct CacheKey: Hashable {
        let first: UInt64
        let second: UInt64

        private static let functions = (SipHash13.random(), SipHash13.random())

        init(_ secret: UnsafeBufferPointer<UInt8>) {
            let functions = Self.functions
            first = functions.0.hash(UnsafeRawBufferPointer(secret))
            second = functions.1.hash(UnsafeRawBufferPointer(secret))
        }

        func hash(into hasher: inout Hasher) { hasher.combine(first) }

        static func == (lhs: CacheKey, rhs: CacheKey) -> Bool { (lhs.first ^ rhs.first) | (lhs.second ^ rhs.second) == 0 }
    }

    /// Small on purpose (a reference and two instants): it is copied out under the lock on every request.
    private struct Entry {
        /// The key's caller, for requests it authenticates; nil for an unknown or revoked key (remembered too, so a
        /// wrong key repeated costs no query each time).
        var caller: Caller?
        var checked: MonotonicInstant
        /// When the last use was queued for writing to `last_used_at`.
        var recordedUse: MonotonicInstant?
    }

    /// How long a cached answer stands: the revocation promise is "within 1 second".
    static let freshness: Duration = .seconds(1)
    /// How often `last_used_at` is written, and so how far behind it may be.
    static let useInterval: Duration = .seconds(60)
    // Both as the cache compares them, every request.
    private static let freshnessNanoseconds = freshness.wholeNanoseconds
    private static let useIntervalNanoseconds = useInterval.wholeNanoseconds
    /// Entries kept at most (a flood of wrong keys must not grow memory without bound).
    static let capacity = 10_000

    private let keys: any KeyRepository
    private let logger: Logger
    private let cache = Mutex<[CacheKey: Entry]>([:])
    private let uses = Mutex<[KeyID: Timestamp]>([:])

    init(keys: any KeyRepository, logger: Logger) {
        self.keys = keys
        self.logger = logger
    }

    /// The stored form of a key's text: lowercase hex SHA-256.
    static func hash(_ secret: String) -> String {
        var text = secret
        return text.withUTF8 { hash($0) }
    }

    /// The stored form of a key's UTF-8 bytes.
    private static func hash(_ secret: UnsafeBufferPointer<UInt8>) -> String {
        var hasher = SHA256()
        hasher.update(bufferPointer: UnsafeRawBufferPointer(secret))
        return hasher.finalize().hexString
    }

    /// Checks the UTF-8 bytes of a key, in place: the path every request takes (no string is made of the key).
    ///
    /// Nothing here compares the secret itself: the cache compares keyed hashes of it (both halves, no early exit),
    /// the database its SHA-256, so timing can reveal at most something of a hash, which says nothing of the key.
    func authenticate(_ secret: UnsafeBufferPointer<UInt8>, now: MonotonicInstant = .now) -> Outcome {
        let slot = CacheKey(secret)
        let cached = cache.withLock { cache -> Outcome? in
            guard let entry = cache[slot], entry.checked.nanoseconds(to: now) < Self.freshnessNanoseconds else { return nil }
            if let id = entry.caller?.keyID, entry.recordedUse.map({ $0.nanoseconds(to: now) >= Self.useIntervalNanoseconds }) ?? true {
                cache[slot]?.recordedUse = now
                uses.withLock { $0[id] = .now() }
            }
            return Self.outcome(entry)
        }
        if let cached { return cached }
        // Not known, or known more than a second ago: the stored form is looked up (a revocation shows here).
        guard KeySecret.isWellFormed(secret) else { return .invalid }
        let key: APIKey?
        do {
            key = try keys.find(hash: Self.hash(secret))
        } catch {
            logger.error("cannot read API keys", metadata: ["error": "\(error)"])
            return .unavailable
        }
        let caller = key.flatMap { $0.revokedAt == nil ? Caller(tenant: $0.tenant, scope: $0.scope, keyID: $0.id) : nil }
        let entry = Entry(caller: caller, checked: now, recordedUse: caller == nil ? nil : now)
        cache.withLock { cache in
            if cache.count >= Self.capacity { cache.removeAll() }
            cache[slot] = entry
        }
        if let id = caller?.keyID { uses.withLock { $0[id] = .now() } }
        return Self.outcome(entry)
    }

    /// Drops a key from the cache at once (revoked through this process).
    func forget(_ id: KeyID) {
        cache.withLock { cache in cache = cache.filter { $0.value.caller?.keyID != id } }
    }

    private static func outcome(_ entry: Entry) -> Outcome {
        entry.caller.map { .valid($0) } ?? .invalid
    }

    // MARK: last_used_at

    /// Writes the uses gathered since the last write, every ``useInterval`` and once more on shutdown.
    func run() async throws {
        while !Task.isShuttingDownGracefully, !Task.isCancelled {
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: Self.useInterval) }
            await flush()
        }
    }

    /// Writes the pending uses now.
    func flush() async {
        let pending = uses.withLock { uses in
            defer { uses = [:] }
            return uses
        }
        do {
            try await keys.recordUse(pending)
        } catch {
            logger.warning("cannot record API key use", metadata: ["error": "\(error)", "keys": "\(pending.count)"])
        }
    }
}
