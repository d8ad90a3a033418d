#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// When a request began, on the monotonic clock in nanoseconds: its duration for the log and the metrics.
///
/// Not a `ContinuousClock.Instant`: its `Duration` is 128-bit attoseconds, and splitting one into the histogram's
/// nanoseconds took a 128-bit division and its multiplications, about 450 instructions a request.
struct RequestStart: Sendable {
    private let nanoseconds: Int

    /// Now.
    init() {
        nanoseconds = Self.monotonicNanoseconds()
    }

    /// Nanoseconds since this start.
    var elapsedNanoseconds: Int { Self.monotonicNanoseconds() - nanoseconds }

    private static func monotonicNanoseconds() -> Int {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return Int(now.tv_sec) * 1_000_000_000 + Int(now.tv_nsec)
    }
}
