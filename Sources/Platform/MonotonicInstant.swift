/// A point on the system's monotonic clock, in nanoseconds: what the request path times with (a request's duration,
/// the rate limits' buckets, the key cache, the head deadlines).
///
/// Not `ContinuousClock.Instant`: it holds a `Duration`, 128-bit attoseconds, so reading the clock multiplies in 128
/// bits and splitting a difference into seconds divides in 128 bits: about 900 instructions, and 45 lines of code, a
/// status poll went through. Durations from the configuration convert once.
public struct MonotonicInstant: Comparable, Hashable, Sendable {
    /// Nanoseconds since an arbitrary point (the boot, on Linux).
    public let nanoseconds: Int

    public init(nanoseconds: Int) {
        self.nanoseconds = nanoseconds
    }

    /// Now.
    public static var now: MonotonicInstant {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return MonotonicInstant(nanoseconds: Int(time.tv_sec) * 1_000_000_000 + Int(time.tv_nsec))
    }

    /// Nanoseconds from this instant to `other`: negative when `other` is earlier.
    public func nanoseconds(to other: MonotonicInstant) -> Int {
        other.nanoseconds - nanoseconds
    }

    public static func < (lhs: MonotonicInstant, rhs: MonotonicInstant) -> Bool {
        lhs.nanoseconds < rhs.nanoseconds
    }

    /// `nanoseconds` later: for a duration converted once and added many times.
    public func adding(nanoseconds more: Int) -> MonotonicInstant {
        MonotonicInstant(nanoseconds: nanoseconds + more)
    }

    /// `duration` later (whole nanoseconds).
    public static func + (lhs: MonotonicInstant, rhs: Duration) -> MonotonicInstant {
        lhs.adding(nanoseconds: rhs.wholeNanoseconds)
    }

    /// From `rhs` to `lhs`.
    public static func - (lhs: MonotonicInstant, rhs: MonotonicInstant) -> Duration {
        .nanoseconds(rhs.nanoseconds(to: lhs))
    }
}

extension Duration {
    /// The duration in whole nanoseconds (rounded toward zero), for arithmetic with ``MonotonicInstant``.
    public var wholeNanoseconds: Int {
        let (seconds, attoseconds) = components
        return Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000)
    }
}
