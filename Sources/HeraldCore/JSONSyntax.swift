/// Checks that bytes are one JSON text exactly as RFC 8259 defines it.
///
/// Foundation's `JSONDecoder` also takes what the standard does not (a trailing comma, for one); a body that another
/// JSON parser would refuse must not publish a post, so a request body is checked here first.
public enum JSONSyntax {
    /// How deeply arrays and objects may nest: far beyond any post, and a bound on the checker's recursion.
    public static let maxDepth = 128

    /// Nil when `bytes` is one RFC 8259 JSON text; else what is wrong and where, e.g. `unexpected ']' at byte 11`.
    public static func problem(in bytes: [UInt8]) -> String? {
        guard String(validating: bytes, as: UTF8.self) != nil else { return "it is not UTF-8" }
        var scanner = Scanner(bytes: bytes)
        do throws(SyntaxError) {
            scanner.skipWhitespace()
            try scanner.value(depth: 0)
            scanner.skipWhitespace()
            guard scanner.atEnd else { throw scanner.unexpected() }
            return nil
        } catch {
            return error.description
        }
    }

    private struct SyntaxError: Error, CustomStringConvertible {
        let description: String
    }

    private struct Scanner {
        let bytes: [UInt8]
        var offset = 0

        var atEnd: Bool { offset >= bytes.count }
        var current: UInt8? { atEnd ? nil : bytes[offset] }

        func unexpected() -> SyntaxError {
            guard let byte = current else { return SyntaxError(description: "unexpected end at byte \(offset)") }
            let shown = (0x21...0x7E).contains(byte) ? "'\(Character(Unicode.Scalar(byte)))'" : "byte 0x\(String(byte, radix: 16))"
            return SyntaxError(description: "unexpected \(shown) at byte \(offset)")
        }

        mutating func skipWhitespace() {
            while let byte = current, byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D { offset += 1 }
        }

        mutating func expect(_ byte: UInt8) throws(SyntaxError) {
            guard current == byte else { throw unexpected() }
            offset += 1
        }

        mutating func value(depth: Int) throws(SyntaxError) {
            guard let byte = current else { throw unexpected() }
            switch byte {
            case UInt8(ascii: "{"): try object(depth: depth + 1)
            case UInt8(ascii: "["): try array(depth: depth + 1)
            case UInt8(ascii: "\""): try string()
            case UInt8(ascii: "t"): try literal("true")
            case UInt8(ascii: "f"): try literal("false")
            case UInt8(ascii: "n"): try literal("null")
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): try number()
            default: throw unexpected()
            }
        }

        mutating func object(depth: Int) throws(SyntaxError) {
            try container(open: UInt8(ascii: "{"), close: UInt8(ascii: "}"), depth: depth) { scanner throws(SyntaxError) in
                try scanner.string()
                scanner.skipWhitespace()
                try scanner.expect(UInt8(ascii: ":"))
                scanner.skipWhitespace()
                try scanner.value(depth: depth)
            }
        }

        mutating func array(depth: Int) throws(SyntaxError) {
            try container(open: UInt8(ascii: "["), close: UInt8(ascii: "]"), depth: depth) { scanner throws(SyntaxError) in
                try scanner.value(depth: depth)
            }
        }

        /// `open`, then members separated by commas (none after the last), then `close`.
        mutating func container(
            open: UInt8, close: UInt8, depth: Int, member: (inout Scanner) throws(SyntaxError) -> Void
        ) throws(SyntaxError) {
            guard depth <= JSONSyntax.maxDepth else {
                throw SyntaxError(description: "nested deeper than \(JSONSyntax.maxDepth) at byte \(offset)")
            }
            try expect(open)
            skipWhitespace()
            if current == close {
                offset += 1
                return
            }
            while true {
                skipWhitespace()
                try member(&self)
                skipWhitespace()
                guard current == UInt8(ascii: ",") else { break }
                offset += 1
            }
            try expect(close)
        }

        mutating func string() throws(SyntaxError) {
            try expect(UInt8(ascii: "\""))
            while let byte = current {
                offset += 1
                switch byte {
                case UInt8(ascii: "\""):
                    return
                case UInt8(ascii: "\\"):
                    switch current {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"), UInt8(ascii: "f"), UInt8(ascii: "n"),
                        UInt8(ascii: "r"), UInt8(ascii: "t"):
                        offset += 1
                    case UInt8(ascii: "u"):
                        offset += 1
                        for _ in 0..<4 {
                            guard let digit = current, ASCII.isHexDigit(digit) else { throw unexpected() }
                            offset += 1
                        }
                    default:
                        throw unexpected()
                    }
                case 0x00..<0x20:
                    offset -= 1
                    throw unexpected()
                default:
                    continue
                }
            }
            throw unexpected()
        }

        /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`: no leading zeros, no `+`, no NaN or Infinity.
        mutating func number() throws(SyntaxError) {
            if current == UInt8(ascii: "-") { offset += 1 }
            if current == UInt8(ascii: "0") {
                offset += 1
                if let next = current, ASCII.digitValue(next) != nil { throw unexpected() }
            } else {
                try digits()
            }
            if current == UInt8(ascii: ".") {
                offset += 1
                try digits()
            }
            if current == UInt8(ascii: "e") || current == UInt8(ascii: "E") {
                offset += 1
                if current == UInt8(ascii: "+") || current == UInt8(ascii: "-") { offset += 1 }
                try digits()
            }
        }

        mutating func digits() throws(SyntaxError) {
            guard let first = current, ASCII.digitValue(first) != nil else { throw unexpected() }
            while let byte = current, ASCII.digitValue(byte) != nil { offset += 1 }
        }

        mutating func literal(_ word: String) throws(SyntaxError) {
            for byte in word.utf8 {
                guard current == byte else { throw unexpected() }
                offset += 1
            }
        }
    }
}
