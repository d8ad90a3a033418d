import Synchronization

/// Makes and checks Herald's ids: UUIDv7 strings (RFC 9562) in lowercase canonical `8-4-4-4-12` form.
///
/// Version 7 puts the creation millisecond first, so ids sort (as text, too) in creation order; that keeps
/// the `(created_at, id)` list order and cursors stable and inserts into the primary-key indexes at the end.
public enum Identifier {
    /// A new UUIDv7 for the instant `time`, e.g. `019a8f3e-5c2b-7d41-9e6f-0a1b2c3d4e5f`.
    ///
    /// Ids made in the same millisecond by this process still increase (RFC 9562 section 6.2, method 2:
    /// the 74 random bits are bumped by a random step), so creation order is id order even within a
    /// millisecond. Instants before 1970 use a timestamp field of 0, which UUIDv7 cannot go below.
    public static func generate(at time: Timestamp = .now()) -> String {
        let unixMilliseconds = UInt64(max(time.millisecondsSinceEpoch, 0))
        let (high, low) = generator.withLock { $0.next(at: unixMilliseconds) }

        var bytes = [UInt8](repeating: 0, count: 16)
        for index in 0..<6 {
            bytes[index] = UInt8(truncatingIfNeeded: unixMilliseconds >> (40 - 8 * UInt64(index)))
        }
        bytes[6] = 0x70 | UInt8(truncatingIfNeeded: high >> 8)  // version 7 and rand_a's top 4 bits
        bytes[7] = UInt8(truncatingIfNeeded: high)
        bytes[8] = 0x80 | UInt8(truncatingIfNeeded: low >> 56)  // variant 10 and rand_b's top 6 bits
        for index in 9..<16 {
            bytes[index] = UInt8(truncatingIfNeeded: low >> (8 * UInt64(15 - index)))
        }
        return format(bytes)
    }

    /// Whether `text` has the canonical UUID shape: 36 characters, lowercase hex digits, hyphens at 8, 13, 18, 23.
    ///
    /// Any version passes; uppercase does not, because Herald only ever hands out lowercase ids, so an
    /// uppercase one cannot name anything and routes may answer 404 without asking the database.
    public static func isValid(_ text: String) -> Bool {
        guard text.utf8.count == 36 else { return false }
        var text = text
        // Checked on every request that names an id: one pass, two comparisons a byte.
        let hyphens: UInt64 = 1 << 8 | 1 << 13 | 1 << 18 | 1 << 23
        return text.withUTF8 { utf8 in
            for index in 0..<36 {
                let byte = utf8[index]
                let valid = hyphens >> index & 1 == 1 ? byte == ASCII.hyphen : byte &- UInt8(ascii: "0") < 10 || byte &- UInt8(ascii: "a") < 6
                if !valid { return false }
            }
            return true
        }
    }

    /// The creation millisecond recorded in a UUIDv7 id, or nil when `text` is not a valid version 7 id.
    public static func timestamp(of text: String) -> Timestamp? {
        guard isValid(text) else { return nil }
        let utf8 = Array(text.utf8)
        guard utf8[14] == UInt8(ascii: "7") else { return nil }
        var milliseconds: Int64 = 0
        for byte in utf8[0..<13] where byte != ASCII.hyphen {
            milliseconds = milliseconds << 4 | Int64(hexValue(byte) ?? 0)
        }
        return Timestamp(millisecondsSinceEpoch: milliseconds)
    }

    // MARK: Implementation

    /// The value of a lowercase hex digit.
    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte &- UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte &- UInt8(ascii: "a") &+ 10
        default: nil
        }
    }

    private static func format(_ bytes: [UInt8]) -> String {
        String(unsafeUninitializedCapacity: 36) { buffer in
            var position = 0
            for (index, byte) in bytes.enumerated() {
                if index == 4 || index == 6 || index == 8 || index == 10 {
                    buffer[position] = ASCII.hyphen
                    position += 1
                }
                (buffer[position], buffer[position + 1]) = Hex.digits(of: byte)
                position += 2
            }
            return position
        }
    }

    private static let generator = Mutex(MonotonicRandom())

    /// The 74 random bits of the last id (12 in `high`, 62 in `low`) and the millisecond they were drawn for.
    ///
    /// Internal rather than private so tests can check monotonicity on their own instance: the shared one
    /// is also used by tests running in parallel at other instants.
    struct MonotonicRandom: Sendable {
        private var milliseconds: UInt64 = .max
        private var high: UInt16 = 0
        private var low: UInt64 = 0

        private static let lowLimit: UInt64 = 1 << 62
        private static let highLimit: UInt16 = 1 << 12

        /// The random bits for a new id at `unixMilliseconds`: fresh for a new millisecond, else the last plus a random step.
        mutating func next(at unixMilliseconds: UInt64) -> (high: UInt16, low: UInt64) {
            var random = SystemRandomNumberGenerator()
            if unixMilliseconds == milliseconds {
                // A step of up to 2^32 keeps successive ids hard to guess while still increasing.
                low += UInt64.random(in: 1...(1 << 32), using: &random)
                if low >= Self.lowLimit {
                    low -= Self.lowLimit
                    high += 1
                }
                if high < Self.highLimit { return (high, low) }
                // Overflow needs ~2^41 ids in one millisecond; start afresh rather than trap.
            }
            milliseconds = unixMilliseconds
            // The top bit of `high` starts clear, leaving 2^73 of room for increments within the millisecond.
            high = UInt16.random(in: 0..<(Self.highLimit / 2), using: &random)
            low = UInt64.random(in: 0..<Self.lowLimit, using: &random)
            return (high, low)
        }
    }
}
