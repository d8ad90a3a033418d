/// A publish job: the work of uploading a post's media and committing the post, the API's job object.
///
/// `done` and `progress` are derived (from ``state`` and ``uploads``) rather than stored, so they can never
/// disagree with what they summarise; decoding ignores them for the same reason. ``Member`` lists its members: the
/// JSON is written from it, decoded by it, and SQLiteStorage derives the columns it selects from it.
public struct Job: Sendable, Equatable {
    /// The job's id (UUIDv7).
    public var id: JobID
    /// The post it publishes.
    public var postID: PostID
    /// Where it is in its life cycle.
    public var state: JobState
    /// How urgently it is claimed.
    public var priority: Priority
    /// How many times a worker has started it (a resumed job after a crash counts again).
    public var attempt: Int
    /// When it may be claimed.
    public var runAt: Timestamp
    /// Whether a client asked to cancel it while it was running.
    public var cancelRequested: Bool
    /// One entry per medium of the post, in the post's order.
    public var uploads: [Upload]
    /// Why it did not succeed, once it failed or was cancelled.
    public var error: Failure?
    /// When it was created.
    public var createdAt: Timestamp
    /// When a worker first started it.
    public var startedAt: Timestamp?
    /// When it reached a terminal state.
    public var finishedAt: Timestamp?
    /// The replica running it (its `--replica-id`); nil when it is not running.
    public var runner: String?

    /// Creates a job object.
    public init(
        id: JobID, postID: PostID, state: JobState, priority: Priority = .normal, attempt: Int = 0, runAt: Timestamp,
        cancelRequested: Bool = false, uploads: [Upload] = [], error: Failure? = nil, createdAt: Timestamp,
        startedAt: Timestamp? = nil, finishedAt: Timestamp? = nil, runner: String? = nil
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

    /// Whether the job has finished (succeeded, failed or cancelled): the API's `done`.
    public var done: Bool { state.isDone }

    /// The upload counts and bytes: the API's `progress`.
    public var progress: Progress { Progress(uploads: uploads, state: state) }

    /// The list position of this job, for a `next_cursor`.
    public var cursor: Cursor { Cursor(createdAt: createdAt, id: id.rawValue) }

    /// One medium's upload within the job.
    public struct Upload: Decodable, Sendable, Equatable {
        /// The medium being uploaded.
        public var mediaID: MediaID
        /// Where the upload is.
        public var state: UploadState
        /// Transfer attempts so far.
        public var attempts: Int
        /// The last attempt's error, if it failed.
        public var error: String?
        /// The medium's size in bytes.
        public var size: Int
        /// Bytes of this attempt the store has taken: all of them once uploaded. Live while the job runs (kept in memory,
        /// written with the job's end).
        public var bytesSent: Int

        /// Creates an upload entry.
        public init(
            mediaID: MediaID, state: UploadState = .pending, attempts: Int = 0, error: String? = nil, size: Int = 0, bytesSent: Int = 0
        ) {
            self.mediaID = mediaID
            self.state = state
            self.attempts = attempts
            self.error = error
            self.size = size
            self.bytesSent = bytesSent
        }

        /// The upload object's members.
        public enum Member: String, JSONMember {
            case mediaID = "media_id"
            case state, attempts, error, size
            case bytesSent = "bytes_sent"

            public static let keys: JSONKeys? = JSONKeys(Self.self)
        }

        // Decoded by these keys (`error` may be null).
        private typealias CodingKeys = Member
    }

    /// Why a job did not succeed: the API's `error` object.
    public struct Failure: Decodable, Sendable, Equatable {
        /// The kind of failure.
        public var code: JobErrorCode
        /// A human-readable explanation.
        public var message: String
        /// The medium at fault, for failures about one medium.
        public var mediaID: MediaID?

        /// Creates a failure.
        public init(code: JobErrorCode, message: String, mediaID: MediaID? = nil) {
            self.code = code
            self.message = message
            self.mediaID = mediaID
        }

        /// The error object's members; `media_id` is left out, not null, when the failure is not about one medium.
        public enum Member: String, JSONMember {
            case code, message
            case mediaID = "media_id"

            public static let keys: JSONKeys? = JSONKeys(Self.self)
        }

        // Decoded by these keys.
        private typealias CodingKeys = Member
    }

    /// Upload counts and bytes of a job: the API's `progress` object.
    public struct Progress: Decodable, Sendable, Equatable {
        /// The number of media in the job.
        public var total: Int
        /// How many are uploaded.
        public var uploaded: Int
        /// How many failed for good.
        public var failed: Int
        /// `bytesUploaded * 100 / bytesTotal`, rounded down and 100 only once every medium is uploaded; for a job
        /// without media, 100 once it succeeded, else 0.
        public var percent: Int
        /// The media's sizes summed.
        public var bytesTotal: Int
        /// The uploads' `bytes_sent` summed: every byte of the uploaded media, and what the store has taken of the others.
        public var bytesUploaded: Int

        /// Creates progress with explicit counts (as decoded); prefer ``init(uploads:state:)``.
        public init(total: Int, uploaded: Int, failed: Int, percent: Int, bytesTotal: Int = 0, bytesUploaded: Int = 0) {
            self.total = total
            self.uploaded = uploaded
            self.failed = failed
            self.percent = percent
            self.bytesTotal = bytesTotal
            self.bytesUploaded = bytesUploaded
        }

        /// Counts `uploads` of a job in `state`.
        public init<Uploads: Collection>(uploads: Uploads, state: JobState) where Uploads.Element: UploadValues {
            var (total, uploaded, failed, bytesTotal, bytesUploaded) = (0, 0, 0, 0, 0)
            // One pass, reading each upload's members in place (no copy of its strings).
            var index = uploads.startIndex
            while index != uploads.endIndex {
                let (state, size, bytesSent) = (uploads[index].state, uploads[index].size, uploads[index].bytesSent)
                total += 1
                if state == .uploaded { uploaded += 1 }
                if state == .failed { failed += 1 }
                bytesTotal += size
                bytesUploaded += state == .uploaded ? size : min(bytesSent, size)
                uploads.formIndex(after: &index)
            }
            // Rounded down and held below 100 until every medium is uploaded, so 100 never means "almost" (the last
            // bytes are taken before the store confirms them).
            let percent =
                switch (total, bytesTotal) {
                case (0, _): state == .succeeded ? 100 : 0
                case _ where uploaded == total: 100
                case (_, 0): uploaded * 100 / total
                default: min(99, bytesUploaded * 100 / bytesTotal)
                }
            self.init(total: total, uploaded: uploaded, failed: failed, percent: percent, bytesTotal: bytesTotal, bytesUploaded: bytesUploaded)
        }

        /// The progress object's members.
        public enum Member: String, JSONMember {
            case total, uploaded, failed, percent
            case bytesTotal = "bytes_total"
            case bytesUploaded = "bytes_uploaded"

            public static let keys: JSONKeys? = JSONKeys(Self.self)
        }

        // Decoded by these keys.
        private typealias CodingKeys = Member
    }

    /// The job object's members.
    public enum Member: String, JSONMember {
        case id
        case postID = "post_id"
        case state, done, priority, attempt
        case runAt = "run_at"
        case cancelRequested = "cancel_requested"
        case progress, uploads, error
        case createdAt = "created_at"
        case startedAt = "started_at"
        case finishedAt = "finished_at"
        case runner

        public static let keys: JSONKeys? = JSONKeys(Self.self)
    }
}

extension Job: Decodable {
    /// Decodes a job object; `done` and `progress` are ignored, being derived.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: Member.self)
        id = try container.decode(JobID.self, forKey: .id)
        postID = try container.decode(PostID.self, forKey: .postID)
        state = try container.decode(JobState.self, forKey: .state)
        priority = try container.decode(Priority.self, forKey: .priority)
        attempt = try container.decode(Int.self, forKey: .attempt)
        runAt = try container.decode(Timestamp.self, forKey: .runAt)
        cancelRequested = try container.decode(Bool.self, forKey: .cancelRequested)
        uploads = try container.decode([Upload].self, forKey: .uploads)
        error = try container.decodeIfPresent(Failure.self, forKey: .error)
        createdAt = try container.decode(Timestamp.self, forKey: .createdAt)
        startedAt = try container.decodeIfPresent(Timestamp.self, forKey: .startedAt)
        finishedAt = try container.decodeIfPresent(Timestamp.self, forKey: .finishedAt)
        runner = try container.decodeIfPresent(String.self, forKey: .runner)
    }
}

extension Job: JSONWritable {
    /// The job as JSON, in a buffer sized for its uploads: the status poll's answer.
    public var json: [UInt8] {
        var writer = JSONWriter(capacity: 576 + uploads.count * 200)
        write(to: &writer)
        return writer.bytes
    }

    /// Every member (``JSONWriter/job(_:)``).
    public func write(to writer: inout JSONWriter) {
        writer.job(self)
    }
}

extension Job.Upload: JSONWritable {
    /// Every member (``JSONWriter/upload(_:)``).
    public func write(to writer: inout JSONWriter) {
        writer.upload(self)
    }
}

extension Job.Progress: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object(Member.self) { member, writer in
            switch member {
            case .total: writer.int(total)
            case .uploaded: writer.int(uploaded)
            case .failed: writer.int(failed)
            case .percent: writer.int(percent)
            case .bytesTotal: writer.int(bytesTotal)
            case .bytesUploaded: writer.int(bytesUploaded)
            }
        }
    }
}

extension Job.Failure: JSONWritable {
    /// `media_id` only when the failure is about one medium.
    public func write(to writer: inout JSONWriter) {
        writer.object(Member.self, including: { member in member != .mediaID || mediaID != nil }) { member, writer in
            switch member {
            case .code: writer.string(code.rawValue)
            case .message: writer.string(message)
            case .mediaID: writer.string(mediaID)
            }
        }
    }
}
