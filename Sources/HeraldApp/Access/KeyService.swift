public import HeraldCore
public import HeraldStorage

/// Makes, lists and revokes API keys: the rules `POST/GET/DELETE /v1/keys` and `herald keys` share.
public struct KeyService: Sendable {
    let keys: any KeyRepository
    /// Told of a revocation, so that this process refuses the key at once rather than within a second.
    let revoked: @Sendable (KeyID) -> Void

    public init(keys: any KeyRepository, revoked: @escaping @Sendable (KeyID) -> Void = { _ in }) {
        self.keys = keys
        self.revoked = revoked
    }

    /// A new key with a new secret; only its hash is stored. The name, tenant and scope are checked first.
    public func create(name: String, tenant: String?, scope: String?) async throws(KeyError) -> CreatedKey {
        let request = try Self.checked(name: name, tenant: tenant, scope: scope)
        let secret = KeySecret.generate()
        let now = Timestamp.now()
        let key = APIKey(id: KeyID.generate(at: now), name: request.name, tenant: request.tenant, scope: request.scope, createdAt: now)
        do {
            try await keys.insert(key, hash: Authenticator.hash(secret))
        } catch {
            throw .storage(error)
        }
        return CreatedKey(key: key, secret: secret)
    }

    /// The first key of an empty database: `initial-admin`, `admin` of tenant `default`; nil when any key exists.
    public func createInitialAdmin() async throws -> CreatedKey? {
        let secret = KeySecret.generate()
        let now = Timestamp.now()
        let key = APIKey(id: KeyID.generate(at: now), name: "initial-admin", tenant: .default, scope: .admin, createdAt: now)
        return try await keys.insertIfEmpty(key, hash: Authenticator.hash(secret)) ? CreatedKey(key: key, secret: secret) : nil
    }

    /// One page of every tenant's keys, newest first.
    public func list(limit: Int, after cursor: Cursor?) async throws -> Page<APIKey> {
        try await keys.list(limit: limit, after: cursor)
    }

    /// Revokes the key; nil if there is no such key. Revoking twice keeps the first time.
    public func revoke(_ id: String) async throws -> APIKey? {
        guard let keyID = KeyID(validating: id), let key = try await keys.revoke(id: keyID, now: .now()) else { return nil }
        revoked(keyID)
        return key
    }

    /// What a new key's request says, checked.
    static func checked(name: String, tenant: String?, scope: String?) throws(KeyError) -> (name: String, tenant: Tenant, scope: Scope) {
        var issues: [ValidationIssue] = []
        if !APIKey.isValidName(name) {
            issues.append(ValidationIssue(pointer: "/name", detail: "a name of 1 to \(APIKey.maxNameLength) characters, no control characters"))
        }
        let checkedTenant = tenant.map { Tenant(rawValue: $0) } ?? .default
        if checkedTenant == nil {
            issues.append(
                ValidationIssue(pointer: "/tenant", detail: "1 to \(Tenant.maxLength) of ASCII letters, digits, '-', '_' and '.'"))
        }
        let checkedScope = scope.map { Scope(rawValue: $0) } ?? .publish
        if checkedScope == nil { issues.append(ValidationIssue(pointer: "/scope", detail: "one of \(Scope.names)")) }
        guard issues.isEmpty, let checkedTenant, let checkedScope else { throw .invalid(issues) }
        return (name, checkedTenant, checkedScope)
    }
}

/// Why a key was not made.
public enum KeyError: Error, CustomStringConvertible {
    /// The name, tenant or scope is not one a key can have.
    case invalid([ValidationIssue])
    /// The database refused the write.
    case storage(any Error)

    public var description: String {
        switch self {
        case .invalid(let issues): issues.map { "\($0.pointer.dropFirst()): \($0.detail)" }.joined(separator: "; ")
        case .storage(let error): "\(error)"
        }
    }
}
