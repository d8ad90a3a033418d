/// A publish job: the work of uploading a post's media and committing the post, the API's job object.
///
/// `done` and `progress` are derived (from ``state`` and ``uploads``) rather than stored, so they can never
/// disagree with what they summarise; decoding ignores them for the same reason.
public struct Job: Codable, Sendable, Equatable {
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

    /// Creates a job object.
    public init(
        id: JobID, postID: PostID, state: JobState, priority: Priority = .normal, attempt: Int = 0, runAt: Timestamp,
        cancelRequested: Bool = false, uploads: [Upload] = [], error: Failure? = nil, createdAt: Timestamp,
        startedAt: Timestamp? = nil, finishedAt: Timestamp? = nil
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
    }

    /// Whether the job has finished (succeeded, failed or cancelled): the API's `done`.
    public var done: Bool { state.isDone }

    /// The upload counts and bytes: the API's `progress`.
    public var progress: Progress { Progress(uploads: uploads, state: state) }

    /// The list position of this job, for a `next_cursor`.
    public var cursor: Cursor { Cursor(createdAt: createdAt, id: id.rawValue) }

    /// One medium's upload within the job.
    public struct Upload: Codable, Sendable, Equatable {
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

        private enum CodingKeys: String, CodingKey {
            case mediaID = "media_id"
            case state, attempts, error, size
            case bytesSent = "bytes_sent"
        }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            mediaID = try container.decode(MediaID.self, forKey: .mediaID)
            state = try container.decode(UploadState.self, forKey: .state)
            attempts = try container.decode(Int.self, forKey: .attempts)
            error = try container.decodeIfPresent(String.self, forKey: .error)
            size = try container.decode(Int.self, forKey: .size)
            bytesSent = try container.decode(Int.self, forKey: .bytesSent)
        }

        /// Encodes every key, with `null` for no error.
        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(mediaID, forKey: .mediaID)
            try container.encode(state, forKey: .state)
            try container.encode(attempts, forKey: .attempts)
            try container.encodeNullable(error, forKey: .error)
            try container.encode(size, forKey: .size)
            try container.encode(bytesSent, forKey: .bytesSent)
        }
    }

    /// Why a job did not succeed: the API's `error` object.
    public struct Failure: Codable, Sendable, Equatable {
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

        private enum CodingKeys: String, CodingKey {
            case code, message
            case mediaID = "media_id"
        }

        // Synthesized coding is what the API wants here: `media_id` is optional ("media_id"?) and
        // is left out, not null, when the failure is not about one medium.
    }

    /// Upload counts and bytes of a job: the API's `progress` object.
    public struct Progress: Codable, Sendable, Equatable {
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
        public init(uploads: [Upload], state: JobState) {
            let total = uploads.count
            let uploaded = uploads.count(where: { $0.state == .uploaded })
            let failed = uploads.count(where: { $0.state == .failed })
            let bytesTotal = uploads.reduce(0) { $0 + $1.size }
            let bytesUploaded = uploads.reduce(0) { $0 + ($1.state == .uploaded ? $1.size : min($1.bytesSent, $1.size)) }
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

        private enum CodingKeys: String, CodingKey {
            case total, uploaded, failed, percent
            case bytesTotal = "bytes_total"
            case bytesUploaded = "bytes_uploaded"
        }
    }

    private enum CodingKeys: String, CodingKey {
        case id
        case postID = "post_id"
        case state, done, priority, attempt
        case runAt = "run_at"
        case cancelRequested = "cancel_requested"
        case progress, uploads, error
        case createdAt = "created_at"
        case startedAt = "started_at"
        case finishedAt = "finished_at"
    }

    /// Decodes a job object; `done` and `progress` are ignored, being derived.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
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
    }

    /// Encodes every key of the API's job object, with `null` for absent values.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(postID, forKey: .postID)
        try container.encode(state, forKey: .state)
        try container.encode(done, forKey: .done)
        try container.encode(priority, forKey: .priority)
        try container.encode(attempt, forKey: .attempt)
        try container.encode(runAt, forKey: .runAt)
        try container.encode(cancelRequested, forKey: .cancelRequested)
        try container.encode(progress, forKey: .progress)
        try container.encode(uploads, forKey: .uploads)
        try container.encodeNullable(error, forKey: .error)
        try container.encode(createdAt, forKey: .createdAt)
        try container.encodeNullable(startedAt, forKey: .startedAt)
        try container.encodeNullable(finishedAt, forKey: .finishedAt)
    }
}
