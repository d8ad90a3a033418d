import Foundation
import HeraldCore
import Testing

@Suite("Cursor and list queries")
struct CursorTests {
    static let id = "01a202c0-f64b-7d41-9e6f-0a1b2c3d4e5f"

    /// Unpadded base64url of `text`, written with Foundation's standard base64 as an independent encoder.
    static func base64URL(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    @Test("round-trips through its URL-safe encoding")
    func roundTrip() throws {
        let cursor = Cursor(createdAt: try #require(Timestamp(rfc3339: "2026-11-22T10:15:30.123Z")), id: Self.id)
        let encoded = cursor.encoded
        #expect(encoded == Self.base64URL(Array("2026-11-22T10:15:30.123Z|\(Self.id)".utf8)))
        #expect(encoded.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") })
        #expect(Cursor(encoded: encoded) == cursor)
    }

    @Test("base64url round-trips for every length of padding")
    func encodingLengths() throws {
        // Ids of different lengths are not valid, so vary the timestamp instead: always 24 + 1 + 36 = 61 bytes;
        // the Foundation comparison below covers the other remainders of the encoder itself.
        var random = SystemRandomNumberGenerator()
        for _ in 0..<200 {
            let time = Timestamp(millisecondsSinceEpoch: Int64.random(in: 0...4_000_000_000_000, using: &random))
            let cursor = Cursor(createdAt: time, id: Identifier.generate(at: time))
            #expect(cursor.encoded == Self.base64URL(Array("\(time.rfc3339)|\(cursor.id)".utf8)))
            #expect(Cursor(encoded: cursor.encoded) == cursor)
        }
    }

    @Test(
        "rejects malformed cursors",
        arguments: [
            "",
            "!!!!",
            "a",  // a lone character cannot hold a byte
            base64URL(Array("2026-11-22T10:15:30.123Z|\(id)".utf8)) + "=",  // padding
            "+" + base64URL(Array("2026-11-22T10:15:30.123Z|\(id)".utf8)).dropFirst(),  // standard alphabet's "+"
            base64URL(Array("2026-11-22T10:15:30.123Z|\(id)".utf8)).dropLast() + "/",  // and its "/"
            base64URL(Array("2026-11-22T10:15:30.123Z\(id)".utf8)),  // no separator
            base64URL(Array("2026-11-22T10:15:30.123Z|\(id)|x".utf8)),  // two separators
            base64URL(Array("2026-11-22T10:15:30Z|\(id)".utf8)),  // a valid time, but not the canonical spelling
            base64URL(Array("2026-11-22T12:15:30.123+02:00|\(id)".utf8)),
            base64URL(Array("2026-02-30T10:15:30.123Z|\(id)".utf8)),
            base64URL(Array("2026-11-22T10:15:30.123Z|not-an-id".utf8)),
            base64URL(Array("2026-11-22T10:15:30.123Z|\(id.uppercased())".utf8)),
            base64URL(Array("2026-11-22T10:15:30.123Z|".utf8)),
            base64URL(Array("|\(id)".utf8)),
            base64URL([0xFF, 0xFE, 0x7C, 0x00]),  // not UTF-8
            String(repeating: "A", count: 400),  // far too long
            "QQ",  // "A" with zero trailing bits is fine in itself...
            "QR",  // ...but not with stray trailing bits
        ]
    )
    func rejects(encoded: String) {
        #expect(Cursor(encoded: encoded) == nil)
    }

    @Test("a cursor with stray trailing bits is rejected even when the rest decodes")
    func strayBits() throws {
        let cursor = Cursor(createdAt: try #require(Timestamp(rfc3339: "2026-11-22T10:15:30.123Z")), id: Self.id)
        // 61 bytes encode to 82 characters; the last one carries 2 unused bits.
        var characters = Array(cursor.encoded)
        #expect(characters.count == 82)
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        let last = try #require(alphabet.firstIndex(of: characters[81]))
        characters[81] = alphabet[last | 1]
        #expect(Cursor(encoded: String(characters)) == nil)
    }

    @Test("Codable as the encoded string")
    func codable() throws {
        let cursor = Cursor(createdAt: Timestamp(millisecondsSinceEpoch: 0), id: Self.id)
        let json = try JSONEncoder().encode([cursor])
        #expect(String(decoding: json, as: UTF8.self) == "[\"\(cursor.encoded)\"]")
        #expect(try JSONDecoder().decode([Cursor].self, from: json) == [cursor])
        #expect(throws: DecodingError.self) { try JSONDecoder().decode([Cursor].self, from: Data(#"["nope"]"#.utf8)) }
    }

    @Test("a page made from limit + 1 rows has a cursor to its last row; from fewer, none")
    func pageFromFetchedRows() throws {
        let base = try #require(Timestamp(rfc3339: "2026-11-22T10:00:00.000Z"))
        let rows = (0..<21).map { Cursor(createdAt: base.adding(milliseconds: Int64(-$0)), id: Self.id) }

        let full = Page(fetched: rows, limit: 20, cursor: { $0 })
        #expect(full.data == Array(rows.prefix(20)))
        #expect(full.nextCursor == rows[19])

        let last = Page(fetched: Array(rows.prefix(20)), limit: 20, cursor: { $0 })
        #expect(last.data.count == 20)
        #expect(last.nextCursor == nil)

        let empty = Page(fetched: [Cursor](), limit: 20, cursor: { $0 })
        #expect(empty.data.isEmpty && empty.nextCursor == nil)
    }

    @Test("limit defaults to 20 and accepts 1...100", arguments: [(nil, 20), ("1", 1), ("20", 20), ("100", 100), ("007", 7)] as [(String?, Int)])
    func limit(raw: String?, expected: Int) {
        #expect(ListQuery.limit(raw) == expected)
    }

    @Test(
        "limit rejects anything else",
        arguments: ["", "0", "101", "-1", "+5", " 5", "5 ", "5.0", "abc", "1e2", "٥", "99999999999999999999999"]
    )
    func badLimit(raw: String) {
        #expect(ListQuery.limit(raw) == nil)
    }
}
