#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The opaque `cursor` of a list: the `(created_at, id)` of the last item of the previous page.
///
/// Lists are ordered by `created_at DESC, id DESC`, so the next page is the rows strictly before this pair.
/// Clients see base64url (no padding) of `<created_at>|<id>`: opaque, URL-safe, and checkable on the way in.
public struct Cursor: Sendable, Hashable, Codable {
    /// The `created_at` of the last item already seen.
    public var createdAt: Timestamp
    /// The id of the last item already seen.
    public var id: String

    /// A cursor positioned after the item created at `createdAt` with `id`.
    public init(createdAt: Timestamp, id: String) {
        self.createdAt = createdAt
        self.id = id
    }

    /// Decodes a client's cursor; nil when it is not exactly one Herald hands out (the API answers 400).
    ///
    /// Only the canonical spelling passes (no padding, no stray bits, the fixed-width timestamp, a UUID-shaped
    /// id), so one position has one cursor and nothing odd reaches the SQL.
    public init?(encoded: String) {
        // Real cursors are 82 characters; refuse to decode a huge query value only to reject it afterwards.
        guard encoded.utf8.count <= 256, let bytes = Base64URL.decode(encoded), let text = String(validating: bytes, as: UTF8.self) else {
            return nil
        }
        let parts = text.split(separator: "|", omittingEmptySubsequences: false)
        guard parts.count == 2, let createdAt = Timestamp(rfc3339: String(parts[0])),
            createdAt.rfc3339 == parts[0], Identifier.isValid(String(parts[1]))
        else { return nil }
        self.init(createdAt: createdAt, id: String(parts[1]))
    }

    /// The opaque string given to clients as `next_cursor`.
    public var encoded: String {
        Base64URL.encode(Array("\(createdAt.rfc3339)|\(id)".utf8))
    }

    /// Decodes the ``encoded`` string, failing for a malformed one.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let text = try container.decode(String.self)
        guard let cursor = Cursor(encoded: text) else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "Not a list cursor: \(text)")
        }
        self = cursor
    }

    /// Encodes the ``encoded`` string.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(encoded)
    }
}

/// Unpadded base64url (RFC 4648 section 5) through Foundation's base64, strict on input.
enum Base64URL {
    static func encode(_ bytes: [UInt8]) -> String {
        var text = Data(bytes).base64EncodedString()
        text.replace("+", with: "-")
        text.replace("/", with: "_")
        text.removeAll { $0 == "=" }
        return text
    }

    /// The bytes of `text`, or nil unless it is the canonical unpadded base64url of them.
    ///
    /// Foundation's decoder is lenient where a cursor must not be (stray trailing bits, say); encoding the
    /// result again and comparing refuses every other spelling of the same bytes: padding, the standard
    /// alphabet's `+` and `/`, nonzero unused bits. So each position has exactly one cursor.
    static func decode(_ text: String) -> [UInt8]? {
        // A lone character past a group of four cannot encode a byte.
        guard text.utf8.count % 4 != 1 else { return nil }
        var standard = text
        standard.replace("-", with: "+")
        standard.replace("_", with: "/")
        standard += String(repeating: "=", count: (4 - text.utf8.count % 4) % 4)
        guard let data = Data(base64Encoded: standard) else { return nil }
        let bytes = [UInt8](data)
        return encode(bytes) == text ? bytes : nil
    }
}
