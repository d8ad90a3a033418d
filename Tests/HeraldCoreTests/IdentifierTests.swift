import Testing

@testable import HeraldCore

@Suite("Identifier")
struct IdentifierTests {
    @Test("generates lowercase canonical UUIDv7 strings: version 7, variant 10, the time in the first 48 bits")
    func shape() throws {
        let time = try #require(Timestamp(rfc3339: "2026-11-22T10:15:30.123Z"))
        for _ in 0..<200 {
            let id = Identifier.generate(at: time)
            let characters = Array(id)
            #expect(characters.count == 36)
            #expect(Identifier.isValid(id))
            #expect(id == id.lowercased())
            #expect([characters[8], characters[13], characters[18], characters[23]] == ["-", "-", "-", "-"])
            #expect(characters[14] == "7")
            #expect("89ab".contains(characters[19]))
            // 1795342530123 ms is 0x01a202c0f64b.
            #expect(id.hasPrefix("01a202c0-f64b-7"))
            #expect(Identifier.timestamp(of: id) == time)
        }
    }

    @Test("the default time is now")
    func defaultTime() throws {
        let before = Timestamp.now()
        let id = Identifier.generate()
        let after = Timestamp.now()
        let time = try #require(Identifier.timestamp(of: id))
        #expect(before <= time && time <= after)
    }

    @Test("ids of later milliseconds sort after earlier ones, as text")
    func orderedAcrossMilliseconds() throws {
        var time = try #require(Timestamp(rfc3339: "2030-01-01T00:00:00.000Z"))
        var previous = Identifier.generate(at: time)
        for _ in 0..<500 {
            time = time.adding(milliseconds: 1)
            let id = Identifier.generate(at: time)
            #expect(id > previous)
            previous = id
        }
    }

    @Test("within one millisecond the random bits increase (RFC 9562 section 6.2, method 2)")
    func monotonicWithinMillisecond() {
        // A private generator: the shared one is also used by tests running in parallel at other instants.
        var generator = Identifier.MonotonicRandom()
        var previous = generator.next(at: 42)
        for _ in 0..<10_000 {
            let next = generator.next(at: 42)
            #expect(next.high < 1 << 12 && next.low < 1 << 62)
            #expect((next.high, next.low) > (previous.high, previous.low))
            previous = next
        }
    }

    @Test("ids are unique")
    func unique() {
        let ids = (0..<10_000).map { _ in Identifier.generate() }
        #expect(Set(ids).count == ids.count)
    }

    @Test("instants before 1970 get a zero timestamp field rather than a wrapped one")
    func beforeEpoch() throws {
        let id = Identifier.generate(at: try #require(Timestamp(rfc3339: "1969-07-20T20:17:40Z")))
        #expect(id.hasPrefix("00000000-0000-7"))
    }

    @Test(
        "accepts any canonical UUID",
        arguments: [
            "019ab5ca-8a4b-7d41-9e6f-0a1b2c3d4e5f",
            "123e4567-e89b-12d3-a456-426614174000",  // version 1
            "00000000-0000-0000-0000-000000000000",
            "ffffffff-ffff-ffff-ffff-ffffffffffff",
        ]
    )
    func valid(id: String) {
        #expect(Identifier.isValid(id))
    }

    @Test(
        "rejects anything else",
        arguments: [
            "",
            "019AB5CA-8A4B-7D41-9E6F-0A1B2C3D4E5F",  // uppercase: Herald never hands it out
            "019ab5ca8a4b7d419e6f0a1b2c3d4e5f",  // no hyphens
            "{019ab5ca-8a4b-7d41-9e6f-0a1b2c3d4e5f}",
            "019ab5ca-8a4b-7d41-9e6f-0a1b2c3d4e5",  // 35 characters
            "019ab5ca-8a4b-7d41-9e6f-0a1b2c3d4e5f0",  // 37 characters
            "019ab5ca-8a4b-7d41-9e6f_0a1b2c3d4e5f",
            "019ab5ca-8a4b-7d41-9e6f-0a1b2c3d4e5g",
            "019ab5ca-8a4b7-d41-9e6f-0a1b2c3d4e5f",  // hyphen misplaced
            "../../../etc/passwd-0000000000000000",
            "019ab5ca-8a4b-7d41-9e6f-0a1b2c3d4é5",  // 36 characters, not 36 bytes
            // Just outside the digits and letters, and a hyphen where a digit belongs.
            "019ab5ca-8a4b-7d41-9e6f-0a1b2c3d4e5:", "/19ab5ca-8a4b-7d41-9e6f-0a1b2c3d4e5f", "019ab5ca-8a4b-7d41-9e6f-0a1b2c3d4e5`",
            "019ab5ca-8a4b-7d41-9e6f-0a1b2c3d4e-f",
        ]
    )
    func invalid(id: String) {
        #expect(!Identifier.isValid(id))
        #expect(Identifier.timestamp(of: id) == nil)
    }

    @Test("timestamp(of:) is only for version 7")
    func timestampOnlyForVersion7() {
        #expect(Identifier.timestamp(of: "123e4567-e89b-12d3-a456-426614174000") == nil)
    }
}
