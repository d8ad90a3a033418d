/// `bytes` with their `%XX` escapes decoded, as libmicrohttpd's `MHD_http_unescape` does, and how many `%` began no
/// escape (those are kept as they are).
public func percentDecoded(_ bytes: some Collection<UInt8>) -> (bytes: [UInt8], malformed: Int) {
    let bytes = Array(bytes)
    var decoded: [UInt8] = []
    var malformed = 0
    var index = 0
    while index < bytes.count {
        if bytes[index] == UInt8(ascii: "%") {
            if index + 2 < bytes.count, let high = hexValue(bytes[index + 1]), let low = hexValue(bytes[index + 2]) {
                decoded.append(high << 4 | low)
                index += 3
                continue
            }
            malformed += 1
        }
        decoded.append(bytes[index])
        index += 1
    }
    return (decoded, malformed)
}

/// `%XX` for every byte.
public func percentEncodedAll(_ bytes: some Sequence<UInt8>) -> [UInt8] {
    bytes.flatMap { byte in [UInt8(ascii: "%"), hexDigit(byte >> 4), hexDigit(byte & 0xF)] }
}

private func hexValue(_ byte: UInt8) -> UInt8? {
    switch byte {
    case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
    case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
    case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
    default: nil
    }
}

private func hexDigit(_ nibble: UInt8) -> UInt8 {
    nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "A") + nibble - 10
}
