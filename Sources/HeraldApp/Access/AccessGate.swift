import HTTPTypes
import HeraldCore
public import MicroHTTP

/// The trust boundary in front of `/v1/`: the failed-authentication limit per client address, the key, the
/// per-key rate limit, then (once the route is known) the scope. Everything else (`/healthz`, `/metrics`, …) passes.
public struct AccessGate: Gate {
    /// How requests are authenticated.
    enum Mode: Sendable {
        /// Every `/v1/` call needs a key.
        case keys(Authenticator)
        /// No key needed: every caller is ``Caller/unauthenticated``.
        case off
    }

    let mode: Mode
    /// Requests a second per key (burst twice that); nil: no limit.
    let keyLimit: RateLimiter<KeyID>?
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

    public func admit(_ request: inout Request) -> HTTPError? {
        let path = request.path
        guard path.hasPrefix("/v1/") || path == "/v1" else { return nil }
        guard case .keys(let authenticator) = mode else {
            request.principal = Caller.unauthenticated
            return nil
        }
        let now = ContinuousClock.now
        let address = request.remoteAddress ?? "-"
        if let failureLimit, case .limited(let retryAfter) = failureLimit.check(address, now: now) {
            return Self.tooManyRequests(
                retryAfter: retryAfter, policy: failurePolicy, detail: "too many failed authentications from this address; retry later")
        }
        guard let secret = Self.bearer(request.head.headerFields[.authorization]) else {
            _ = failureLimit?.take(address, now: now)
            return Self.unauthorized(invalidToken: false)
        }
        let key: APIKey
        switch authenticator.authenticate(secret, now: now) {
        case .valid(let valid):
            key = valid
        case .invalid:
            _ = failureLimit?.take(address, now: now)
            return Self.unauthorized(invalidToken: true)
        case .unavailable:
            return HTTPError(.serviceUnavailable, detail: "API keys cannot be checked right now", headerFields: [.retryAfter: "1"])
        }
        if let keyLimit, case .limited(let retryAfter) = keyLimit.take(key.id, now: now) {
            return Self.tooManyRequests(
                retryAfter: retryAfter, policy: keyPolicy, detail: "this key made more than \(Int(keyLimit.rate)) requests a second; retry later")
        }
        request.principal = Caller(tenant: key.tenant, scope: key.scope, keyID: key.id)
        return nil
    }

    public func authorize(_ request: Request, route: Router.Route) -> HTTPError? {
        guard let caller = request.principal as? Caller else { return nil }
        let needed = Self.scope(method: route.method, template: route.template)
        guard !caller.scope.allows(needed) else { return nil }
        return HTTPError(
            .forbidden, detail: "this call needs a key with the '\(needed.rawValue)' scope; this key has '\(caller.scope.rawValue)'")
    }

    /// The scope a call needs: `admin` for `/v1/keys` and pausing or resuming the queue, `read` for other reads,
    /// `publish` for other writes.
    static func scope(method: HTTPRequest.Method, template: String) -> Scope {
        if template.hasPrefix("/v1/keys") || template == "/v1/queue/pause" || template == "/v1/queue/resume" { return .admin }
        return method == .get || method == .head ? .read : .publish
    }

    /// The key of `Authorization: Bearer KEY` (the scheme in any case, RFC 9110); nil for none or another scheme.
    static func bearer(_ field: String?) -> Substring? {
        guard let field, field.utf8.count > 7, field.prefix(7).lowercased() == "bearer " else { return nil }
        let secret = field.dropFirst(7).drop { $0 == " " }
        return secret.isEmpty ? nil : secret
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
