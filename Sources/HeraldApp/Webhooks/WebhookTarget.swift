import Foundation
import MicroHTTP
import NIOPosix
import Platform

/// Where a webhook URL points, resolved and checked: the SSRF guard.
///
/// The host is resolved once per check and every address it has must be allowed; the delivery then connects to the
/// checked address itself (``address``), so a name that resolves to a public address when checked and a private one
/// when connecting (DNS rebinding) cannot slip through.
struct WebhookTarget: Sendable, Equatable {
    /// `http` or `https`.
    var scheme: String
    /// The URL's host, without IPv6 brackets.
    var host: String
    var port: Int
    /// Path and query, at least `/`.
    var path: String
    /// The address the delivery connects to.
    var address: String

    /// `Host`: the host as the URL wrote it, with the port unless it is the scheme's default.
    var authority: String {
        let bracketed = host.contains(":") ? "[\(host)]" : host
        return port == (scheme == "https" ? 443 : 80) ? bracketed : "\(bracketed):\(port)"
    }

    /// The URL to request: the checked address in place of the name for http (the `Host` header keeps the name);
    /// https keeps the name, for its server name and certificate check, and is connected to ``address`` by an override.
    var requestURL: String {
        guard scheme == "http" else { return "https://\(authority)\(path)" }
        let literal = address.contains(":") ? "[\(address)]" : address
        return "http://\(literal):\(port)\(path)"
    }

    /// Why a URL cannot be a webhook's.
    enum Problem: Error, Equatable, CustomStringConvertible {
        /// Not an absolute http(s) URL Herald sends to.
        case invalid(String)
        /// Its host is or resolves to an address Herald refuses.
        case refused(String)
        /// Its host does not resolve now.
        case unresolved(String)

        var description: String {
            switch self {
            case .invalid(let reason), .refused(let reason), .unresolved(let reason): reason
            }
        }
    }

    /// The URL's parts, checked for shape only: absolute http(s), a host, no user info, at most 2048 characters.
    static func parse(_ text: String) throws(Problem) -> (scheme: String, host: String, port: Int, path: String) {
        guard text.utf8.count <= 2048 else { throw .invalid("a URL of at most 2048 characters") }
        guard let components = URLComponents(string: text), let scheme = components.scheme?.lowercased(),
            scheme == "http" || scheme == "https"
        else { throw .invalid("an absolute http or https URL") }
        guard components.user == nil, components.password == nil else { throw .invalid("a URL without user info") }
        guard components.fragment == nil else { throw .invalid("a URL without a fragment") }
        guard var host = components.host, !host.isEmpty else { throw .invalid("a URL with a host") }
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        let port = components.port ?? (scheme == "https" ? 443 : 80)
        guard (1...65535).contains(port) else { throw .invalid("a port from 1 to 65535") }
        let path = components.percentEncodedPath.isEmpty ? "/" : components.percentEncodedPath
        let query = components.percentEncodedQuery.map { "?" + $0 } ?? ""
        return (scheme, host, port, path + query)
    }

    /// Parses `text`, resolves its host and checks every address (unless `allowPrivate`).
    static func resolve(_ text: String, resolver: any HostResolver, allowPrivate: Bool) async throws(Problem) -> WebhookTarget {
        let parts = try parse(text)
        let addresses: [String]
        do {
            addresses = try await resolver.addresses(of: parts.host)
        } catch {
            throw .unresolved("\(parts.host) does not resolve: \(error)")
        }
        guard let first = addresses.first else { throw .unresolved("\(parts.host) does not resolve") }
        if !allowPrivate {
            for address in addresses {
                if let kind = refusedKind(address) {
                    let resolves = address == parts.host ? "is" : "resolves to"
                    throw .refused("\(parts.host) \(resolves) \(address) (\(kind)), which webhooks may not reach")
                }
            }
        }
        return WebhookTarget(scheme: parts.scheme, host: parts.host, port: parts.port, path: parts.path, address: first)
    }

    /// The kind of address webhooks may not reach, or nil for a public one (IPv4-mapped IPv6 counts as IPv4).
    static func refusedKind(_ address: String) -> String? {
        refusedRanges.first { $0.range.contains(address) }?.kind
    }

    private static let refusedRanges: [(range: AddressRange, kind: String)] = [
        ("0.0.0.0/8", "unspecified"), ("127.0.0.0/8", "loopback"), ("10.0.0.0/8", "private"), ("172.16.0.0/12", "private"),
        ("192.168.0.0/16", "private"), ("100.64.0.0/10", "carrier-grade NAT"), ("169.254.0.0/16", "link-local"),
        ("192.0.0.0/24", "IETF protocol assignments"), ("198.18.0.0/15", "benchmarking"), ("224.0.0.0/4", "multicast"),
        ("240.0.0.0/4", "reserved"), ("::/128", "unspecified"), ("::1/128", "loopback"), ("fc00::/7", "private"),
        ("fe80::/10", "link-local"), ("ff00::/8", "multicast"), ("64:ff9b::/96", "NAT64"),
    ].map { (AddressRange($0.0)!, $0.1) }
}

/// Turns a host name into IP addresses: the system's resolver, or a test's.
public protocol HostResolver: Sendable {
    /// The host's addresses as text, in the order to try; an address given as the host is returned as is.
    func addresses(of host: String) async throws -> [String]
}

/// `getaddrinfo`, on NIO's blocking-I/O pool (it blocks for as long as DNS takes).
public struct SystemResolver: HostResolver {
    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    public init() {}

    public func addresses(of host: String) async throws -> [String] {
        if AddressRange.isAddress(host) { return [host] }
        return try await NIOThreadPool.singleton.runIfActive {
            var hints = addrinfo()
            hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
            var list: UnsafeMutablePointer<addrinfo>?
            let code = getaddrinfo(host, nil, &hints, &list)
            guard code == 0 else { throw Failure(description: String(cString: gai_strerror(code))) }
            defer { freeaddrinfo(list) }
            var addresses: [String] = []
            var entry = list
            while let info = entry?.pointee {
                if let text = Self.text(info), !addresses.contains(text) { addresses.append(text) }
                entry = info.ai_next
            }
            return addresses
        }
    }

    private static func text(_ info: addrinfo) -> String? {
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        switch info.ai_family {
        case AF_INET:
            return info.ai_addr.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { address in
                var ip = address.pointee.sin_addr
                return inet_ntop(AF_INET, &ip, &buffer, socklen_t(buffer.count)).map { String(cString: $0) }
            }
        case AF_INET6:
            return info.ai_addr.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { address in
                var ip = address.pointee.sin6_addr
                return inet_ntop(AF_INET6, &ip, &buffer, socklen_t(buffer.count)).map { String(cString: $0) }
            }
        default:
            return nil
        }
    }
}
