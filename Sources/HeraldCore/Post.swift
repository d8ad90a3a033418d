/// A post: text and media to publish together, the API's post object.
public struct Post: Sendable, Equatable {
    /// The post's id (UUIDv7).
    public var id: PostID
    /// The text; empty when the post is media only.
    public var text: String
    /// Where it is in its life cycle.
    public var state: PostState
    /// Its media, in the order the client gave them.
    public var media: [Media]
    /// Its current (latest) publish job.
    public var jobID: JobID
    /// How urgently its job is claimed.
    public var priority: Priority
    /// When the client asked it to be published, if it was scheduled.
    public var scheduledAt: Timestamp?
    /// When it was accepted.
    public var createdAt: Timestamp
    /// When it was committed as published.
    public var publishedAt: Timestamp?

    /// Creates a post object.
    public init(
        id: PostID, text: String, state: PostState, media: [Media], jobID: JobID, priority: Priority = .normal,
        scheduledAt: Timestamp? = nil, createdAt: Timestamp, publishedAt: Timestamp? = nil
    ) {
        self.id = id
        self.text = text
        self.state = state
        self.media = media
        self.jobID = jobID
        self.priority = priority
        self.scheduledAt = scheduledAt
        self.createdAt = createdAt
        self.publishedAt = publishedAt
    }

    /// The list position of this post, for a `next_cursor`.
    public var cursor: Cursor { Cursor(createdAt: createdAt, id: id.rawValue) }

    /// The post object's members.
    public enum Member: String, JSONMember {
        case id, text, state, media
        case jobID = "job_id"
        case priority
        case scheduledAt = "scheduled_at"
        case createdAt = "created_at"
        case publishedAt = "published_at"
    }
}

extension Post: Decodable {
    // Decoded by the members' keys; an absent or null optional decodes as nil.
    private typealias CodingKeys = Member
}

extension Post: JSONWritable {
    /// Every member, `null` for absent values; the media as media objects.
    public func write(to writer: inout JSONWriter) {
        writer.object(Member.self) { member, writer in
            switch member {
            case .id: writer.string(id)
            case .text: writer.string(text)
            case .state: writer.string(state.rawValue)
            case .media: writer.array(media)
            case .jobID: writer.string(jobID)
            case .priority: writer.string(priority.rawValue)
            case .scheduledAt: writer.timestamp(scheduledAt)
            case .createdAt: writer.timestamp(createdAt)
            case .publishedAt: writer.timestamp(publishedAt)
            }
        }
    }
}

/// The answer to creating or re-publishing a post: `{"post": Post, "job": Job}`.
public struct PostAndJob: Decodable, Sendable, Equatable {
    /// The post.
    public var post: Post
    /// Its new publish job.
    public var job: Job

    /// Pairs a post with its job.
    public init(post: Post, job: Job) {
        self.post = post
        self.job = job
    }

    /// The answer's members.
    public enum Member: String, JSONMember {
        case post, job
    }

    // Decoded by these keys.
    private typealias CodingKeys = Member
}

extension PostAndJob: JSONWritable {
    /// The post, then its job.
    public func write(to writer: inout JSONWriter) {
        writer.object(Member.self) { member, writer in
            switch member {
            case .post: post.write(to: &writer)
            case .job: job.write(to: &writer)
            }
        }
    }
}
