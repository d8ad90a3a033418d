/// One validation problem: where it is (a JSON Pointer, RFC 6901, into the request) and what it is.
///
/// The app answers 422 with these as the problem document's `errors` member.
public struct ValidationIssue: Codable, Sendable, Hashable {
    /// The JSON Pointer to the offending value, e.g. `/media_ids/1`; `""` for the request as a whole.
    public var pointer: String
    /// A human-readable explanation.
    public var detail: String

    /// Creates an issue.
    public init(pointer: String, detail: String) {
        self.pointer = pointer
        self.detail = detail
    }
}

/// Thrown when a request fails validation; carries every issue found, not only the first.
public struct ValidationFailure: Error, Sendable, Equatable {
    /// The issues, in the order of the request's fields.
    public var issues: [ValidationIssue]

    /// Wraps issues.
    public init(issues: [ValidationIssue]) {
        self.issues = issues
    }
}

/// What `POST /v1/posts` asks for, as sent: nothing is checked until ``validate(maxMediaPerPost:maxTextLength:)``.
///
/// `scheduled_at` and `priority` stay raw strings so that a bad value is a 422 with a pointer, not a
/// decoding failure (a 400). A missing `text` or `media_ids` reads as empty (and `null` as absent), so
/// a media-only or text-only post may leave the other out; "neither text nor media" is then a 422.
/// A value of the wrong JSON type (`"text": 5`) does fail decoding: that body is malformed, a 400.
public struct PostDraft: Codable, Sendable, Equatable {
    /// The text; empty for a media-only post.
    public var text: String
    /// The ids of staged media to attach, in order.
    public var mediaIDs: [String]
    /// When to publish, as sent; nil to publish now.
    public var scheduledAt: String?
    /// The priority, as sent; nil for normal.
    public var priority: String?

    /// Creates a draft, e.g. from the fields of a multipart request.
    public init(text: String = "", mediaIDs: [String] = [], scheduledAt: String? = nil, priority: String? = nil) {
        self.text = text
        self.mediaIDs = mediaIDs
        self.scheduledAt = scheduledAt
        self.priority = priority
    }

    private enum CodingKeys: String, CodingKey {
        case text
        case mediaIDs = "media_ids"
        case scheduledAt = "scheduled_at"
        case priority
    }

    /// Decodes the request body, reading a missing `text` or `media_ids` as empty.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        text = try container.decodeIfPresent(String.self, forKey: .text) ?? ""
        mediaIDs = try container.decodeIfPresent([String].self, forKey: .mediaIDs) ?? []
        scheduledAt = try container.decodeIfPresent(String.self, forKey: .scheduledAt)
        priority = try container.decodeIfPresent(String.self, forKey: .priority)
    }

    // Encoding is synthesized: nil optional fields are left out, as a client would send them.

    /// Every problem with the draft that can be found without the database, in field order.
    ///
    /// Checks: text longer than `maxTextLength` characters or holding U+0000; neither text nor media; more than
    /// `maxMediaPerPost` ids; each repeated id (pointing at the repeat, e.g. `/media_ids/3`); a
    /// `scheduled_at` that is not an RFC 3339 date-time; a priority other than low, normal, high.
    /// Unknown and already-attached media ids need the database: ``MediaRule`` says how those read.
    ///
    /// Length counts Swift `Character`s (extended grapheme clusters), what a reader sees as characters:
    /// an emoji with a skin tone or a flag is one, as Mastodon counts. Text that is only whitespace counts
    /// as no text, because such a post has nothing to show.
    public func validate(maxMediaPerPost: Int, maxTextLength: Int = 5000) -> [ValidationIssue] {
        var issues: [ValidationIssue] = []

        let length = text.count
        if length > maxTextLength {
            issues.append(
                ValidationIssue(pointer: "/text", detail: "The text must be at most \(maxTextLength) characters; it has \(length).")
            )
        }
        if text.unicodeScalars.contains("\u{0}") {
            // No database text holds it (PostgreSQL refuses it), and no reader would see it.
            issues.append(ValidationIssue(pointer: "/text", detail: "The text must not contain U+0000 (NUL)."))
        }
        if mediaIDs.isEmpty && text.allSatisfy(\.isWhitespace) {
            // Pointer "" (the whole request): the problem is the combination, not one member.
            issues.append(ValidationIssue(pointer: "", detail: "A post needs text or at least one medium."))
        }

        if mediaIDs.count > maxMediaPerPost {
            issues.append(
                ValidationIssue(
                    pointer: "/media_ids",
                    detail: "A post can have at most \(maxMediaPerPost) media; \(mediaIDs.count) were given."
                )
            )
        }
        var firstIndex: [String: Int] = [:]
        for (index, id) in mediaIDs.enumerated() {
            if let first = firstIndex[id] {
                issues.append(
                    ValidationIssue(pointer: "/media_ids/\(index)", detail: "Media id \(id) is already listed at /media_ids/\(first).")
                )
            } else {
                firstIndex[id] = index
            }
        }

        if let scheduledAt, Timestamp(rfc3339: scheduledAt) == nil {
            issues.append(
                ValidationIssue(
                    pointer: "/scheduled_at",
                    detail: "scheduled_at must be an RFC 3339 date-time, such as 2026-11-22T10:15:30.123Z."
                )
            )
        }
        if let priority, Priority(rawValue: priority) == nil {
            issues.append(ValidationIssue(pointer: "/priority", detail: "priority must be one of low, normal, high."))
        }
        return issues
    }

    /// The checked request, or every problem found (see ``validate(maxMediaPerPost:maxTextLength:)``).
    public func validated(maxMediaPerPost: Int, maxTextLength: Int = 5000) throws(ValidationFailure) -> PostRequest {
        let issues = validate(maxMediaPerPost: maxMediaPerPost, maxTextLength: maxTextLength)
        guard issues.isEmpty else { throw ValidationFailure(issues: issues) }
        return PostRequest(
            text: text,
            mediaIDs: mediaIDs.map(MediaID.init(rawValue:)),
            scheduledAt: scheduledAt.flatMap { Timestamp(rfc3339: $0) },
            priority: priority.flatMap { Priority(rawValue: $0) } ?? .normal
        )
    }
}

/// A post request that passed ``PostDraft/validate(maxMediaPerPost:maxTextLength:)``, with typed values.
public struct PostRequest: Sendable, Equatable {
    /// The text; empty for a media-only post.
    public var text: String
    /// The ids of the media to attach, in order, without repeats.
    public var mediaIDs: [MediaID]
    /// When to publish, converted to UTC; nil to publish now.
    public var scheduledAt: Timestamp?
    /// How urgently to publish.
    public var priority: Priority
    /// The W3C `traceparent` of the traced request that asked, kept with the job for its run to link to; not part of
    /// what an `Idempotency-Key` binds.
    public var traceparent: String?

    /// Creates a request.
    public init(text: String, mediaIDs: [MediaID], scheduledAt: Timestamp? = nil, priority: Priority = .normal, traceparent: String? = nil) {
        self.text = text
        self.mediaIDs = mediaIDs
        self.scheduledAt = scheduledAt
        self.priority = priority
        self.traceparent = traceparent
    }

    /// The step that creates the post and its job (``Transition/schedule`` or ``Transition/enqueue``), and when the
    /// job may first be claimed.
    ///
    /// A `scheduled_at` later than `now` makes both `scheduled` until then; one that is absent or already
    /// past publishes now (`queued`, `run_at = now`), since waiting for a past time means not waiting.
    public func initialSchedule(now: Timestamp) -> (step: Transition, runAt: Timestamp) {
        if let scheduledAt, scheduledAt > now {
            return (.schedule, scheduledAt)
        }
        return (.enqueue, now)
    }
}

/// The rules a post's media must meet that only the database can check, and how each problem reads.
public enum MediaRule {
    /// What a medium listed in a post draft is, as the database has it.
    public enum Found: Sendable, Equatable {
        /// No such medium.
        case unknown
        /// Staged and unattached: it can be attached.
        case free
        /// Attached to a post already.
        case attached
    }

    /// The issues for `ids` (a validated draft's, or the first occurrence of each of a draft's ids), given what was found.
    ///
    /// Another post's id is not named: the medium may belong to someone else's post.
    public static func issues(_ ids: [(index: Int, id: String)], found: (String) -> Found) -> [ValidationIssue] {
        ids.compactMap { index, id in
            switch found(id) {
            case .free: nil
            case .unknown: ValidationIssue(pointer: "/media_ids/\(index)", detail: "There is no media with id \(id).")
            case .attached: ValidationIssue(pointer: "/media_ids/\(index)", detail: "Media \(id) is attached to another post.")
            }
        }
    }
}
