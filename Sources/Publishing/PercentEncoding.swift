import HeraldCore

/// The bytes a URL component may hold as they are; ``percentEncoded(_:keeping:)`` encodes every other byte.
struct PercentEncodingSet: Sendable {
    /// Which of the 128 ASCII bytes are kept; bytes past ASCII are always encoded.
    private let kept: [Bool]

    /// RFC 3986's unreserved characters (`A-Z a-z 0-9 - . _ ~`) and the ASCII characters of `others`.
    init(unreservedAnd others: String) {
        var kept = [Bool](repeating: false, count: 128)
        for byte in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~".utf8 { kept[Int(byte)] = true }
        for byte in others.utf8 {
            precondition(byte < 128, "only ASCII characters can be kept")
            kept[Int(byte)] = true
        }
        self.kept = kept
    }

    func keeps(_ byte: UInt8) -> Bool {
        byte < 128 && kept[Int(byte)]
    }

    /// The unreserved characters only: what AWS Signature Version 4 leaves unencoded in paths and queries.
    static let unreserved = PercentEncodingSet(unreservedAnd: "")

    /// A path: RFC 3986's `pchar` (unreserved, sub-delims, `:` and `@`) and `/`, for `file://` URLs.
    static let path = PercentEncodingSet(unreservedAnd: "!$&'()*+,;=:@/")
}

/// RFC 3986 percent-encoding of the UTF-8 of `text`: every byte outside `allowed` becomes `%XX` (upper-case hex).
func percentEncoded(_ text: some StringProtocol, keeping allowed: PercentEncodingSet) -> String {
    var encoded: [UInt8] = []
    encoded.reserveCapacity(text.utf8.count)
    for byte in text.utf8 {
        if allowed.keeps(byte) {
            encoded.append(byte)
        } else {
            let (high, low) = Hex.digits(of: byte, uppercase: true)
            encoded.append(UInt8(ascii: "%"))
            encoded.append(high)
            encoded.append(low)
        }
    }
    return String(decoding: encoded, as: UTF8.self)
}
