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
    /// The key's slot in the per-key rate limit.
    let limitKey: LimitKey?

    public init(tenant: Tenant, scope: Scope, keyID: KeyID?) {
        self.tenant = tenant
        self.scope = scope
        self.keyID = keyID
        limitKey = keyID.map(LimitKey.init)
    }

    /// A key's id with its hash made once, when the caller is (once a second per key): the per-key rate limit looks it up
    /// on every request, and hashing the id's 36 characters each time cost more than the rest of the lookup.
    struct LimitKey: Hashable, Sendable {
        let id: KeyID
        private let hash: Int

        init(_ id: KeyID) {
            self.id = id
            hash = id.hashValue
        }

        func hash(into hasher: inout Hasher) { hasher.combine(hash) }

        static func == (lhs: LimitKey, rhs: LimitKey) -> Bool { lhs.hash == rhs.hash && lhs.id == rhs.id }
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
