import Synchronization

/// Token buckets by key: `rate` tokens a second, at most `burst` saved up. Touched from HTTP threads, so behind a lock.
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
        var updated: ContinuousClock.Instant
    }

    /// Tokens added a second.
    let rate: Double
    /// The most tokens a bucket holds (and holds when new).
    let burst: Double
    /// Buckets kept at most; past it, the full ones (idle keys) are dropped, as they hold nothing a new one would not.
    private let capacity: Int
    private let buckets = Mutex<[Key: Bucket]>([:])

    init(rate: Double, burst: Double, capacity: Int = 100_000) {
        self.rate = rate
        self.burst = burst
        self.capacity = capacity
    }

    /// Takes one token for `key`, if there is one.
    func take(_ key: Key, now: ContinuousClock.Instant = .now) -> Decision {
        update(key, now: now) { bucket in
            guard bucket.tokens >= 1 else { return .limited(retryAfter: retryAfter(bucket.tokens)) }
            bucket.tokens -= 1
            return .allowed(remaining: Int(bucket.tokens))
        }
    }

    /// Whether `key` has a token, without taking it.
    func check(_ key: Key, now: ContinuousClock.Instant = .now) -> Decision {
        update(key, now: now) { bucket in
            bucket.tokens >= 1 ? .allowed(remaining: Int(bucket.tokens)) : .limited(retryAfter: retryAfter(bucket.tokens))
        }
    }

    /// Seconds until the bucket holds `burst` again: `t` of the `RateLimit` header.
    func secondsToFull(remaining: Int) -> Int {
        Int(((burst - Double(remaining)) / rate).rounded(.up))
    }

    private func retryAfter(_ tokens: Double) -> Int {
        max(1, Int(((1 - tokens) / rate).rounded(.up)))
    }

    private func update(_ key: Key, now: ContinuousClock.Instant, _ body: (inout Bucket) -> Decision) -> Decision {
        buckets.withLock { buckets in
            if buckets.count >= capacity, buckets[key] == nil { prune(&buckets, now: now) }
            var bucket = buckets[key] ?? Bucket(tokens: burst, updated: now)
            let elapsed = bucket.updated.duration(to: now)
            if elapsed > .zero {
                let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) * 1e-18
                bucket.tokens = min(burst, bucket.tokens + seconds * rate)
                bucket.updated = now
            }
            let decision = body(&bucket)
            buckets[key] = bucket
            return decision
        }
    }

    /// Drops the buckets that have refilled; if every one is still in use, all of them (a flood of new keys).
    private func prune(_ buckets: inout [Key: Bucket], now: ContinuousClock.Instant) {
        let full = Duration.seconds(burst / rate)
        buckets = buckets.filter { $0.value.updated.duration(to: now) < full }
        if buckets.count >= capacity { buckets.removeAll() }
    }
}
