/// A medium: uploaded bytes and their metadata, the API's media object.
public struct Media: Sendable, Equatable {
    /// The medium's id (UUIDv7).
    public var id: MediaID
    /// The declared type, checked against the bytes' signature.
    public var contentType: MediaType
    /// The size in bytes; never 0.
    public var size: Int64
    /// The SHA-256 of the bytes, 64 lowercase hex digits.
    public var sha256: String
    /// The client's description (alt text), if any.
    public var description: String?
    /// Where the bytes are.
    public var state: MediaState
    /// Where the published medium can be fetched; set when its post is published.
    public var url: String?
    /// The post it is attached to, if any.
    public var postID: PostID?
    /// When it was received.
    public var createdAt: Timestamp

    /// Creates a media object.
    public init(
        id: MediaID, contentType: MediaType, size: Int64, sha256: String, description: String? = nil,
        state: MediaState = .staged, url: String? = nil, postID: PostID? = nil, createdAt: Timestamp
    ) {
        self.id = id
        self.contentType = contentType
        self.size = size
        self.sha256 = sha256
        self.description = description
        self.state = state
        self.url = url
        self.postID = postID
        self.createdAt = createdAt
    }

    /// The list position of this medium, for a `next_cursor`.
    public var cursor: Cursor { Cursor(createdAt: createdAt, id: id.rawValue) }

    /// The media object's members.
    public enum Member: String, JSONMember {
        case id
        case contentType = "content_type"
        case size, sha256, description, state, url
        case postID = "post_id"
        case createdAt = "created_at"
    }
}

extension Media: Decodable {
    // Decoded by the members' keys; an absent or null optional decodes as nil.
    private typealias CodingKeys = Member
}

extension Media: JSONWritable {
    /// Every member, `null` for absent values.
    public func write(to writer: inout JSONWriter) {
        writer.object(Member.self) { member, writer in
            switch member {
            case .id: writer.string(id)
            case .contentType: writer.string(contentType.rawValue)
            case .size: writer.int(Int(size))
            case .sha256: writer.string(sha256)
            case .description: writer.string(description)
            case .state: writer.string(state.rawValue)
            case .url: writer.string(url)
            case .postID: writer.string(postID)
            case .createdAt: writer.timestamp(createdAt)
            }
        }
    }
}
