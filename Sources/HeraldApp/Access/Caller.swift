public import HeraldCore
public import MicroHTTP

/// Who is making a request: the key's tenant and scope (the ``AccessGate`` sets it on every `/v1/` request).
public struct Caller: Sendable, Hashable {
    public var tenant: Tenant
    public var scope: Scope
    /// The key that authenticated the request; nil with `--auth off`.
    public var keyID: KeyID?

    public init(tenant: Tenant, scope: Scope, keyID: KeyID?) {
        self.tenant = tenant
        self.scope = scope
        self.keyID = keyID
    }

    /// Everyone, with `--auth off`: tenant `default`, every scope.
    public static let unauthenticated = Caller(tenant: .default, scope: .admin, keyID: nil)
}

extension Request {
    /// The caller the gate admitted; a route outside the gate's reach has none, and answers 401 rather than guess.
    public func caller() throws(HTTPError) -> Caller {
        guard let caller = principal as? Caller else { throw AccessGate.unauthorized(invalidToken: false) }
        return caller
    }
}
