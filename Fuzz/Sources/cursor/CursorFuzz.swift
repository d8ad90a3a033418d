import FuzzSupport

@testable import HeraldCore

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Fuzzes `Cursor(encoded:)` with a query value, or with fuzzed `<created_at>|<id>` text in base64url; checks that a cursor
/// that parses was spelled canonically and round-trips through `encoded` and JSON.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    var input = FuzzInput(start, count)
    let encoded: String
    if input.byte() & 1 == 0 {
        // As a query value reaches a handler: decoded leniently (see MicroHTTP's `collectArgument`).
        encoded = String(decoding: input.rest(), as: UTF8.self)
    } else {
        let text = Array(input.rest())
        encoded = Base64URL.encode(text)
        check(Base64URL.decode(encoded) == text, "base64url does not round-trip \(shown(text))")
        // The timestamp half, parsed on its own: what it reads must print as something that reads back the same.
        if let bar = text.firstIndex(of: UInt8(ascii: "|")), let timestamp = Timestamp(rfc3339: String(decoding: text[..<bar], as: UTF8.self)) {
            check(Timestamp(rfc3339: timestamp.rfc3339) == timestamp, "\(timestamp.rfc3339) does not read back as itself")
        }
    }
    if let bytes = Base64URL.decode(encoded) {
        check(Base64URL.encode(bytes) == encoded, "\(encoded) decodes but is not the canonical spelling of its bytes")
    }

    guard let cursor = Cursor(encoded: encoded) else { return 0 }
    check(cursor.encoded == encoded, "\(shown(encoded.utf8)) parses but re-encodes as \(cursor.encoded)")
    check(Cursor(encoded: cursor.encoded) == cursor, "\(cursor.encoded) does not parse back to the same cursor")
    check(Identifier.isValid(cursor.id), "cursor id \(shown(cursor.id.utf8)) is not a valid id")
    check(Timestamp(rfc3339: cursor.createdAt.rfc3339) == cursor.createdAt, "\(cursor.createdAt.rfc3339) does not read back as itself")
    do {
        let json = try JSONEncoder().encode(cursor)
        let decoded = try JSONDecoder().decode(Cursor.self, from: json)
        check(decoded == cursor, "\(encoded) does not survive its JSON form")
    } catch {
        fatalError("property violated: \(encoded) fails its JSON round trip: \(error)")
    }
    return 0
}
