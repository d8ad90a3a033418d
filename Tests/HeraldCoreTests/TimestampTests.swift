import Foundation
import HeraldCore
import Testing

@Suite("Timestamp")
struct TimestampTests {
    @Test(
        "formats the fixed-width RFC 3339 UTC form",
        arguments: [
            (Int64(0), "1970-01-01T00:00:00.000Z"),
            (1_795_342_530_123, "2026-11-22T10:15:30.123Z"),
            (1_709_164_800_000, "2024-02-29T00:00:00.000Z"),
            (-1, "1969-12-31T23:59:59.999Z"),
            (-62_135_596_800_000, "0001-01-01T00:00:00.000Z"),
            (-62_167_219_200_000, "0000-01-01T00:00:00.000Z"),
            (253_402_300_799_999, "9999-12-31T23:59:59.999Z"),
            (1_000, "1970-01-01T00:00:01.000Z"),
            (7, "1970-01-01T00:00:00.007Z"),
        ]
    )
    func formats(milliseconds: Int64, expected: String) throws {
        let timestamp = Timestamp(millisecondsSinceEpoch: milliseconds)
        #expect(timestamp.rfc3339 == expected)
        #expect(timestamp.description == expected)
        let parsed = try #require(Timestamp(rfc3339: expected))
        #expect(parsed.millisecondsSinceEpoch == milliseconds)
    }

    @Test(
        "parses any RFC 3339 date-time and converts it to UTC",
        arguments: [
            ("2026-11-22T10:15:30.123Z", "2026-11-22T10:15:30.123Z"),
            ("2026-11-22T12:15:30.123+02:00", "2026-11-22T10:15:30.123Z"),
            ("2026-11-22T04:45:30.123-05:30", "2026-11-22T10:15:30.123Z"),
            ("2026-11-22t10:15:30z", "2026-11-22T10:15:30.000Z"),
            ("2026-11-22T10:15:30-00:00", "2026-11-22T10:15:30.000Z"),
            ("2026-11-22T10:15:30+00:00", "2026-11-22T10:15:30.000Z"),
            ("2026-11-22T10:15:30.1Z", "2026-11-22T10:15:30.100Z"),
            ("2026-11-22T10:15:30.12Z", "2026-11-22T10:15:30.120Z"),
            ("2026-11-22T10:15:30.123456789Z", "2026-11-22T10:15:30.123Z"),
            ("2026-11-22T10:15:30.99999999999999Z", "2026-11-22T10:15:30.999Z"),
            ("2026-01-01T01:00:00+02:00", "2025-12-31T23:00:00.000Z"),
            ("2025-12-31T23:30:00-01:00", "2026-01-01T00:30:00.000Z"),
            ("2024-03-01T00:30:00+01:00", "2024-02-29T23:30:00.000Z"),
            ("2000-02-29T00:00:00Z", "2000-02-29T00:00:00.000Z"),
            ("1969-12-31T23:59:59.999Z", "1969-12-31T23:59:59.999Z"),
            ("0000-01-01T00:00:00Z", "0000-01-01T00:00:00.000Z"),
            ("9999-12-31T23:59:59.999Z", "9999-12-31T23:59:59.999Z"),
            ("2026-11-22T23:59:59+23:59", "2026-11-22T00:00:59.000Z"),
            // Leap seconds, only in the last UTC minute of a month, read as the next second (POSIX).
            ("2016-12-31T23:59:60Z", "2017-01-01T00:00:00.000Z"),
            ("2016-12-31T15:59:60.5-08:00", "2017-01-01T00:00:00.500Z"),
            ("2015-06-30T23:59:60.999Z", "2015-07-01T00:00:00.999Z"),
        ]
    )
    func parses(input: String, utc: String) throws {
        let timestamp = try #require(Timestamp(rfc3339: input))
        #expect(timestamp.rfc3339 == utc)
    }

    @Test(
        "rejects what is not an RFC 3339 date-time",
        arguments: [
            "",
            "2026-11-22",
            "2026-11-22T10:15:30",  // no offset
            "2026-11-22 10:15:30Z",  // space instead of T
            "2026-11-22T10:15Z",  // no seconds
            "2026-13-01T00:00:00Z",  // month 13
            "2026-00-01T00:00:00Z",  // month 0
            "2026-11-00T00:00:00Z",  // day 0
            "2026-02-30T00:00:00Z",  // February 30
            "2025-02-29T00:00:00Z",  // not a leap year
            "1900-02-29T00:00:00Z",  // century, not a leap year
            "2026-04-31T00:00:00Z",  // April has 30 days
            "2026-11-22T24:00:00Z",  // hour 24
            "2026-11-22T10:60:00Z",  // minute 60
            "2026-11-22T10:15:61Z",  // second 61
            "2026-11-22T10:15:60Z",  // leap second not at the end of a day
            "2026-06-15T23:59:60Z",  // leap second not at the end of a month
            "2016-12-31T23:59:60+01:00",  // 22:59:60 UTC
            // The fixed form's own width, read by its quicker path.
            "2026-13-01T00:00:00.000Z",  // month 13
            "2026-02-30T00:00:00.000Z",  // February 30
            "2026-11-22T24:00:00.000Z",  // hour 24
            "2026-11-22T10:15:3x.123Z",  // a letter among the digits
            "2026-11-22T10:15:30.12xZ",  // a letter in the fraction
            "2026-11-22T10:15:60.000Z",  // leap second not at the end of a day
            "2026-11-22T10:15:30.Z",  // empty fraction
            "2026-11-22T10:15:30,123Z",  // comma fraction
            "2026-11-22T10:15:30+0200",  // offset without colon
            "2026-11-22T10:15:30+02",  // offset without minutes
            "2026-11-22T10:15:30+24:00",  // offset hour 24
            "2026-11-22T10:15:30+02:60",  // offset minute 60
            "2026-11-22T10:15:30Zjunk",  // trailing text
            "2026-11-22T10:15:30.123Z\n",  // trailing newline
            " 2026-11-22T10:15:30Z",  // leading blank
            "26-11-22T10:15:30Z",  // two-digit year
            "2026-1-22T10:15:30Z",  // one-digit month
            "+2026-11-22T10:15:30Z",  // signed year
            "２０２６-11-22T10:15:30Z",  // non-ASCII digits
            "0000-01-01T00:00:00+01:00",  // before year 0 in UTC
            "9999-12-31T23:59:59-01:00",  // after year 9999 in UTC
        ]
    )
    func rejects(input: String) {
        #expect(Timestamp(rfc3339: input) == nil)
    }

    @Test("format and parse agree with Foundation's Gregorian calendar")
    func agreesWithFoundation() throws {
        var calendar = Foundation.Calendar(identifier: .gregorian)
        calendar.timeZone = try #require(TimeZone(identifier: "UTC"))
        var random = SystemRandomNumberGenerator()
        // From 1600: Foundation's Gregorian calendar is Julian before October 1582, ours is proleptic.
        let seconds = Int64(-11_676_096_000)...Int64(253_402_300_799)
        for _ in 0..<2000 {
            let second = Int64.random(in: seconds, using: &random)
            let millisecond = Int64.random(in: 0...999, using: &random)
            let timestamp = Timestamp(millisecondsSinceEpoch: second * 1000 + millisecond)
            let parts = calendar.dateComponents(
                [.year, .month, .day, .hour, .minute, .second], from: Date(timeIntervalSince1970: Double(second)))
            func pad(_ value: Int?, _ width: Int) -> String {
                let digits = String(value ?? -1)
                return String(repeating: "0", count: max(0, width - digits.count)) + digits
            }
            let expected =
                "\(pad(parts.year, 4))-\(pad(parts.month, 2))-\(pad(parts.day, 2))T"
                + "\(pad(parts.hour, 2)):\(pad(parts.minute, 2)):\(pad(parts.second, 2)).\(pad(Int(millisecond), 3))Z"
            #expect(timestamp.rfc3339 == expected)
            #expect(Timestamp(rfc3339: expected) == timestamp)
        }
    }

    @Test("text order is time order, as the database relies on")
    func textOrderIsTimeOrder() {
        var random = SystemRandomNumberGenerator()
        let range = Timestamp.earliest.millisecondsSinceEpoch...Timestamp.latest.millisecondsSinceEpoch
        for _ in 0..<2000 {
            let a = Timestamp(millisecondsSinceEpoch: Int64.random(in: range, using: &random))
            // Half the pairs close together, so neighbouring days and milliseconds are compared too.
            let b =
                Bool.random(using: &random)
                ? a.adding(milliseconds: Int64.random(in: -100_000_000...100_000_000, using: &random))
                : Timestamp(millisecondsSinceEpoch: Int64.random(in: range, using: &random))
            #expect((a < b) == (a.rfc3339 < b.rfc3339))
            #expect(a.rfc3339.utf8.count == 24)
        }
    }

    @Test("every day from 1900 to 2100 round-trips and follows the previous one")
    func consecutiveDays() throws {
        var previous = try #require(Timestamp(rfc3339: "1899-12-31T12:00:00.000Z"))
        let end = try #require(Timestamp(rfc3339: "2100-12-31T12:00:00.000Z"))
        while previous < end {
            let next = previous.adding(milliseconds: 86_400_000)
            let text = next.rfc3339
            #expect(Timestamp(rfc3339: text) == next)
            #expect(text > previous.rfc3339)
            #expect(text.hasSuffix("T12:00:00.000Z"))
            previous = next
        }
    }

    @Test("arithmetic moves by milliseconds and durations, clamped to the representable years")
    func arithmetic() throws {
        let start = try #require(Timestamp(rfc3339: "2026-12-31T23:59:59.999Z"))
        #expect(start.adding(milliseconds: 1).rfc3339 == "2027-01-01T00:00:00.000Z")
        #expect(start.adding(milliseconds: -999).rfc3339 == "2026-12-31T23:59:59.000Z")
        #expect(start.adding(.seconds(2)).rfc3339 == "2027-01-01T00:00:01.999Z")
        #expect(start.adding(.milliseconds(-1500)).rfc3339 == "2026-12-31T23:59:58.499Z")
        #expect(start.adding(.microseconds(1999)).rfc3339 == "2027-01-01T00:00:00.000Z")
        #expect(start.adding(milliseconds: 5).milliseconds(since: start) == 5)
        #expect(start.milliseconds(since: start.adding(milliseconds: 5)) == -5)
        #expect(start.adding(milliseconds: .max) == .latest)
        #expect(start.adding(milliseconds: .min) == .earliest)
        #expect(start.adding(.seconds(Int64.max)) == .latest)
        #expect(Timestamp(millisecondsSinceEpoch: .max) == .latest)
        #expect(Timestamp(millisecondsSinceEpoch: .min) == .earliest)
        #expect(start < start.adding(milliseconds: 1))
        #expect(!(start < start))
    }

    @Test("now() is the system clock, truncated to the millisecond")
    func now() {
        let before = Date()
        let now = Timestamp.now()
        let after = Date()
        #expect(Timestamp(before) <= now)
        #expect(now <= Timestamp(after))
        #expect(now.date.timeIntervalSince1970 <= after.timeIntervalSince1970)
    }

    @Test("Date conversions keep the millisecond")
    func dates() throws {
        let timestamp = try #require(Timestamp(rfc3339: "2026-11-22T10:15:30.123Z"))
        #expect(Timestamp(timestamp.date) == timestamp)
        #expect(Timestamp(Date(timeIntervalSince1970: -0.0005)).rfc3339 == "1969-12-31T23:59:59.999Z")
        #expect(Timestamp(Date(timeIntervalSince1970: 1e15)) == .latest)
        #expect(Timestamp(Date(timeIntervalSince1970: -1e15)) == .earliest)
    }

    private struct Wrapper: Codable, Equatable {
        var at: Timestamp
    }

    @Test("Codable as the RFC 3339 string; decoding accepts offsets and rejects invalid text")
    func codable() throws {
        let wrapper = Wrapper(at: try #require(Timestamp(rfc3339: "2026-11-22T10:15:30.123Z")))
        let json = try JSONEncoder().encode(wrapper)
        #expect(String(decoding: json, as: UTF8.self) == #"{"at":"2026-11-22T10:15:30.123Z"}"#)
        #expect(try JSONDecoder().decode(Wrapper.self, from: json) == wrapper)

        let offset = try JSONDecoder().decode(Wrapper.self, from: Data(#"{"at":"2026-11-22T11:15:30.123+01:00"}"#.utf8))
        #expect(offset == wrapper)
        #expect(throws: DecodingError.self) {
            try JSONDecoder().decode(Wrapper.self, from: Data(#"{"at":"2026-02-30T00:00:00Z"}"#.utf8))
        }
        #expect(throws: DecodingError.self) {
            try JSONDecoder().decode(Wrapper.self, from: Data(#"{"at":1795342530123}"#.utf8))
        }
    }

    @Test("HTTP dates are IMF-fixdate: RFC 9110's own example, a leap day, a year with a leading zero")
    func httpDates() {
        #expect(Timestamp(millisecondsSinceEpoch: 784_111_777_000).httpDate == "Sun, 06 Nov 1994 08:49:37 GMT")
        #expect(Timestamp(rfc3339: "2024-02-29T23:59:59.999Z")?.httpDate == "Thu, 29 Feb 2024 23:59:59 GMT")
        #expect(Timestamp(rfc3339: "0999-01-01T00:00:00Z")?.httpDate.hasSuffix(" Jan 0999 00:00:00 GMT") == true)
    }
}
