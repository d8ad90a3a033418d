/// Writes an integer in decimal: the one digit loop for every number Herald writes by hand (`JSONWriter`'s responses,
/// the access log's lines).
public enum DecimalDigits {
    /// The most bytes ``write(_:to:)`` writes: a sign and 19 digits.
    public static let maximumCount = 20

    /// Writes `value` at `start`, a `-` first when negative, into room for ``maximumCount`` bytes; returns how many.
    @inlinable
    public static func write(_ value: Int, to start: UnsafeMutablePointer<UInt8>) -> Int {
        var magnitude = value.magnitude
        var digits = 1
        var rest = magnitude
        while rest >= 10 {
            rest /= 10
            digits += 1
        }
        let sign = value < 0 ? 1 : 0
        if sign == 1 { start[0] = UInt8(ascii: "-") }
        // From the last digit back, straight into place.
        var index = sign + digits
        repeat {
            index -= 1
            start[index] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: magnitude % 10)
            magnitude /= 10
        } while magnitude > 0
        return sign + digits
    }
}
