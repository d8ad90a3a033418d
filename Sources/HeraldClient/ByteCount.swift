/// Sizes and durations as a person reads them in a progress line: `1.5 MiB`, `2:05`.
public enum HumanReadable {
    /// Bytes in binary units with one decimal from KiB up: `512 B`, `12.3 KiB`, `1.5 GiB`.
    public static func bytes(_ count: Int) -> String {
        let units = ["KiB", "MiB", "GiB", "TiB"]
        guard count >= 1024 else { return "\(max(count, 0)) B" }
        var value = Double(count) / 1024
        var unit = 0
        while value >= 1024, unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        let tenths = Int((value * 10).rounded())
        return "\(tenths / 10).\(tenths % 10) \(units[unit])"
    }

    /// A rate: `bytes(_:)` a second.
    public static func rate(_ bytesPerSecond: Double) -> String {
        "\(bytes(Int(bytesPerSecond.rounded())))/s"
    }

    /// Seconds as `m:ss`, or `h:mm:ss` from an hour.
    public static func duration(seconds: Int) -> String {
        let seconds = max(seconds, 0)
        let (hours, minutes, rest) = (seconds / 3600, seconds / 60 % 60, seconds % 60)
        func two(_ value: Int) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return hours > 0 ? "\(hours):\(two(minutes)):\(two(rest))" : "\(minutes):\(two(rest))"
    }
}
