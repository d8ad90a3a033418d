import FuzzSupport
import HeraldCore

/// Fuzzes `IdempotencyKey.parse` with any header value; checks it against the rule as openapi.yaml's pattern states it
/// (1 to 255 visible ASCII characters, one pair of surrounding quotes removed, `""` no key), and that the quoted and
/// unquoted spellings of a key read the same.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    let bytes = Array(UnsafeRawBufferPointer(start: start, count: count))
    let value = String(decoding: bytes, as: UTF8.self)
    let key = IdempotencyKey.parse(value)

    // The rule, written out again from the document rather than from the parser.
    let utf8 = Array(value.utf8)
    let visible = { (bytes: ArraySlice<UInt8>) in bytes.allSatisfy { (0x21...0x7E).contains($0) } }
    let quoted = utf8.count >= 2 && utf8.first == UInt8(ascii: "\"") && utf8.last == UInt8(ascii: "\"")
    let inner = quoted ? utf8[1..<(utf8.count - 1)] : utf8[...]
    let expected = (1...255).contains(inner.count) && visible(inner) ? String(decoding: inner, as: UTF8.self) : nil
    check(key == expected, "\(shown(bytes)) reads as \(key.map { shown($0.utf8) } ?? "no key"), the rule says \(expected.map { shown($0.utf8) } ?? "no key")")

    if let key {
        check(IdempotencyKey.parse("\"" + key + "\"") == key, "the quoted spelling of \(shown(key.utf8)) reads differently")
    }
    return 0
}
