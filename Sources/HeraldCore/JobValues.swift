/// The values a job object is written from, wherever they are held: a ``Job``, or a status read's row where it lies
/// (``BorrowedJob``: no `Job`, no `String` per id).
///
/// ``JSONWriter/job(_:)`` walks ``Job/Member`` over either: the object's one definition. The requirements are named as
/// ``Job``'s own members, so a job conforms as it is.
public protocol JobValues {
    associatedtype JobIDText: JSONStringValue
    associatedtype PostIDText: JSONStringValue
    associatedtype Instant: JSONTimestampValue
    associatedtype UploadList: Collection where UploadList.Element: UploadValues

    var id: JobIDText { get }
    var postID: PostIDText { get }
    var state: JobState { get }
    var priority: Priority { get }
    var attempt: Int { get }
    var runAt: Instant { get }
    var cancelRequested: Bool { get }
    var uploads: UploadList { get }
    var error: Job.Failure? { get }
    var createdAt: Instant { get }
    var startedAt: Instant? { get }
    var finishedAt: Instant? { get }
    var runner: String? { get }
}

/// The values an upload object is written from: a ``Job/Upload``, or a row's (``BorrowedUpload``).
public protocol UploadValues {
    associatedtype MediaIDText: JSONStringValue

    var mediaID: MediaIDText { get }
    var state: UploadState { get }
    var attempts: Int { get }
    var error: String? { get }
    var size: Int { get }
    var bytesSent: Int { get }
}

extension Job: JobValues {}
extension Job.Upload: UploadValues {}

/// A string member's value, however it is held.
public protocol JSONStringValue {
    /// Writes the value as a JSON string, escaped where needed.
    func write(to writer: inout JSONWriter)
}

extension String: JSONStringValue {
    public func write(to writer: inout JSONWriter) { writer.string(self) }
}

extension ID: JSONStringValue {
    public func write(to writer: inout JSONWriter) { writer.string(rawValue) }
}

/// UTF-8 text read in place (a database column), valid while whoever lent it says so.
public struct UTF8Text: JSONStringValue {
    public let bytes: UnsafeBufferPointer<UInt8>

    public init(_ bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

    public func write(to writer: inout JSONWriter) { writer.string(utf8: bytes) }
}

/// A timestamp member's value: a ``Timestamp``, or one read as text in place (``TimestampText``).
public protocol JSONTimestampValue {
    /// Writes the value in its fixed-width RFC 3339 form, as a JSON string.
    func write(to writer: inout JSONWriter)
}

extension Timestamp: JSONTimestampValue {
    public func write(to writer: inout JSONWriter) { writer.timestamp(self) }
}

/// A timestamp read as text in place: copied as it is when it is already in the form Herald writes (as Herald stores
/// it), else written from its value.
public struct TimestampText: JSONTimestampValue {
    /// The instant.
    public let value: Timestamp
    /// The stored text when it is the fixed-width form itself.
    private let canonical: UnsafeBufferPointer<UInt8>?

    /// Nil when `utf8` is not an RFC 3339 date-time (``Timestamp/init(rfc3339:)-(UnsafeBufferPointer<UInt8>)``).
    public init?(_ utf8: UnsafeBufferPointer<UInt8>) {
        guard let value = Timestamp(rfc3339: utf8) else { return nil }
        self.value = value
        // Parsed, so digits and separators are in place: only the variants the parser accepts and the fixed form
        // does not use remain (lowercase `t`/`z`, an offset, other fraction widths, a leap second's `60`).
        let fixed =
            utf8.count == Timestamp.rfc3339Width && utf8[10] == UInt8(ascii: "T") && utf8[19] == UInt8(ascii: ".")
            && utf8[23] == UInt8(ascii: "Z") && utf8[17] != UInt8(ascii: "6")
        canonical = fixed ? utf8 : nil
    }

    public func write(to writer: inout JSONWriter) {
        if let canonical { writer.timestamp(text: canonical) } else { writer.timestamp(value) }
    }
}

/// A job whose values are views of bytes another holds (a status read's row and the uploads copied beside it): written
/// as a ``Job`` is, by ``JSONWriter/job(_:)``, while they are lent.
public struct BorrowedJob: JobValues, JSONWritable {
    public var id: UTF8Text
    public var postID: UTF8Text
    public var state: JobState
    public var priority: Priority
    public var attempt: Int
    public var runAt: TimestampText
    public var cancelRequested: Bool
    public var uploads: UnsafeBufferPointer<BorrowedUpload>
    public var error: Job.Failure?
    public var createdAt: TimestampText
    public var startedAt: TimestampText?
    public var finishedAt: TimestampText?
    public var runner: String?

    public init(
        id: UTF8Text, postID: UTF8Text, state: JobState, priority: Priority, attempt: Int, runAt: TimestampText, cancelRequested: Bool,
        uploads: UnsafeBufferPointer<BorrowedUpload>, error: Job.Failure?, createdAt: TimestampText, startedAt: TimestampText?,
        finishedAt: TimestampText?, runner: String?
    ) {
        self.id = id
        self.postID = postID
        self.state = state
        self.priority = priority
        self.attempt = attempt
        self.runAt = runAt
        self.cancelRequested = cancelRequested
        self.uploads = uploads
        self.error = error
        self.createdAt = createdAt
        self.startedAt = startedAt
        self.finishedAt = finishedAt
        self.runner = runner
    }

    public func write(to writer: inout JSONWriter) { writer.job(self) }
}

extension Job {
    /// The job `borrowed` shows, its text copied into strings of its own.
    public init(_ borrowed: BorrowedJob) {
        self.init(
            id: JobID(String(borrowed.id)), postID: PostID(String(borrowed.postID)), state: borrowed.state, priority: borrowed.priority,
            attempt: borrowed.attempt, runAt: borrowed.runAt.value, cancelRequested: borrowed.cancelRequested,
            uploads: borrowed.uploads.map {
                Upload(
                    mediaID: MediaID(String($0.mediaID)), state: $0.state, attempts: $0.attempts, error: $0.error, size: $0.size,
                    bytesSent: $0.bytesSent)
            },
            error: borrowed.error, createdAt: borrowed.createdAt.value, startedAt: borrowed.startedAt?.value,
            finishedAt: borrowed.finishedAt?.value, runner: borrowed.runner)
    }
}

extension String {
    /// A copy of text read in place.
    public init(_ text: UTF8Text) { self.init(decoding: text.bytes, as: UTF8.self) }
}

/// An upload of a ``BorrowedJob``.
public struct BorrowedUpload: UploadValues {
    public var mediaID: UTF8Text
    public var state: UploadState
    public var attempts: Int
    public var error: String?
    public var size: Int
    public var bytesSent: Int

    public init(mediaID: UTF8Text, state: UploadState, attempts: Int, error: String?, size: Int, bytesSent: Int) {
        self.mediaID = mediaID
        self.state = state
        self.attempts = attempts
        self.error = error
        self.size = size
        self.bytesSent = bytesSent
    }
}

extension JSONWriter {
    /// The job object: every member of ``Job/Member`` in order, `null` for absent values. Its one definition, whatever
    /// holds the values (alone for the status poll, or within `{"post", "job"}` and list pages).
    ///
    /// Internal: called with concrete types here (``Job/write(to:)``, ``BorrowedJob/write(to:)``), so that it is
    /// specialized; from another module it would run generic, its metadata looked up at every call.
    mutating func job(_ job: some JobValues) {
        object(Job.Member.self) { member, writer in
            switch member {
            case .id: job.id.write(to: &writer)
            case .postID: job.postID.write(to: &writer)
            case .state: writer.string(job.state.rawValue)
            case .done: writer.bool(job.state.isDone)
            case .priority: writer.string(job.priority.rawValue)
            case .attempt: writer.int(job.attempt)
            case .runAt: job.runAt.write(to: &writer)
            case .cancelRequested: writer.bool(job.cancelRequested)
            case .progress: Job.Progress(uploads: job.uploads, state: job.state).write(to: &writer)
            case .uploads:
                writer.beginArray()
                for upload in job.uploads { writer.upload(upload) }
                writer.endArray()
            case .error: writer.value(job.error)
            case .createdAt: job.createdAt.write(to: &writer)
            case .startedAt: writer.timestamp(job.startedAt)
            case .finishedAt: writer.timestamp(job.finishedAt)
            case .runner: writer.string(job.runner)
            }
        }
    }

    /// The upload object: every member of ``Job/Upload/Member``, `null` for no error.
    mutating func upload(_ upload: some UploadValues) {
        object(Job.Upload.Member.self) { member, writer in
            switch member {
            case .mediaID: upload.mediaID.write(to: &writer)
            case .state: writer.string(upload.state.rawValue)
            case .attempts: writer.int(upload.attempts)
            case .error: writer.string(upload.error)
            case .size: writer.int(upload.size)
            case .bytesSent: writer.int(upload.bytesSent)
            }
        }
    }

    /// A timestamp value, or `null`.
    mutating func timestamp(_ value: (some JSONTimestampValue)?) {
        if let value { value.write(to: &self) } else { null() }
    }
}
