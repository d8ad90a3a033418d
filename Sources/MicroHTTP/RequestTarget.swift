/// Why a request target's path is refused before routing (400).
///
/// libmicrohttpd percent-decodes the path in place and hands it over as a C string, so what it gives cannot
/// show the problem: an encoded NUL cuts the path short (`/v1/jobs/%00x` would route as `/v1/jobs/`), an encoded
/// `/` would split a segment, and dot segments would reach the router as names. The raw target is seen only by
/// `MHD_OPTION_URI_LOG_CALLBACK`, once per request, before decoding; what that callback returns becomes the
/// request's slot for the first access call. So the check runs there and returns a problem as a small marker
/// pointer (`nil` for a sound path): no allocation, and nothing to free.
enum TargetProblem: Int {
    case malformedEscape = 1
    case controlByte
    case encodedSlash
    case invalidUTF8
    case dotSegment

    /// The problem document's detail.
    var detail: String {
        switch self {
        case .malformedEscape: "the path has a malformed percent-escape"
        case .controlByte: "the path holds a NUL or another control byte"
        case .encodedSlash: "the path holds an encoded '/'"
        case .invalidUTF8: "the path is not valid UTF-8 once decoded"
        case .dotSegment: "the path holds a '.' or '..' segment"
        }
    }

    /// The problem as the slot's value: an address no allocation returns (small, not aligned).
    var marker: UnsafeMutableRawPointer { UnsafeMutableRawPointer(bitPattern: rawValue)! }

    /// The problem a slot's value stands for, or `nil` when it is a real object.
    init?(marker: UnsafeMutableRawPointer) {
        self.init(rawValue: Int(bitPattern: marker))
    }

    /// The problem with the path of raw request target `uri` (up to `?`), or `nil` when there is none.
    ///
    /// Refused: malformed escapes; decoded NUL, other control bytes and DEL; an encoded `/`; bytes that are not
    /// UTF-8 once decoded (overlong forms such as `%C0%AF` included); `.` and `..` segments, encoded or not.
    static func find(in uri: UnsafePointer<CChar>) -> TargetProblem? {
        var utf8 = UTF8Check()
        var index = 0
        // The current segment's decoded length, and how many of its bytes are dots.
        var length = 0
        var dots = 0
        while true {
            var byte = UInt8(bitPattern: uri[index])
            if byte == 0 || byte == UInt8(ascii: "?") { break }
            index += 1
            // Most of a path: a byte from `0` to `~` (digits, letters, most punctuation) or `-`, outside a multi-byte
            // character, which nothing below refuses.
            if byte &- 0x30 < 0x4F || byte == UInt8(ascii: "-"), utf8.isComplete {
                length += 1
                continue
            }
            if byte == UInt8(ascii: "/") {
                if length > 0, length <= 2, dots == length { return .dotSegment }
                length = 0
                dots = 0
                guard utf8.accept(byte) else { return .invalidUTF8 }
                continue
            }
            if byte == UInt8(ascii: "%") {
                // A NUL ends the string: `hex` refuses it before anything past it is read.
                guard let high = hex(uri[index]), let low = hex(uri[index + 1]) else { return .malformedEscape }
                index += 2
                byte = high << 4 | low
                if byte == UInt8(ascii: "/") { return .encodedSlash }
            }
            if byte < 0x20 || byte == 0x7F { return .controlByte }
            guard utf8.accept(byte) else { return .invalidUTF8 }
            length += 1
            if byte == UInt8(ascii: ".") { dots += 1 }
        }
        if length > 0, length <= 2, dots == length { return .dotSegment }
        return utf8.isComplete ? nil : .invalidUTF8
    }

    private static func hex(_ character: CChar) -> UInt8? {
        let byte = UInt8(bitPattern: character)
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return byte - UInt8(ascii: "A") + 10
        default: return nil
        }
    }
}

/// Checks UTF-8 a byte at a time (RFC 3629 table 2: no overlong forms, no surrogates, nothing past U+10FFFF).
private struct UTF8Check {
    /// Continuation bytes still expected, and the range the next one must fall in.
    private var needed = 0
    private var lower: UInt8 = 0x80
    private var upper: UInt8 = 0xBF

    var isComplete: Bool { needed == 0 }

    mutating func accept(_ byte: UInt8) -> Bool {
        if needed > 0 {
            guard byte >= lower, byte <= upper else { return false }
            needed -= 1
            lower = 0x80
            upper = 0xBF
            return true
        }
        switch byte {
        case 0x00...0x7F: return true
        case 0xC2...0xDF: needed = 1
        case 0xE0: (needed, lower) = (2, 0xA0)
        case 0xE1...0xEC, 0xEE...0xEF: needed = 2
        case 0xED: (needed, upper) = (2, 0x9F)
        case 0xF0: (needed, lower) = (3, 0x90)
        case 0xF1...0xF3: needed = 3
        case 0xF4: (needed, upper) = (3, 0x8F)
        default: return false
        }
        return true
    }
}
