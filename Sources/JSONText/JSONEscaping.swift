/// How a JSON string's bytes are written (RFC 8259, section 7): the one rule for every JSON text Herald writes by hand
/// (`JSONWriter`'s responses, the access log's lines, problem documents), so that they all escape alike.
///
/// `"` and `\` get a backslash; the control characters with a short form get it (`\n`, `\r`, `\t`, `\b`, `\f`); the
/// other control characters are `\u00XX` with lower-case hex; every other byte (UTF-8 beyond ASCII included) is as is.
public enum JSONEscaping {
    /// Whether `byte` must be escaped inside a JSON string.
    @inlinable
    public static func needsEscape(_ byte: UInt8) -> Bool {
        byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\")
    }

    /// Hands `put` the bytes that stand for `byte` inside a JSON string: the byte itself, or its escape.
    @inlinable
    public static func escape(_ byte: UInt8, _ put: (UInt8) -> Void) {
        let short: UInt8
        switch byte {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"): short = byte
        case 0x0A: short = UInt8(ascii: "n")
        case 0x0D: short = UInt8(ascii: "r")
        case 0x09: short = UInt8(ascii: "t")
        case 0x08: short = UInt8(ascii: "b")
        case 0x0C: short = UInt8(ascii: "f")
        case 0..<0x20:
            for character in "\\u00".utf8 { put(character) }
            put(hexDigit(byte >> 4))
            put(hexDigit(byte & 0x0F))
            return
        default:
            put(byte)
            return
        }
        put(UInt8(ascii: "\\"))
        put(short)
    }

    /// Appends `utf8` to `bytes` as a JSON string literal, quotes included.
    @inlinable
    public static func appendString<Bytes: Sequence<UInt8>>(_ utf8: Bytes, to bytes: inout [UInt8]) {
        bytes.append(UInt8(ascii: "\""))
        for byte in utf8 {
            if needsEscape(byte) {
                escape(byte) { bytes.append($0) }
            } else {
                bytes.append(byte)
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }

    @inlinable
    static func hexDigit(_ value: UInt8) -> UInt8 {
        value < 10 ? UInt8(ascii: "0") + value : UInt8(ascii: "a") + value - 10
    }
}
