import FuzzSupport
import HeraldCore

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Fuzzes the tus request headers Herald reads (`TusHeaders`): `Upload-Metadata`, `Upload-Offset`/`Upload-Length` and
/// `Upload-Checksum`. Checks that what parses is well-formed and reads back the same once written again, and that an
/// integer is taken exactly when the text is 1 to 18 ASCII digits.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    var input = FuzzInput(start, count)
    let which = input.byte() % 3
    let text = String(decoding: input.rest(), as: UTF8.self)
    switch which {
    case 0:
        guard let pairs = try? TusHeaders.metadata(text) else { return 0 }
        for key in pairs.keys {
            check(!key.isEmpty && key.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: ",") }, "key \(shown(key.utf8))")
        }
        // Written again (as a HEAD answers a completed upload's), in any order: the same pairs.
        let written = TusHeaders.metadataText(pairs.map { (key: $0.key, value: $0.value) })
        check((try? TusHeaders.metadata(written)) == pairs, "\(shown(written.utf8)) does not read back as \(pairs)")
    case 1:
        let digits = text.utf8.allSatisfy { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }
        let value = TusHeaders.integer(text)
        check((value != nil) == (digits && !text.isEmpty && text.utf8.count <= 18), "integer(\(shown(text.utf8))) is \(String(describing: value))")
        if let value {
            check(value >= 0 && TusHeaders.integer(String(value)) == value, "\(value) does not read back")
        }
    default:
        guard let (algorithm, digest) = try? TusHeaders.checksum(text) else { return 0 }
        check(digest.count == algorithm.digestLength, "\(algorithm) with \(digest.count) bytes")
        let written = "\(algorithm.rawValue) \(Data(digest).base64EncodedString())"
        let again = try? TusHeaders.checksum(written)
        check(again?.algorithm == algorithm && again?.digest == digest, "\(written) does not read back")
    }
    return 0
}
