#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// A point in time with millisecond precision, written as RFC 3339 UTC text with exactly three fractional digits.
///
/// Herald stores timestamps as `YYYY-MM-DDTHH:MM:SS.SSSZ` text and compares them as text (ordering, cursors,
/// `run_at <= now`), which only works because every timestamp is written in this one fixed-width form.
/// The value is therefore kept to the years 0000 through 9999, the range that form (and SQLite's date
/// functions) can express.
public struct Timestamp: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// Milliseconds since 1970-01-01T00:00:00Z; negative before it.
    public let millisecondsSinceEpoch: Int64

    /// The earliest representable instant, 0000-01-01T00:00:00.000Z.
    public static let earliest = Timestamp(unclamped: Gregorian.earliestMilliseconds)

    /// The latest representable instant, 9999-12-31T23:59:59.999Z.
    public static let latest = Timestamp(unclamped: Gregorian.latestMilliseconds)

    /// Creates a timestamp from milliseconds since the Unix epoch, clamped to ``earliest`` ... ``latest``.
    ///
    /// Clamping rather than trapping, because a server must not crash on an absurd stored value; every
    /// timestamp Herald makes itself (clock, parsed input, short durations) is far inside the range.
    public init(millisecondsSinceEpoch: Int64) {
        self.millisecondsSinceEpoch = min(max(millisecondsSinceEpoch, Gregorian.earliestMilliseconds), Gregorian.latestMilliseconds)
    }

    private init(unclamped milliseconds: Int64) {
        self.millisecondsSinceEpoch = milliseconds
    }

    /// Creates a timestamp from a `Date`, dropping anything finer than a millisecond.
    public init(_ date: Date) {
        let milliseconds = (date.timeIntervalSince1970 * 1000).rounded(.down)
        // Converting an out-of-range Double to Int64 traps, so bound it first.
        let bounded = min(max(milliseconds, Double(Gregorian.earliestMilliseconds)), Double(Gregorian.latestMilliseconds))
        self.init(millisecondsSinceEpoch: Int64(bounded))
    }

    /// The current time of the system clock, truncated to the millisecond.
    public static func now() -> Timestamp {
        Timestamp(Date())
    }

    /// The same instant as a `Date`.
    public var date: Date {
        Date(timeIntervalSince1970: Double(millisecondsSinceEpoch) / 1000)
    }

    /// This instant moved by `milliseconds` (negative goes back), clamped to the representable range.
    public func adding(milliseconds: Int64) -> Timestamp {
        let (sum, overflow) = millisecondsSinceEpoch.addingReportingOverflow(milliseconds)
        if overflow { return milliseconds < 0 ? .earliest : .latest }
        return Timestamp(millisecondsSinceEpoch: sum)
    }

    /// This instant moved by `duration`, truncated to whole milliseconds towards zero.
    public func adding(_ duration: Duration) -> Timestamp {
        let (seconds, attoseconds) = duration.components
        let (fromSeconds, overflow) = seconds.multipliedReportingOverflow(by: 1000)
        if overflow { return seconds < 0 ? .earliest : .latest }
        return adding(milliseconds: fromSeconds).adding(milliseconds: attoseconds / 1_000_000_000_000_000)
    }

    /// The milliseconds from `other` to this instant: positive when this one is later.
    public func milliseconds(since other: Timestamp) -> Int64 {
        // Both lie within years 0...9999, so the difference cannot overflow.
        millisecondsSinceEpoch - other.millisecondsSinceEpoch
    }

    public static func < (lhs: Timestamp, rhs: Timestamp) -> Bool {
        lhs.millisecondsSinceEpoch < rhs.millisecondsSinceEpoch
    }

    /// The RFC 3339 form, as ``rfc3339``.
    public var description: String { rfc3339 }
}

// MARK: - RFC 3339

extension Timestamp {
    /// The fixed-width UTC form `YYYY-MM-DDTHH:MM:SS.SSSZ`, the one Herald writes to JSON and to the database.
    public var rfc3339: String {
        String(unsafeUninitializedCapacity: Self.rfc3339Width) { buffer in
            writeRFC3339(to: buffer)
            return Self.rfc3339Width
        }
    }

    /// The length of ``rfc3339``.
    static let rfc3339Width = 24

    /// Writes ``rfc3339`` into the first ``rfc3339Width`` bytes of `buffer`.
    func writeRFC3339(to buffer: UnsafeMutableBufferPointer<UInt8>) {
        let days = Gregorian.floorDivide(millisecondsSinceEpoch, Gregorian.millisecondsPerDay)
        let millisecondOfDay = millisecondsSinceEpoch - days * Gregorian.millisecondsPerDay
        let (year, month, day) = Gregorian.civil(fromDays: days)
        let hour = millisecondOfDay / 3_600_000
        let minute = millisecondOfDay / 60_000 % 60
        let second = millisecondOfDay / 1000 % 60
        let millisecond = millisecondOfDay % 1000

        // Writes `value` as exactly `width` decimal digits ending just before `end`.
        func put(_ value: Int64, width: Int, endingAt end: Int) {
            var value = value
            for index in stride(from: end - 1, through: end - width, by: -1) {
                buffer[index] = UInt8(truncatingIfNeeded: value % 10) &+ ASCII.zero
                value /= 10
            }
        }
        put(year, width: 4, endingAt: 4)
        buffer[4] = ASCII.hyphen
        put(month, width: 2, endingAt: 7)
        buffer[7] = ASCII.hyphen
        put(day, width: 2, endingAt: 10)
        buffer[10] = ASCII.upperT
        put(hour, width: 2, endingAt: 13)
        buffer[13] = ASCII.colon
        put(minute, width: 2, endingAt: 16)
        buffer[16] = ASCII.colon
        put(second, width: 2, endingAt: 19)
        buffer[19] = ASCII.period
        put(millisecond, width: 3, endingAt: 23)
        buffer[23] = ASCII.upperZ
    }

    /// Day names from 1970-01-01 (a Thursday) on, and month names, as IMF-fixdate spells them.
    private static let weekdays = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"]
    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    /// The HTTP date (RFC 9110's IMF-fixdate) of this instant to the second, e.g. `Sun, 06 Nov 1994 08:49:37 GMT`.
    public var httpDate: String {
        let days = Gregorian.floorDivide(millisecondsSinceEpoch, Gregorian.millisecondsPerDay)
        let secondOfDay = (millisecondsSinceEpoch - days * Gregorian.millisecondsPerDay) / 1000
        let (year, month, day) = Gregorian.civil(fromDays: days)
        let weekday = Self.weekdays[Int(Gregorian.floorModulo(days, 7))]
        let monthName = Self.months[Int(month) - 1]
        func two(_ value: Int64) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let time = "\(two(secondOfDay / 3600)):\(two(secondOfDay / 60 % 60)):\(two(secondOfDay % 60))"
        let paddedYear = String(repeating: "0", count: max(0, 4 - String(year).count)) + String(year)
        return "\(weekday), \(two(day)) \(monthName) \(paddedYear) \(time) GMT"
    }

    /// Parses any RFC 3339 `date-time` (section 5.6), converting it to UTC; nil when it is not one.
    ///
    /// Accepts `T`/`t` and `Z`/`z`, numeric offsets (`+02:00`, `-00:00`), and any number of fractional
    /// digits (the ABNF allows `1*DIGIT`; digits beyond the millisecond are truncated, so the instant is
    /// never moved forward). Rejects impossible dates and times (month 13, February 30, hour 24, minute 60),
    /// a space instead of `T` (RFC 3339 only mentions it as an application's option, it is not in the grammar),
    /// and instants outside years 0000...9999 after conversion to UTC.
    /// A leap second (`:60`) is accepted only where one can occur, the last UTC minute of a month, and is
    /// read as the first instant of the next second, as POSIX time does.
    public init?(rfc3339 text: String) {
        var text = text
        guard let timestamp = text.withUTF8({ Timestamp(rfc3339: $0) }) else { return nil }
        self = timestamp
    }

    /// ``init(rfc3339:)`` from UTF-8 bytes (a database column read in place).
    public init?(rfc3339 utf8: UnsafeBufferPointer<UInt8>) {
        guard let milliseconds = Timestamp.parse(utf8) else { return nil }
        self.init(unclamped: milliseconds)
    }

    private static func parse(_ bytes: UnsafeBufferPointer<UInt8>) -> Int64? {
        // The form Herald writes and stores: read without the grammar's branches (the rest, a leap second too, below).
        if bytes.count == rfc3339Width, let milliseconds = parseFixed(bytes) { return milliseconds }
        // The shortest form is `YYYY-MM-DDTHH:MM:SSZ`.
        guard bytes.count >= 20 else { return nil }

        // Reads exactly `width` ASCII digits starting at `start`.
        func number(at start: Int, width: Int) -> Int64? {
            guard start + width <= bytes.count else { return nil }
            var value: Int64 = 0
            for index in start..<start + width {
                guard let digit = ASCII.digitValue(bytes[index]) else { return nil }
                value = value * 10 + digit
            }
            return value
        }

        guard let year = number(at: 0, width: 4), bytes[4] == ASCII.hyphen,
            let month = number(at: 5, width: 2), bytes[7] == ASCII.hyphen,
            let day = number(at: 8, width: 2), bytes[10] == ASCII.upperT || bytes[10] == ASCII.lowerT,
            let hour = number(at: 11, width: 2), bytes[13] == ASCII.colon,
            let minute = number(at: 14, width: 2), bytes[16] == ASCII.colon,
            let second = number(at: 17, width: 2)
        else { return nil }

        var index = 19
        var millisecond: Int64 = 0
        if bytes[index] == ASCII.period {
            index += 1
            let start = index
            while index < bytes.count, let digit = ASCII.digitValue(bytes[index]) {
                if index - start < 3 { millisecond = millisecond * 10 + digit }
                index += 1
            }
            let count = index - start
            guard count > 0 else { return nil }
            for _ in count..<max(count, 3) { millisecond *= 10 }
        }

        guard index < bytes.count else { return nil }
        let offsetMinutes: Int64
        switch bytes[index] {
        case ASCII.upperZ, ASCII.lowerZ:
            offsetMinutes = 0
            index += 1
        case ASCII.plus, ASCII.hyphen:
            guard let offsetHour = number(at: index + 1, width: 2), index + 3 < bytes.count,
                bytes[index + 3] == ASCII.colon, let offsetMinute = number(at: index + 4, width: 2),
                offsetHour <= 23, offsetMinute <= 59
            else { return nil }
            let magnitude = offsetHour * 60 + offsetMinute
            offsetMinutes = bytes[index] == ASCII.plus ? magnitude : -magnitude
            index += 6
        default:
            return nil
        }
        guard index == bytes.count else { return nil }

        guard (1...12).contains(month), day >= 1, day <= Gregorian.daysIn(month: month, year: year),
            hour <= 23, minute <= 59, second <= 60
        else { return nil }

        // Local time minus the offset is UTC.
        let days = Gregorian.days(fromYear: year, month: month, day: day)
        var seconds = days * 86_400 + hour * 3600 + minute * 60 + min(second, 59) - offsetMinutes * 60
        if second == 60 {
            // `seconds` is now the UTC 23:59:59 before the leap second, which must end the day and the month.
            let nextDay = Gregorian.floorDivide(seconds + 1, 86_400)
            guard Gregorian.floorModulo(seconds, 86_400) == 86_399, Gregorian.civil(fromDays: nextDay).day == 1 else {
                return nil
            }
            seconds += 1
        }
        let milliseconds = seconds * 1000 + millisecond
        guard (Gregorian.earliestMilliseconds...Gregorian.latestMilliseconds).contains(milliseconds) else { return nil }
        return milliseconds
    }
}

extension Timestamp {
    /// `YYYY-MM-DDTHH:MM:SS.SSSZ` (``rfc3339``'s form) to milliseconds; nil for anything else, or an impossible date or
    /// time, or a leap second (which ``parse(_:)`` reads).
    private static func parseFixed(_ bytes: UnsafeBufferPointer<UInt8>) -> Int64? {
        guard bytes[4] == ASCII.hyphen, bytes[7] == ASCII.hyphen, bytes[10] == ASCII.upperT, bytes[13] == ASCII.colon,
            bytes[16] == ASCII.colon, bytes[19] == ASCII.period, bytes[23] == ASCII.upperZ
        else { return nil }
        var isDigits = true
        func number(_ start: Int, _ width: Int) -> Int64 {
            var value: Int64 = 0
            for index in start..<start + width {
                let digit = bytes[index] &- ASCII.zero
                isDigits = isDigits && digit <= 9
                value = value * 10 + Int64(digit)
            }
            return value
        }
        let (year, month, day) = (number(0, 4), number(5, 2), number(8, 2))
        let (hour, minute, second, millisecond) = (number(11, 2), number(14, 2), number(17, 2), number(20, 3))
        guard isDigits, (1...12).contains(month), day >= 1, day <= Gregorian.daysIn(month: month, year: year), hour <= 23, minute <= 59,
            second <= 59
        else { return nil }
        let days = Gregorian.days(fromYear: year, month: month, day: day)
        return (days * 86_400 + hour * 3600 + minute * 60 + second) * 1000 + millisecond
    }
}

// MARK: - Codable

extension Timestamp: Codable {
    /// Decodes any RFC 3339 date-time string (see ``init(rfc3339:)``).
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let text = try container.decode(String.self)
        guard let timestamp = Timestamp(rfc3339: text) else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "Not an RFC 3339 date-time: \(text)")
        }
        self = timestamp
    }

    /// Encodes the fixed-width ``rfc3339`` string.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rfc3339)
    }
}

// MARK: - Proleptic Gregorian calendar arithmetic

/// Day-number conversions for the proleptic Gregorian calendar, after Howard Hinnant's `chrono` algorithms.
///
/// Written out because `DateFormatter` and `Calendar` are slow, locale-sensitive and differ across platforms.
enum Gregorian {
    static let millisecondsPerDay: Int64 = 86_400_000
    /// 0000-01-01T00:00:00.000Z.
    static let earliestMilliseconds: Int64 = days(fromYear: 0, month: 1, day: 1) * millisecondsPerDay
    /// 9999-12-31T23:59:59.999Z.
    static let latestMilliseconds: Int64 = (days(fromYear: 9999, month: 12, day: 31) + 1) * millisecondsPerDay - 1

    /// Division rounding towards negative infinity, so instants before 1970 land on the right day.
    static func floorDivide(_ a: Int64, _ b: Int64) -> Int64 {
        let quotient = a / b
        return (a % b != 0 && (a < 0) != (b < 0)) ? quotient - 1 : quotient
    }

    /// The non-negative remainder matching ``floorDivide(_:_:)``.
    static func floorModulo(_ a: Int64, _ b: Int64) -> Int64 {
        a - floorDivide(a, b) * b
    }

    static func isLeap(_ year: Int64) -> Bool {
        year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
    }

    static func daysIn(month: Int64, year: Int64) -> Int64 {
        switch month {
        case 2: isLeap(year) ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Days since 1970-01-01 of a valid civil date.
    static func days(fromYear year: Int64, month: Int64, day: Int64) -> Int64 {
        // Count years from March, so the leap day is the last day of the year.
        let year = month <= 2 ? year - 1 : year
        let era = floorDivide(year, 400)
        let yearOfEra = year - era * 400
        let monthFromMarch = (month + 9) % 12
        let dayOfYear = (153 * monthFromMarch + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    /// The civil date of a day number (days since 1970-01-01).
    static func civil(fromDays days: Int64) -> (year: Int64, month: Int64, day: Int64) {
        let shifted = days + 719_468
        let era = floorDivide(shifted, 146_097)
        let dayOfEra = shifted - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthFromMarch = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthFromMarch + 2) / 5 + 1
        let month = monthFromMarch < 10 ? monthFromMarch + 3 : monthFromMarch - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }
}

/// The ASCII bytes the hand-written parsers look for.
enum ASCII {
    static let zero = UInt8(ascii: "0")
    static let hyphen = UInt8(ascii: "-")
    static let colon = UInt8(ascii: ":")
    static let period = UInt8(ascii: ".")
    static let plus = UInt8(ascii: "+")
    static let upperT = UInt8(ascii: "T")
    static let lowerT = UInt8(ascii: "t")
    static let upperZ = UInt8(ascii: "Z")
    static let lowerZ = UInt8(ascii: "z")

    /// The value of a decimal digit, or nil for any other byte.
    static func digitValue(_ byte: UInt8) -> Int64? {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) ? Int64(byte &- zero) : nil
    }

    /// Whether `byte` is a hex digit of either case.
    static func isHexDigit(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"), UInt8(ascii: "A")...UInt8(ascii: "F"): true
        default: false
        }
    }
}
