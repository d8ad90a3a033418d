import FuzzSupport
import HeraldCore

/// Fuzzes `MediaType.matches(signature:)` and `MediaType(contentType:)` with the same bytes; checks that a match depends on
/// the first `signatureLength` bytes only, and that parameters, blanks and ASCII case leave a content type's reading alone.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    let bytes = Array(UnsafeRawBufferPointer(start: start, count: count))

    for type in MediaType.allCases {
        let matches = type.matches(signature: bytes)
        check(type.matches(signature: bytes.prefix(MediaType.signatureLength)) == matches, "\(type) looks past the signature of \(shown(bytes))")
        check(type.matches(signature: bytes.lazy.map { $0 }) == matches, "\(type) reads a lazy collection differently: \(shown(bytes))")
        check(type.matches(signature: bytes[...]) == matches, "\(type) reads a slice differently: \(shown(bytes))")
        for length in 0..<min(bytes.count, MediaType.signatureLength) where type.matches(signature: bytes.prefix(length)) {
            check(matches, "\(type) matches the first \(length) bytes of \(shown(bytes)) but not all of them")
        }
    }

    let contentType = String(decoding: bytes, as: UTF8.self)
    let type = MediaType(contentType: contentType)
    if let type { check(!type.fileExtension.isEmpty, "\(type) has no file extension") }
    check(MediaType(contentType: contentType + "; charset=binary") == type, "a parameter changes how \(shown(bytes)) reads")
    check(MediaType(contentType: " \t" + contentType + "\t ") == type, "blanks around \(shown(bytes)) change how it reads")
    let flipped = String(decoding: bytes.map { flipCase($0) }, as: UTF8.self)
    check(MediaType(contentType: flipped) == type, "ASCII case changes how \(shown(bytes)) reads")
    return 0
}

/// An ASCII letter in the other case; every other byte (UTF-8 sequences included) as it is.
private func flipCase(_ byte: UInt8) -> UInt8 {
    switch byte {
    case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"): byte ^ 0x20
    default: byte
    }
}
