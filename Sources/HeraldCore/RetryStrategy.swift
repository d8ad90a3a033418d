/// How long to wait before trying again: exponential growth from `base`, at most `cap`, spread by a random factor.
///
/// Every retried thing in Herald waits by one of these: an upload's transient failure, a webhook delivery, an
/// object's deletion from the store.
public struct RetryStrategy: Sendable, Hashable {
    /// The wait after the first failure (before the random factor).
    public var base: Duration
    /// Each further failure multiplies the wait by this.
    public var factor: Double
    /// The longest wait (before the random factor).
    public var cap: Duration
    /// The wait is multiplied by a number drawn uniformly from here, so that many retries spread out; `1...1`: none.
    public var jitter: ClosedRange<Double>

    public init(base: Duration, factor: Double = 2, cap: Duration, jitter: ClosedRange<Double> = 1...1) {
        precondition(factor >= 1 && jitter.lowerBound >= 0, "a retry never waits less for failing more, nor a negative time")
        self.base = base
        self.factor = factor
        self.cap = cap
        self.jitter = jitter
    }

    /// The wait after `failures` failed attempts in a row (1 after the first): `base * factor^(failures-1)`, at most
    /// `cap`, times the random factor.
    public func delay(after failures: Int) -> Duration {
        var generator = SystemRandomNumberGenerator()
        return delay(after: failures, using: &generator)
    }

    /// ``delay(after:)`` with the random factor drawn from `generator`.
    public func delay(after failures: Int, using generator: inout some RandomNumberGenerator) -> Duration {
        // In seconds as a Double: a high power of the factor would overflow Duration's arithmetic before the cap.
        let grown = Self.seconds(base) * Self.power(factor, max(failures, 1) - 1)
        let capped = min(grown, Self.seconds(cap))
        let spread = jitter.lowerBound == jitter.upperBound ? jitter.lowerBound : Double.random(in: jitter, using: &generator)
        return .nanoseconds(Int64((capped * spread * 1e9).rounded()))
    }

    private static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    /// `value^exponent`, stopping once it is past any cap a Duration can hold (without Foundation's `pow`).
    private static func power(_ value: Double, _ exponent: Int) -> Double {
        var result = 1.0
        for _ in 0..<min(exponent, 128) where result < 1e12 { result *= value }
        return result
    }
}

extension RetryStrategy {
    /// An upload's transient failure: 200 ms doubling, at most 204.8 s (the tenth retry), plus up to half again.
    public static func uploads(base: Duration = .milliseconds(200)) -> RetryStrategy {
        RetryStrategy(base: base, factor: 2, cap: base * 1024, jitter: 1...1.5)
    }

    /// A webhook delivery: about 5 s, 20 s, 80 s, 5 min, 21 min, 85 min, 5.7 h, … (each ±20 %), as the contract says.
    public static func webhookDeliveries(base: Duration = .seconds(5)) -> RetryStrategy {
        RetryStrategy(base: base, factor: 4, cap: base * 4096 * 4096, jitter: 0.8...1.2)
    }

    /// Deleting an object from the store: 5 s doubling, at most 10 minutes, no jitter (one process retries them).
    public static let objectDeletions = RetryStrategy(base: .seconds(5), factor: 2, cap: .seconds(600))
}
