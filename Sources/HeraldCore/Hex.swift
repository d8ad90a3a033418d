/// Hexadecimal text of bytes: the one encoder for digests, signatures, ids and escapes.
public enum Hex {
    private static let lowercase: StaticString = "0123456789abcdef"
    private static let uppercase: StaticString = "0123456789ABCDEF"

    /// `bytes` as hex, two digits a byte, lowercase (as SHA-256 digests and UUIDs are written).
    public static func encode(_ bytes: some Sequence<UInt8>) -> String {
        var text: [UInt8] = []
        text.reserveCapacity(bytes.underestimatedCount * 2)
        for byte in bytes {
            let (high, low) = digits(of: byte)
            text.append(high)
            text.append(low)
        }
        return String(decoding: text, as: UTF8.self)
    }

    /// The two ASCII hex digits of `byte`, lowercase unless `uppercase` (as RFC 3986 percent-encoding prefers).
    public static func digits(of byte: UInt8, uppercase: Bool = false) -> (high: UInt8, low: UInt8) {
        let table = uppercase ? Self.uppercase : Self.lowercase
        return (table.utf8Start[Int(byte >> 4)], table.utf8Start[Int(byte & 0x0F)])
    }
}

extension Sequence<UInt8> {
    /// The bytes as lowercase hex, two digits a byte.
    public var hexString: String { Hex.encode(self) }
}
