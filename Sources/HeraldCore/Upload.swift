/// A resumable upload (tus) under way: the media it becomes once its last byte arrives, and how far its bytes reach.
public struct Upload: Sendable, Equatable {
    /// The upload's id, which is the id of the media it becomes.
    public var id: MediaID
    /// The declared media type (`Upload-Metadata`'s `filetype`), checked against the bytes when complete.
    public var contentType: MediaType
    /// The alt text (`Upload-Metadata`'s `description`), if any.
    public var description: String?
    /// `Upload-Metadata` as the client sent it at creation (tus: a `HEAD` answers it); nil when it sent none.
    public var metadata: String?
    /// The whole upload's size (`Upload-Length`); never 0.
    public var length: Int64
    /// How many bytes are durably received (`Upload-Offset`).
    public var offset: Int64
    /// Where the bytes received so far are, relative to the staging area; never derived from client input. In an object
    /// store, where the bytes after the last whole part are (`<bytesPath>.<offset>`).
    public var bytesPath: String
    /// The object store's multipart upload that holds the whole parts received (S3's upload id); nil when the bytes are
    /// appended to a file.
    public var multipartID: String?
    /// When it was created.
    public var createdAt: Timestamp
    /// When an incomplete upload is forgotten (`Upload-Expires`).
    public var expiresAt: Timestamp

    /// Creates an upload.
    public init(
        id: MediaID, contentType: MediaType, description: String?, length: Int64, offset: Int64 = 0, bytesPath: String,
        multipartID: String? = nil, metadata: String? = nil, createdAt: Timestamp, expiresAt: Timestamp
    ) {
        self.id = id
        self.contentType = contentType
        self.description = description
        self.metadata = metadata
        self.length = length
        self.offset = offset
        self.bytesPath = bytesPath
        self.multipartID = multipartID
        self.createdAt = createdAt
        self.expiresAt = expiresAt
    }

    /// Whether every byte has arrived.
    public var isComplete: Bool { offset == length }
}
