/// Why a ``Server`` could not start or run.
public struct ServerError: Error, Hashable, CustomStringConvertible {
    private enum Code: Hashable {
        case addressNotResolved
        case daemonStartFailed
        case alreadyRunning
        case tlsUnavailable
    }

    private let code: Code
    /// What was asked, e.g. the address that did not resolve.
    public let detail: String

    private init(_ code: Code, _ detail: String) {
        self.code = code
        self.detail = detail
    }

    /// The host did not resolve to an IPv4 or IPv6 address.
    public static func addressNotResolved(_ host: String) -> Self { .init(.addressNotResolved, host) }
    /// libmicrohttpd refused to start, usually because the address is in use or not local.
    public static func daemonStartFailed(_ address: String) -> Self { .init(.daemonStartFailed, address) }
    /// `run()` was called on a server that already ran.
    public static var alreadyRunning: Self { .init(.alreadyRunning, "") }
    /// TLS was asked for, and this libmicrohttpd was built without it.
    public static var tlsUnavailable: Self { .init(.tlsUnavailable, "") }

    public var description: String {
        switch code {
        case .addressNotResolved: "cannot resolve host '\(detail)' to an IP address"
        case .daemonStartFailed: "cannot listen on \(detail) (address in use, or not an address of this machine?)"
        case .alreadyRunning: "the server has already been started"
        case .tlsUnavailable: "this libmicrohttpd was built without TLS support"
        }
    }
}
