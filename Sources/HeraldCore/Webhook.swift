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

extension Webhook: JSONWritable {
    /// The endpoint object's members; `secret` is written only in a creation's answer (``CreatedWebhook``).
    public enum Member: String, JSONMember {
        case id, url, events, secret, disabled
        case createdAt = "created_at"
    }

    public func write(to writer: inout JSONWriter) {
        write(to: &writer, secret: nil)
    }

    fileprivate func write(to writer: inout JSONWriter, secret: String?) {
        writer.object(Member.self, including: { member in member != .secret || secret != nil }) { member, writer in
            switch member {
            case .id: writer.string(id)
            case .url: writer.string(url)
            case .events:
                writer.beginArray()
                for event in events { writer.string(event.rawValue) }
                writer.endArray()
            case .secret: writer.string(secret)
            case .disabled: writer.bool(disabled)
            case .createdAt: writer.timestamp(createdAt)
            }
        }
    }
}

extension CreatedWebhook: JSONWritable {
    /// The endpoint's members with its secret, shown this once.
    public func write(to writer: inout JSONWriter) {
        webhook.write(to: &writer, secret: secret)
    }
}

extension WebhookDelivery: JSONWritable {
    /// The delivery object's members.
    public enum Member: String, JSONMember {
        case id
        case eventID = "event_id"
        case type, attempts, status
        case lastStatusCode = "last_status_code"
        case lastError = "last_error"
        case nextAttemptAt = "next_attempt_at"
        case deliveredAt = "delivered_at"
        case createdAt = "created_at"
    }

    /// Every member, `null` for absent values.
    public func write(to writer: inout JSONWriter) {
        writer.object(Member.self) { member, writer in
            switch member {
            case .id: writer.string(id)
            case .eventID: writer.string(eventID)
            case .type: writer.string(type.rawValue)
            case .attempts: writer.int(attempts)
            case .status: writer.string(status.rawValue)
            case .lastStatusCode: if let lastStatusCode { writer.int(lastStatusCode) } else { writer.null() }
            case .lastError: writer.string(lastError)
            case .nextAttemptAt: writer.timestamp(nextAttemptAt)
            case .deliveredAt: writer.timestamp(deliveredAt)
            case .createdAt: writer.timestamp(createdAt)
            }
        }
    }
}

extension WebhookEvent: JSONWritable {
    /// The event body's members; `data` holds the job and its post.
    public enum Member: String, JSONMember {
        case type, timestamp, data
    }

    /// The members of the event's `data`.
    public enum DataMember: String, JSONMember {
        case job, post
    }

    public func write(to writer: inout JSONWriter) {
        writer.object(Member.self) { member, writer in
            switch member {
            case .type: writer.string(type.rawValue)
            case .timestamp: writer.timestamp(timestamp)
            case .data:
                writer.object(DataMember.self) { member, writer in
                    switch member {
                    case .job: job.write(to: &writer)
                    case .post: post.write(to: &writer)
                    }
                }
            }
        }
    }
}
