/// A webhook endpoint: where a tenant's job endings are POSTed (Standard Webhooks 1.0).
public struct Webhook: Sendable, Hashable {
    public var id: WebhookID
    public var url: String
    /// The event types it is sent, in the order given.
    public var events: [WebhookEventType]
    /// Set once a delivery got 410 Gone: a disabled endpoint gets no new deliveries.
    public var disabled: Bool
    public var createdAt: Timestamp

    /// Creates an endpoint record.
    public init(id: WebhookID, url: String, events: [WebhookEventType], disabled: Bool = false, createdAt: Timestamp) {
        self.id = id
        self.url = url
        self.events = events
        self.disabled = disabled
        self.createdAt = createdAt
    }

    /// The list position of this endpoint, for a `next_cursor`.
    public var cursor: Cursor { Cursor(createdAt: createdAt, id: id.rawValue) }

    /// The longest URL accepted.
    public static let maxURLLength = 2048
}

/// A webhook endpoint's id.
public typealias WebhookID = ID<Webhook>

/// What a webhook is sent: the end of a job.
public enum WebhookEventType: String, Sendable, Hashable, CaseIterable, Codable {
    case jobSucceeded = "job.succeeded"
    case jobFailed = "job.failed"
    case jobCancelled = "job.cancelled"

    /// The event a job's end makes; nil while it is not done.
    public init?(ending state: JobState) {
        switch state {
        case .succeeded: self = .jobSucceeded
        case .failed: self = .jobFailed
        case .cancelled: self = .jobCancelled
        case .queued, .scheduled, .running: return nil
        }
    }
}

/// A new endpoint with its signing secret, as `POST /v1/webhooks` answers it: the only time the secret is shown.
public struct CreatedWebhook: Sendable, Hashable {
    public var webhook: Webhook
    /// `whsec_` and 32 random bytes in standard base64.
    public var secret: String

    public init(webhook: Webhook, secret: String) {
        self.webhook = webhook
        self.secret = secret
    }
}

/// One event's delivery to one endpoint, with the state of its attempts.
public struct WebhookDelivery: Sendable, Hashable {
    /// Where a delivery is.
    public enum Status: String, Sendable, Hashable, CaseIterable {
        /// Not yet delivered; another attempt is due at `nextAttemptAt`.
        case pending
        /// A 2xx answered an attempt.
        case delivered
        /// Given up: attempts exhausted, the endpoint answered 410, or its address is refused.
        case failed
    }

    public var id: DeliveryID
    /// The event's id: the `webhook-id` header of every attempt.
    public var eventID: String
    public var type: WebhookEventType
    public var attempts: Int
    public var status: Status
    public var lastStatusCode: Int?
    public var lastError: String?
    public var nextAttemptAt: Timestamp?
    public var deliveredAt: Timestamp?
    public var createdAt: Timestamp

    public init(
        id: DeliveryID, eventID: String, type: WebhookEventType, attempts: Int = 0, status: Status = .pending, lastStatusCode: Int? = nil,
        lastError: String? = nil, nextAttemptAt: Timestamp? = nil, deliveredAt: Timestamp? = nil, createdAt: Timestamp
    ) {
        self.id = id
        self.eventID = eventID
        self.type = type
        self.attempts = attempts
        self.status = status
        self.lastStatusCode = lastStatusCode
        self.lastError = lastError
        self.nextAttemptAt = nextAttemptAt
        self.deliveredAt = deliveredAt
        self.createdAt = createdAt
    }

    /// The list position of this delivery, for a `next_cursor`.
    public var cursor: Cursor { Cursor(createdAt: createdAt, id: id.rawValue) }
}

/// A delivery's id.
public typealias DeliveryID = ID<WebhookDelivery>

/// The body of a webhook request: `{"type", "timestamp", "data": {"job", "post"}}`.
public struct WebhookEvent: Sendable {
    public var type: WebhookEventType
    /// When the job ended.
    public var timestamp: Timestamp
    public var job: Job
    public var post: Post

    public init(type: WebhookEventType, timestamp: Timestamp, job: Job, post: Post) {
        self.type = type
        self.timestamp = timestamp
        self.job = job
        self.post = post
    }
}

// MARK: JSON

extension Webhook: Encodable {
    private enum CodingKeys: String, CodingKey {
        case id, url, events, disabled
        case createdAt = "created_at"
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(url, forKey: .url)
        try container.encode(events, forKey: .events)
        try container.encode(disabled, forKey: .disabled)
        try container.encode(createdAt, forKey: .createdAt)
    }
}

extension Webhook: JSONWritable {
    /// `{"id", "url", "events", "disabled", "created_at"}`.
    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writeMembers(to: &writer, secret: nil)
        writer.endObject()
    }

    /// The members, with `"secret"` after `"events"` when given (the answer of a creation).
    fileprivate func writeMembers(to writer: inout JSONWriter, secret: String?) {
        writer.key("id")
        writer.string(id)
        writer.key("url")
        writer.string(url)
        writer.key("events")
        writer.beginArray()
        for event in events { writer.string(event.rawValue) }
        writer.endArray()
        if let secret {
            writer.key("secret")
            writer.string(secret)
        }
        writer.key("disabled")
        writer.bool(disabled)
        writer.key("created_at")
        writer.timestamp(createdAt)
    }
}

extension CreatedWebhook: Encodable {
    private enum CodingKeys: String, CodingKey { case secret }

    /// The endpoint's members and `"secret"`.
    public func encode(to encoder: any Encoder) throws {
        try webhook.encode(to: encoder)
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(secret, forKey: .secret)
    }
}

extension CreatedWebhook: JSONWritable {
    /// `{"id", "url", "events", "secret", "disabled", "created_at"}`: the secret, shown this once.
    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        webhook.writeMembers(to: &writer, secret: secret)
        writer.endObject()
    }
}

extension WebhookDelivery: Encodable {
    private enum CodingKeys: String, CodingKey {
        case id
        case eventID = "event_id"
        case type, attempts, status
        case lastStatusCode = "last_status_code"
        case lastError = "last_error"
        case nextAttemptAt = "next_attempt_at"
        case deliveredAt = "delivered_at"
        case createdAt = "created_at"
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(eventID, forKey: .eventID)
        try container.encode(type, forKey: .type)
        try container.encode(attempts, forKey: .attempts)
        try container.encode(status.rawValue, forKey: .status)
        try container.encodeNullable(lastStatusCode, forKey: .lastStatusCode)
        try container.encodeNullable(lastError, forKey: .lastError)
        try container.encodeNullable(nextAttemptAt, forKey: .nextAttemptAt)
        try container.encodeNullable(deliveredAt, forKey: .deliveredAt)
        try container.encode(createdAt, forKey: .createdAt)
    }
}

extension WebhookDelivery: JSONWritable {
    /// `{"id", "event_id", "type", "attempts", "status", "last_status_code", "last_error", "next_attempt_at",
    /// "delivered_at", "created_at"}`.
    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.key("id")
        writer.string(id)
        writer.key("event_id")
        writer.string(eventID)
        writer.key("type")
        writer.string(type.rawValue)
        writer.key("attempts")
        writer.int(attempts)
        writer.key("status")
        writer.string(status.rawValue)
        writer.key("last_status_code")
        if let lastStatusCode { writer.int(lastStatusCode) } else { writer.null() }
        writer.key("last_error")
        writer.string(lastError)
        writer.key("next_attempt_at")
        writer.timestamp(nextAttemptAt)
        writer.key("delivered_at")
        writer.timestamp(deliveredAt)
        writer.key("created_at")
        writer.timestamp(createdAt)
        writer.endObject()
    }
}

extension WebhookEvent: JSONWritable {
    /// `{"type", "timestamp", "data": {"job", "post"}}`.
    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.key("type")
        writer.string(type.rawValue)
        writer.key("timestamp")
        writer.timestamp(timestamp)
        writer.key("data")
        writer.beginObject()
        writer.key("job")
        job.write(to: &writer)
        writer.key("post")
        post.write(to: &writer)
        writer.endObject()
        writer.endObject()
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(type, forKey: .type)
        try container.encode(timestamp, forKey: .timestamp)
        var data = container.nestedContainer(keyedBy: CodingKeys.self, forKey: .data)
        try data.encode(job, forKey: .job)
        try data.encode(post, forKey: .post)
    }

    private enum CodingKeys: String, CodingKey { case type, timestamp, data, job, post }
}
