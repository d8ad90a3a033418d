/// Who owns media, posts, jobs and idempotency keys: the tenant of the API key that made them.
///
/// Another tenant's id answers exactly as an unknown one; lists show only the caller's tenant.
public struct Tenant: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    /// The tenant's name as stored and sent.
    public let rawValue: String

    /// The tenant of `--auth off` and of a key made without one.
    public static let `default` = Tenant(uncheckedName: "default")

    /// The longest tenant name.
    public static let maxLength = 64

    /// A name a client or an operator gave: 1 to 64 of ASCII letters, digits, `-`, `_` and `.`; nil otherwise.
    public init?(rawValue: String) {
        guard !rawValue.isEmpty, rawValue.utf8.count <= Self.maxLength, rawValue.utf8.allSatisfy(Self.isAllowed) else { return nil }
        self.rawValue = rawValue
    }

    /// Wraps a name read from the database, which only ever holds checked names.
    public init(uncheckedName name: String) {
        self.rawValue = name
    }

    public var description: String { rawValue }

    private static func isAllowed(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"): true
        case UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."): true
        default: false
        }
    }
}

/// What an API key may do; each scope includes the ones before it.
public enum Scope: String, Sendable, CaseIterable, Comparable {
    /// Every `GET` except `/v1/keys`.
    case read
    /// Also the writes on media, posts, jobs (cancel, re-publish) and webhooks.
    case publish
    /// Also pausing and resuming the queue, and every `/v1/keys` call.
    case admin

    private var rank: Int {
        switch self {
        case .read: 0
        case .publish: 1
        case .admin: 2
        }
    }

    public static func < (lhs: Scope, rhs: Scope) -> Bool { lhs.rank < rhs.rank }

    /// Whether a key of this scope may make a call that needs `needed`.
    public func allows(_ needed: Scope) -> Bool { needed <= self }

    /// The names a field takes, for messages: `read, publish, admin`.
    public static var names: String { allCases.map(\.rawValue).joined(separator: ", ") }
}

/// An API key as stored and listed: never the key itself, which only its creator sees, once.
public struct APIKey: Sendable, Hashable {
    public var id: KeyID
    public var name: String
    public var tenant: Tenant
    public var scope: Scope
    public var createdAt: Timestamp
    /// When the key last authenticated a request; may lag a minute.
    public var lastUsedAt: Timestamp?
    /// When the key was revoked; a revoked key authenticates nothing.
    public var revokedAt: Timestamp?

    /// The longest key name.
    public static let maxNameLength = 100

    /// Creates a key record.
    public init(
        id: KeyID,
        name: String,
        tenant: Tenant,
        scope: Scope,
        createdAt: Timestamp,
        lastUsedAt: Timestamp? = nil,
        revokedAt: Timestamp? = nil
    ) {
        self.id = id
        self.name = name
        self.tenant = tenant
        self.scope = scope
        self.createdAt = createdAt
        self.lastUsedAt = lastUsedAt
        self.revokedAt = revokedAt
    }

    /// The list position of this key, for a `next_cursor`.
    public var cursor: Cursor { Cursor(createdAt: createdAt, id: id.rawValue) }

    /// Whether `name` is one a key may have: 1 to 100 Unicode code points (as JSON Schema's `maxLength` counts), no
    /// control characters.
    public static func isValidName(_ name: String) -> Bool {
        !name.isEmpty && name.unicodeScalars.count <= maxNameLength && !name.unicodeScalars.contains { $0.properties.generalCategory == .control }
    }
}

/// An API key's id.
public typealias KeyID = ID<APIKey>

/// A key with its secret, as `POST /v1/keys` and `herald keys create` answer it: the only time the secret is shown.
public struct CreatedKey: Sendable, Hashable {
    public var key: APIKey
    /// `hrld_` and 43 base64url characters (32 random bytes).
    public var secret: String

    /// Pairs a new key with its secret.
    public init(key: APIKey, secret: String) {
        self.key = key
        self.secret = secret
    }
}

/// The text of API keys: `hrld_` followed by 32 random bytes in unpadded base64url.
public enum KeySecret {
    /// What every key starts with (so a leaked key is easy to find in a scan).
    public static var prefix: String { marker.description }
    /// The prefix as bytes, for the check every request's key goes through.
    private static let marker: StaticString = "hrld_"
    /// Random bytes in a key.
    public static let randomBytes = 32

    /// A new key from the system's secure random source.
    public static func generate() -> String {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<randomBytes).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        return prefix + Base64URL.encode(bytes)
    }

    /// Whether `text` has a key's shape: the prefix, then 43 to 256 base64url characters.
    public static func isWellFormed(_ text: Substring) -> Bool {
        var text = String(text)
        return text.withUTF8 { isWellFormed($0) }
    }

    /// Whether `bytes` (UTF-8) have a key's shape; checked in place, as every request's key is.
    public static func isWellFormed(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        let length = marker.utf8CodeUnitCount
        guard bytes.count >= length + 43, bytes.count <= length + 256 else { return false }
        for index in 0..<length where bytes[index] != marker.utf8Start[index] { return false }
        for byte in bytes[length...] {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"): continue
            case UInt8(ascii: "-"), UInt8(ascii: "_"): continue
            default: return false
            }
        }
        return true
    }
}

extension APIKey: JSONWritable {
    /// The key object's members; `key`, the secret, is written only in a creation's answer (``CreatedKey``).
    public enum Member: String, JSONMember {
        case id, name, tenant, scope
        case createdAt = "created_at"
        case lastUsedAt = "last_used_at"
        case revokedAt = "revoked_at"
        case key
    }

    public func write(to writer: inout JSONWriter) {
        write(to: &writer, secret: nil)
    }

    fileprivate func write(to writer: inout JSONWriter, secret: String?) {
        writer.object(Member.self, including: { member in member != .key || secret != nil }) { member, writer in
            switch member {
            case .id: writer.string(id)
            case .name: writer.string(name)
            case .tenant: writer.string(tenant.rawValue)
            case .scope: writer.string(scope.rawValue)
            case .createdAt: writer.timestamp(createdAt)
            case .lastUsedAt: writer.timestamp(lastUsedAt)
            case .revokedAt: writer.timestamp(revokedAt)
            case .key: writer.string(secret)
            }
        }
    }
}

extension CreatedKey: JSONWritable {
    /// The key object's members, then `"key"` (the secret, shown this once).
    public func write(to writer: inout JSONWriter) {
        key.write(to: &writer, secret: secret)
    }
}
