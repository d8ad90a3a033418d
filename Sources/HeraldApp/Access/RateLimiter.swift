import Platform
import Synchronization

/// Token buckets by key: `rate` tokens a second, at most `burst` saved up, over every replica: each replica's buckets
/// hold its share, 1/N of both for N replicas alive (``share(among:)``). Touched from HTTP threads, so behind a lock.
final class RateLimiter<Key: Hashable & Sendable>: Sendable {
    /// What taking a token found.
    enum Decision: Equatable {
        /// Allowed; `remaining` whole tokens are left.
        case allowed(remaining: Int)
        /// Refused: a token is back after `retryAfter` seconds (rounded up, at least 1).
        case limited(retryAfter: Int)
    }

    private struct Bucket {
        var tokens: Double
        var updated: MonotonicInstant
    }

    /// Tokens added a second, over every replica.
    let rate: Double
    /// The most tokens a bucket holds (and holds when new), over every replica.
    let burst: Double
    /// The replicas alive, which share the limit: this one takes 1/N of it.
    private let replicas = Atomic(1)
    /// Buckets kept at most; past it, the full ones (idle keys) are dropped, as they hold nothing a new one would not.
    private let capacity: Int
    private let buckets = Mutex<[Key: Bucket]>([:])
    /// Whether any bucket exists: with none (no address has ever failed to authenticate), ``check(_:now:)`` takes no
    /// lock and hashes nothing.
    private let inUse = Atomic(false)

    init(rate: Double, burst: Double, capacity: Int = 100_000) {
        self.rate = rate
        self.burst = burst
        self.capacity = capacity
    }

    /// This replica's part of the limit is 1/`count` of it (`count` replicas alive, this one among them).
    func share(among count: Int) {
        replicas.store(max(1, count), ordering: .relaxed)
    }

    /// Tokens added a second here.
    private var localRate: Double { rate / Double(replicas.load(ordering: .relaxed)) }
    /// The most tokens a bucket holds here: at least one, so that a small limit still answers.
    private var localBurst: Double { max(1, burst / Double(replicas.load(ordering: .relaxed))) }

    /// Takes one token for `key`, if there is one.
    func take(_ key: Key, now: MonotonicInstant = .now) -> Decision {
        update(key, now: now) { bucket in
            guard bucket.tokens >= 1 else { return .limited(retryAfter: retryAfter(bucket.tokens)) }
            bucket.tokens -= 1
            return .allowed(remaining: Int(bucket.tokens))
        }
    }

    /// Whether `key` has a token, without taking it or making a bucket: one lookup, for every request of an address.
    func check(_ key: Key, now: MonotonicInstant = .now) -> Decision {
        guard inUse.load(ordering: .relaxed), let bucket = buckets.withLock({ $0[key] }) else { return .allowed(remaining: Int(localBurst)) }
        let tokens = refilled(bucket, now: now)
        return tokens >= 1 ? .allowed(remaining: Int(tokens)) : .limited(retryAfter: retryAfter(tokens))
    }

    private func retryAfter(_ tokens: Double) -> Int {
        max(1, Int(((1 - tokens) / localRate).rounded(.up)))
    }

    private func update(_ key: Key, now: MonotonicInstant, _ body: (inout Bucket) -> Decision) -> Decision {
        inUse.store(true, ordering: .relaxed)
        return buckets.withLock { buckets in
            if buckets.count >= capacity, buckets[key] == nil { prune(&buckets, now: now) }
            func take(_ bucket: inout Bucket) -> Decision {
                if bucket.updated < now {
                    bucket.tokens = refilled(bucket, now: now)
                    bucket.updated = now
                }
                return body(&bucket)
            }
            // Changed where it is, through its index: `buckets[key, default:]` hashed once too, but ran the
            // subscript's coroutine, whose frame was allocated at every request.
            if let index = buckets.index(forKey: key) { return take(&buckets.values[index]) }
            var bucket = Bucket(tokens: localBurst, updated: now)
            let decision = take(&bucket)
            buckets[key] = bucket
            return decision
        }
    }

    /// The bucket's tokens at `now`: what it held, plus what the rate added since, at most `burst`.
    private func refilled(_ bucket: Bucket, now: MonotonicInstant) -> Double {
        let elapsed = bucket.updated.nanoseconds(to: now)
        guard elapsed > 0 else { return bucket.tokens }
        return min(localBurst, bucket.tokens + Double(elapsed) * 1e-9 * localRate)
    }

    /// Drops the buckets that have refilled; if every one is still in use, all of them (a flood of new keys).
    private func prune(_ buckets: inout [Key: Bucket], now: MonotonicInstant) {
        let full = Int(localBurst / localRate * 1e9)
        buckets = buckets.filter { $0.value.updated.nanoseconds(to: now) < full }
        if buckets.count >= capacity { buckets.removeAll() }
    }
}
