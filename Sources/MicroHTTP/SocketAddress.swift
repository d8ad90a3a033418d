import CMicroHTTPD
import Platform

/// An IPv4 or IPv6 socket address for binding.
struct SocketAddress {
    private var storage = sockaddr_storage()
    let isIPv6: Bool

    /// Resolves `host` (a literal or a name) and sets `port`.
    init(host: String, port: Int) throws {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_PASSIVE
        var result: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, nil, &hints, &result) == 0, let first = result else {
            throw ServerError.addressNotResolved(host)
        }
        defer { freeaddrinfo(result) }
        let family = first.pointee.ai_family
        guard family == AF_INET || family == AF_INET6, let address = first.pointee.ai_addr else {
            throw ServerError.addressNotResolved(host)
        }
        isIPv6 = family == AF_INET6
        withUnsafeMutableBytes(of: &storage) { target in
            target.copyMemory(from: UnsafeRawBufferPointer(start: address, count: Int(first.pointee.ai_addrlen)))
        }
        withUnsafeMutableBytes(of: &storage) { target in
            if isIPv6 {
                target.baseAddress!.assumingMemoryBound(to: sockaddr_in6.self).pointee.sin6_port = in_port_t(UInt16(port).bigEndian)
            } else {
                target.baseAddress!.assumingMemoryBound(to: sockaddr_in.self).pointee.sin_port = in_port_t(UInt16(port).bigEndian)
            }
        }
    }

    mutating func withSockaddr<R>(_ body: (UnsafePointer<sockaddr>) -> R) -> R {
        withUnsafePointer(to: &storage) { body(UnsafeRawPointer($0).assumingMemoryBound(to: sockaddr.self)) }
    }

    /// The numeric host of a peer address, e.g. `127.0.0.1` or `::1`, formatted on the stack.
    static func describe(_ address: UnsafePointer<sockaddr>) -> String? {
        withUnsafeTemporaryAllocation(of: CChar.self, capacity: Int(INET6_ADDRSTRLEN)) { buffer -> String? in
            let raw = UnsafeRawPointer(address)
            let formatted: UnsafePointer<CChar>?
            switch Int32(address.pointee.sa_family) {
            case AF_INET:
                formatted = inet_ntop(AF_INET, raw + MemoryLayout<sockaddr_in>.offset(of: \.sin_addr)!, buffer.baseAddress, socklen_t(buffer.count))
            case AF_INET6:
                formatted = inet_ntop(
                    AF_INET6, raw + MemoryLayout<sockaddr_in6>.offset(of: \.sin6_addr)!, buffer.baseAddress, socklen_t(buffer.count))
            default:
                formatted = nil
            }
            return formatted.map { String(cString: $0) }
        }
    }
}
