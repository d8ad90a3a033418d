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

/// Unpadded base64url (RFC 4648 section 5), the URL-safe alphabet, strict on input.
enum Base64URL {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    static func encode(_ bytes: [UInt8]) -> String {
        var output: [UInt8] = []
        output.reserveCapacity((bytes.count * 4 + 2) / 3)
        var index = 0
        while index < bytes.count {
            let count = min(3, bytes.count - index)
            var group: UInt32 = 0
            for offset in 0..<3 {
                group = group << 8 | UInt32(offset < count ? bytes[index + offset] : 0)
            }
            // 1 byte makes 2 characters, 2 make 3, 3 make 4.
            for position in 0...count {
                output.append(alphabet[Int(group >> (18 - 6 * UInt32(position)) & 0x3F)])
            }
            index += 3
        }
        return String(decoding: output, as: UTF8.self)
    }

    /// The bytes of `text`, or nil unless it is canonical unpadded base64url (unused trailing bits zero).
    static func decode(_ text: String) -> [UInt8]? {
        let characters = Array(text.utf8)
        // A lone character cannot encode a byte.
        guard characters.count % 4 != 1 else { return nil }
        var output: [UInt8] = []
        output.reserveCapacity(characters.count * 3 / 4)
        var index = 0
        while index < characters.count {
            let count = min(4, characters.count - index)
            var group: UInt32 = 0
            for offset in 0..<4 {
                var value: UInt32 = 0
                if offset < count {
                    guard let decoded = sextet(characters[index + offset]) else { return nil }
                    value = decoded
                }
                group = group << 6 | value
            }
            let byteCount = count - 1
            for position in 0..<byteCount {
                output.append(UInt8(truncatingIfNeeded: group >> (16 - 8 * UInt32(position))))
            }
            // Bits past the last whole byte must be zero, so each byte string has exactly one spelling.
            let unusedBits = UInt32(24 - 8 * byteCount)
            guard group & ((1 << unusedBits) - 1) == 0 else { return nil }
            index += 4
        }
        return output
    }

    private static func sextet(_ character: UInt8) -> UInt32? {
        switch character {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"): UInt32(character - UInt8(ascii: "A"))
        case UInt8(ascii: "a")...UInt8(ascii: "z"): UInt32(character - UInt8(ascii: "a")) + 26
        case UInt8(ascii: "0")...UInt8(ascii: "9"): UInt32(character - UInt8(ascii: "0")) + 52
        case UInt8(ascii: "-"): 62
        case UInt8(ascii: "_"): 63
        default: nil
        }
    }
}
