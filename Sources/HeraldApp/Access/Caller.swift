public import HeraldCore
public import MicroHTTP

/// Who is making a request: the key's tenant and scope (the ``AccessGate`` sets it on every `/v1/` request).
///
/// A class, made once per key and kept with it in the authenticator's cache: setting it on a request is a retain,
/// where a struct this size would be boxed (allocated) on every request.
public final class Caller: Sendable {
    public let tenant: Tenant
    public let scope: Scope
    /// The key that authenticated the request; nil with `--auth off`.
    public let keyID: KeyID?

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
