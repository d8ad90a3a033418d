import HTTPTypes
import HeraldCore
public import MicroHTTP
import Platform
import Synchronization
import Tracing

/// The trust boundary in front of `/v1/`: the failed-authentication limit per client address, the key, the
/// per-key rate limit, then (once the route is known) the scope. Everything else (`/healthz`, `/metrics`, …) passes.
public final class AccessGate: Gate {
    /// How requests are authenticated.
    enum Mode: Sendable {
        /// Every `/v1/` call needs a key.
        case keys(Authenticator)
        /// No key needed: every caller is ``Caller/unauthenticated``.
        case off
    }

    let mode: Mode
    /// Requests a second per key (burst twice that); nil: no limit.
    let keyLimit: RateLimiter<Caller.LimitKey>?
    /// Failed authentications per client address (a minute's worth); nil: no limit.
    let failureLimit: RateLimiter<String>?

    /// The `RateLimit-Policy` of the per-key limit, fixed at start.
    private let keyPolicy: String?
    private let failurePolicy: String?

    init(mode: Mode, requestsPerSecond: Int, failuresPerMinute: Int) {
        self.mode = mode
        if case .keys = mode, requestsPerSecond > 0 {
            keyLimit = RateLimiter(rate: Double(requestsPerSecond), burst: Double(2 * requestsPerSecond))
            keyPolicy = "\"default\";q=\(requestsPerSecond);w=1"
        } else {
            keyLimit = nil
            keyPolicy = nil
        }
        if case .keys = mode, failuresPerMinute > 0 {
            failureLimit = RateLimiter(rate: Double(failuresPerMinute) / 60, burst: Double(failuresPerMinute))
            failurePolicy = "\"auth-failures\";q=\(failuresPerMinute);w=60"
        } else {
            failureLimit = nil
            failurePolicy = nil
        }
    }

    /// The limits are totals over every replica: with `count` alive, this one admits 1/`count` of each.
    func share(among count: Int) {
        keyLimit?.share(among: count)
        failureLimit?.share(among: count)
        shared.store(max(1, count), ordering: .relaxed)
    }

    /// How many replicas the limits are shared among now.
    var sharedAmong: Int { shared.load(ordering: .relaxed) }
    private let shared = Atomic(1)

    public func admit(_ request: inout Request) -> HTTPError? {
        guard Self.isAPI(request.path) else { return nil }
        // tus clients ask what the server speaks before they hold a key (the answer names no tenant's data).
        if request.method == .options, request.path == "/v1/uploads" { return nil }
        guard case .keys(let authenticator) = mode else {
            request.principal = Caller.unauthenticated
            request.trace?.span.attributes["herald.tenant"] = Caller.unauthenticated.tenant.rawValue
            return nil
        }
        let now = MonotonicInstant.now
        let address = request.remoteAddress ?? "-"
        if let failureLimit, case .limited(let retryAfter) = failureLimit.check(address, now: now) {
            return Self.tooManyRequests(
                retryAfter: retryAfter, policy: failurePolicy, detail: "too many failed authentications from this address; retry later")
        }
        // Read in place: the key never becomes a string of its own.
        // The first `Authorization` field (no joining of repeated fields, as the subscript would).
        var field = request.fields.first(.authorization) ?? ""
        let outcome = field.withUTF8 { bytes -> Authenticator.Outcome? in
            Self.bearer(bytes).map { authenticator.authenticate($0, now: now) }
        }
        let caller: Caller
        switch outcome {
        case .valid(let valid)?:
            caller = valid
        case nil:
            _ = failureLimit?.take(address, now: now)
            return Self.unauthorized(invalidToken: false)
        case .invalid?:
            _ = failureLimit?.take(address, now: now)
            return Self.unauthorized(invalidToken: true)
        case .unavailable?:
            return .databaseUnavailable("API keys cannot be checked right now: the database cannot be reached; try again shortly")
        }
        if let keyLimit, let key = caller.limitKey, case .limited(let retryAfter) = keyLimit.take(key, now: now) {
            return Self.tooManyRequests(
                retryAfter: retryAfter, policy: keyPolicy, detail: "this key made more than \(Int(keyLimit.rate)) requests a second; retry later")
        }
        request.principal = caller
        request.trace?.span.attributes["herald.tenant"] = caller.tenant.rawValue
        return nil
    }

    public func authorize(_ request: Request, route: Router.Route) -> HTTPError? {
        // Declared where the route is registered (`Router.api`); a route that declares none needs `admin`.
        let needed = route.requirement.flatMap(Scope.init(rawValue:)) ?? .admin
        // Every key may read: the status poll's path ends here, before any cast.
        guard needed > .read, let caller = request.principal as? Caller, !caller.scope.allows(needed) else { return nil }
        return HTTPError(
            .forbidden, detail: "this call needs a key with the '\(needed.rawValue)' scope; this key has '\(caller.scope.rawValue)'")
    }

    /// Whether `path` is under `/v1`: compared as bytes (`hasPrefix` on a `Substring` walks grapheme clusters).
    static func isAPI(_ path: Substring) -> Bool {
        let api: StaticString = "/v1"
        let prefix = UnsafeBufferPointer(start: api.utf8Start, count: api.utf8CodeUnitCount)
        return path.utf8.withContiguousStorageIfAvailable { bytes in
            bytes.starts(with: prefix) && (bytes.count == prefix.count || bytes[prefix.count] == UInt8(ascii: "/"))
        } ?? (path == "/v1" || path.hasPrefix("/v1/"))
    }

    /// The key's bytes in `Authorization: Bearer KEY` (the scheme in any case, RFC 9110); nil for another scheme.
    static func bearer(_ field: UnsafeBufferPointer<UInt8>) -> UnsafeBufferPointer<UInt8>? {
        let scheme: StaticString = "bearer "
        let length = scheme.utf8CodeUnitCount
        guard field.count > length else { return nil }
        // ASCII letters fold to lower case with 0x20; the space is unchanged by it.
        for index in 0..<length where field[index] | 0x20 != scheme.utf8Start[index] { return nil }
        var start = length
        while start < field.count, field[start] == UInt8(ascii: " ") { start += 1 }
        return start < field.count ? UnsafeBufferPointer(rebasing: field[start...]) : nil
    }

    /// 401 with `WWW-Authenticate` (RFC 6750): no key, or (`invalidToken`) one that is unknown or revoked.
    static func unauthorized(invalidToken: Bool) -> HTTPError {
        HTTPError(
            .unauthorized,
            detail: invalidToken
                ? "the API key is unknown or revoked"
                : "this call needs an API key: send Authorization: Bearer KEY",
            headerFields: [.wwwAuthenticate: invalidToken ? #"Bearer realm="herald", error="invalid_token""# : #"Bearer realm="herald""#]
        )
    }

    /// 429 with `Retry-After` and the IETF draft's `RateLimit-Policy` and `RateLimit` headers.
    static func tooManyRequests(retryAfter: Int, policy: String?, detail: String) -> HTTPError {
        var fields: HTTPFields = [.retryAfter: "\(retryAfter)"]
        if let policy {
            fields[.rateLimitPolicy] = policy
            let name = policy.prefix { $0 != ";" }
            fields[.rateLimit] = "\(name);r=0;t=\(retryAfter)"
        }
        return HTTPError(.tooManyRequests, detail: detail, headerFields: fields)
    }
}

extension HTTPField.Name {
    /// `RateLimit-Policy` (draft-ietf-httpapi-ratelimit-headers): the quota and its window.
    static let rateLimitPolicy = HTTPField.Name("RateLimit-Policy")!
    /// `RateLimit`: what is left of the quota, and seconds until it is back.
    static let rateLimit = HTTPField.Name("RateLimit")!
}
