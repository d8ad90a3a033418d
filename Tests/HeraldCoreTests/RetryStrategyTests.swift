import HeraldCore
import Testing

@Suite("Retry strategies")
struct RetryStrategyTests {
    /// SplitMix64: the same draws every run.
    struct Seeded: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    /// The shortest and longest of 2,000 draws after `failures`, in seconds.
    static func spread(_ strategy: RetryStrategy, after failures: Int) -> (Double, Double) {
        var generator = Seeded(state: 2026)
        let seconds = (0..<2_000).map { _ in
            let wait = strategy.delay(after: failures, using: &generator).components
            return Double(wait.seconds) + Double(wait.attoseconds) / 1e18
        }
        return (seconds.min() ?? 0, seconds.max() ?? 0)
    }

    @Test func deletionsWait5SecondsDoublingUpTo10Minutes() {
        let waits = (1...9).map { RetryStrategy.objectDeletions.delay(after: $0) }
        #expect(waits == [5, 10, 20, 40, 80, 160, 320, 600, 600].map { Duration.seconds($0) })
    }

    /// The contract's schedule: about 5 s, 20 s, 80 s, 5 min, 21 min, 85 min, 5.7 h, each ±20 %.
    @Test func webhookDeliveriesFollowTheContractsSchedule() {
        let strategy = RetryStrategy.webhookDeliveries()
        for (index, nominal) in [5.0, 20, 80, 320, 1280, 5120, 20480].enumerated() {
            let (shortest, longest) = Self.spread(strategy, after: index + 1)
            #expect(shortest >= nominal * 0.8 && shortest < nominal * 0.81, "after \(index + 1): \(shortest)")
            #expect(longest <= nominal * 1.2 && longest > nominal * 1.19, "after \(index + 1): \(longest)")
        }
        // Far past the schedule: capped at 5 s * 4^12, not overflowing.
        #expect(Self.spread(strategy, after: 1_000).1 <= 5 * 16_777_216 * 1.2)
    }

    @Test func uploadsDoubleFromTheirBaseWithUpToHalfAgainOnTop() {
        let strategy = RetryStrategy.uploads(base: .milliseconds(10))
        for failures in 1...12 {
            let nominal = 0.01 * Double(1 << min(failures - 1, 10))
            let (shortest, longest) = Self.spread(strategy, after: failures)
            #expect(shortest >= nominal && shortest < nominal * 1.01, "after \(failures): \(shortest)")
            #expect(longest <= nominal * 1.5 && longest > nominal * 1.49, "after \(failures): \(longest)")
        }
    }

    @Test func aFirstAttemptCountsAsOneFailure() {
        #expect(RetryStrategy.objectDeletions.delay(after: 0) == .seconds(5))
        #expect(RetryStrategy(base: .seconds(1), factor: 1, cap: .seconds(9)).delay(after: 50) == .seconds(1))
    }
}
