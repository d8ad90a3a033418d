import CMicroHTTPD

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

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

    /// The numeric host of a peer address, e.g. `127.0.0.1` or `::1`.
    static func describe(_ address: UnsafePointer<sockaddr>) -> String? {
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        let family = Int32(address.pointee.sa_family)
        let ok: UnsafePointer<CChar>? = UnsafeRawPointer(address).withMemoryRebound(to: UInt8.self, capacity: 1) { _ in
            switch family {
            case AF_INET:
                var copy = UnsafeRawPointer(address).load(as: sockaddr_in.self).sin_addr
                return inet_ntop(AF_INET, &copy, &buffer, socklen_t(buffer.count))
            case AF_INET6:
                var copy = UnsafeRawPointer(address).load(as: sockaddr_in6.self).sin6_addr
                return inet_ntop(AF_INET6, &copy, &buffer, socklen_t(buffer.count))
            default:
                return nil
            }
        }
        guard ok != nil else { return nil }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

/// A client's address, copied from libmicrohttpd and formatted only when someone asks.
struct PeerAddress: Sendable {
    private var storage = sockaddr_storage()

    init?(_ address: UnsafePointer<sockaddr>?) {
        guard let address else { return nil }
        let length = address.pointee.sa_family == sa_family_t(AF_INET6) ? MemoryLayout<sockaddr_in6>.size : MemoryLayout<sockaddr_in>.size
        withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: UnsafeRawBufferPointer(start: address, count: length)) }
    }

    var numericHost: String? {
        withUnsafeBytes(of: storage) { SocketAddress.describe($0.baseAddress!.assumingMemoryBound(to: sockaddr.self)) }
    }
}
