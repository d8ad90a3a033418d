/// The id of one kind of entity: a post's id passed where a job's is expected does not compile.
///
/// The text is a UUIDv7 that Herald made (``Identifier``); the phantom `Entity` only tells ids apart.
public struct ID<Entity>: RawRepresentable, Hashable, Comparable, Sendable, Codable, CustomStringConvertible {
    /// The id as stored and sent: lowercase canonical UUID text.
    public let rawValue: String

    /// Wraps stored or generated text; see ``init(validating:)`` for text a client sent.
    public init(rawValue: String) {
        self.rawValue = rawValue
    }

    /// Wraps stored or generated text.
    public init(_ rawValue: String) {
        self.rawValue = rawValue
    }

    /// The id a client named, or nil when it cannot name anything Herald made (not canonical UUID text).
    public init?(validating text: String) {
        guard Identifier.isValid(text) else { return nil }
        self.rawValue = text
    }

    /// A new id for something created at `time`.
    public static func generate(at time: Timestamp = .now()) -> ID {
        ID(Identifier.generate(at: time))
    }

    public var description: String { rawValue }

    public static func < (lhs: ID, rhs: ID) -> Bool { lhs.rawValue < rhs.rawValue }

    public init(from decoder: any Decoder) throws {
        rawValue = try decoder.singleValueContainer().decode(String.self)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }
}

/// A medium's id.
public typealias MediaID = ID<Media>
/// A post's id.
public typealias PostID = ID<Post>
/// A publish job's id.
public typealias JobID = ID<Job>

/// Where a medium went in the media store once uploaded: what the commit records for it.
public struct StoredObject: Sendable, Hashable {
    /// The object's key in the store (`media/<id>.<ext>`).
    public var key: String
    /// The URL the published medium is fetched from.
    public var url: String

    /// Creates a stored object.
    public init(key: String, url: String) {
        self.key = key
        self.url = url
    }
}
