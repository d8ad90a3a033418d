/// The rate of a transfer and the time it has left, from samples of its byte count.
///
/// The rate is the bytes moved over a sliding window of the last few seconds, so that it follows a change of
/// speed within that time but does not jump with every chunk.
public struct TransferMeter: Sendable {
    /// The transfer's size in bytes.
    public let total: Int
    /// Bytes moved so far.
    public private(set) var done = 0
    private let window: Duration
    private var samples: [(at: ContinuousClock.Instant, bytes: Int)] = []

    /// A meter for `total` bytes whose rate looks back over `window`.
    public init(total: Int, window: Duration = .seconds(3)) {
        self.total = total
        self.window = window
    }

    /// Records that `bytes` of the transfer have moved by `now`.
    public mutating func record(_ bytes: Int, at now: ContinuousClock.Instant) {
        done = min(max(bytes, done), total)
        samples.append((now, done))
        // Keep one sample older than the window, the baseline of the rate.
        while samples.count > 2, samples[1].at <= now - window { samples.removeFirst() }
    }

    /// The fraction done, 0 to 1; 1 for an empty transfer.
    public var fraction: Double { total > 0 ? Double(done) / Double(total) : 1 }

    /// Bytes a second over the window; nil until two samples span some time.
    public var bytesPerSecond: Double? {
        guard let first = samples.first, let last = samples.last, last.at > first.at else { return nil }
        let elapsed = last.at - first.at
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        return Double(last.bytes - first.bytes) / seconds
    }

    /// Seconds left at the current rate; nil while unknown or stalled.
    public var secondsLeft: Int? {
        guard let rate = bytesPerSecond, rate > 0 else { return done >= total ? 0 : nil }
        return Int((Double(total - done) / rate).rounded(.up))
    }
}
