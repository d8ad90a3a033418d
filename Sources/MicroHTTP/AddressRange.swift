import Platform

/// A block of IP addresses in CIDR notation (`10.0.0.0/8`, `fd00::/8`), or one address (`192.0.2.7`).
public struct AddressRange: Sendable, Hashable, CustomStringConvertible {
    /// The network's bytes: 4 for IPv4, 16 for IPv6.
    private let network: [UInt8]
    private let prefixLength: Int

    /// Parses `text`; nil unless it is an IPv4 or IPv6 address with an optional `/prefix` in range.
    public init?(_ text: String) {
        let parts = text.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard let address = Self.bytes(of: String(parts[0])) else { return nil }
        let length: Int
        if parts.count == 2 {
            guard parts[1].utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }), let value = Int(parts[1]),
                value <= address.count * 8
            else { return nil }
            length = value
        } else {
            length = address.count * 8
        }
        // The host bits are cleared, so `10.1.2.3/8` means `10.0.0.0/8`.
        network = Self.masked(address, to: length)
        prefixLength = length
    }

    /// Whether `address` (IPv4 or IPv6 text; an IPv4-mapped IPv6 address counts as IPv4) lies in the range.
    public func contains(_ address: String) -> Bool {
        guard let bytes = Self.bytes(of: address), bytes.count == network.count else { return false }
        return Self.masked(bytes, to: prefixLength) == network
    }

    public var description: String {
        let family = network.count == 4 ? AF_INET : AF_INET6
        let text = withUnsafeTemporaryAllocation(of: CChar.self, capacity: Int(INET6_ADDRSTRLEN)) { buffer in
            network.withUnsafeBytes { raw in
                inet_ntop(family, raw.baseAddress, buffer.baseAddress, socklen_t(buffer.count)).map { String(cString: $0) } ?? "?"
            }
        }
        return "\(text)/\(prefixLength)"
    }

    /// Whether `address` is a valid IPv4 or IPv6 address.
    public static func isAddress(_ address: String) -> Bool { bytes(of: address) != nil }

    /// An address's bytes, IPv4-mapped IPv6 (`::ffff:a.b.c.d`) as IPv4.
    static func bytes(of text: String) -> [UInt8]? {
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 { return withUnsafeBytes(of: &v4) { Array($0) } }
        var v6 = in6_addr()
        guard inet_pton(AF_INET6, text, &v6) == 1 else { return nil }
        let bytes = withUnsafeBytes(of: &v6) { Array($0) }
        let mapped: [UInt8] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF]
        return bytes.prefix(12).elementsEqual(mapped) ? Array(bytes.suffix(4)) : bytes
    }

    private static func masked(_ bytes: [UInt8], to length: Int) -> [UInt8] {
        bytes.enumerated().map { index, byte in
            let bits = min(max(length - index * 8, 0), 8)
            return bits == 8 ? byte : byte & ~(UInt8(0xFF) >> bits)
        }
    }
}

/// Which peers are proxies whose `X-Forwarded-For` is believed.
public struct TrustedProxies: Sendable, Hashable {
    public var ranges: [AddressRange]

    public init(_ ranges: [AddressRange] = []) {
        self.ranges = ranges
    }

    /// Whether `address` is one of the proxies.
    public func trusts(_ address: String) -> Bool { ranges.contains { $0.contains(address) } }

    /// The client behind `peer`: `peer` itself unless it is a trusted proxy; else the `X-Forwarded-For` hops are
    /// walked from the right (the one the proxy added) past the other trusted proxies, and the first other hop is
    /// the client. A hop that is not an address ends the walk at the proxy that passed it.
    public func client(peer: String, forwardedFor: [String]) -> String {
        guard !ranges.isEmpty, trusts(peer), !forwardedFor.isEmpty else { return peer }
        var client = peer
        for field in forwardedFor.reversed() {
            for hop in field.split(separator: ",").reversed() {
                // An address holds no blanks: dropping them all is trimming the hop.
                let address = String(hop.filter { $0 != " " && $0 != "\t" })
                guard AddressRange.isAddress(address) else { return client }
                client = address
                if !trusts(address) { return client }
            }
        }
        return client
    }
}
