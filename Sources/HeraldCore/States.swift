/// Where a medium's bytes are: kept in staging, being copied to the store, in the store, or given up on.
public enum MediaState: String, Codable, Sendable, CaseIterable {
    /// Received and kept in staging; not yet attached to a published post.
    case staged
    /// Being copied to the media store by a publish job.
    case uploading
    /// In the media store, with a public `url`.
    case uploaded
    /// The last upload attempt failed for good.
    case failed
}

/// A post's life cycle, from accepted to published (or not).
public enum PostState: String, Codable, Sendable, CaseIterable {
    /// Its job waits to be claimed.
    case queued
    /// Its job waits for `scheduled_at`.
    case scheduled
    /// Its job is uploading the media.
    case publishing
    /// Every medium is uploaded and the post is committed.
    case published
    /// An upload failed for good; the post can be published again.
    case failed
    /// Its job was cancelled; the post can be published again.
    case cancelled

    /// Whether a new job may publish the post again (`POST /v1/posts/{id}/publish`).
    public var canRepublish: Bool { self == .failed || self == .cancelled }
}

/// A publish job's life cycle.
public enum JobState: String, Codable, Sendable, CaseIterable {
    /// Waits to be claimed by a worker.
    case queued
    /// Waits for its `run_at` time.
    case scheduled
    /// Claimed by a worker, uploading.
    case running
    /// The post is published.
    case succeeded
    /// An upload failed for good, or the job could not run.
    case failed
    /// Cancelled by a client before the post was committed.
    case cancelled

    /// Whether the job has finished, whatever the outcome: the API's `done`.
    public var isDone: Bool {
        switch self {
        case .succeeded, .failed, .cancelled: true
        case .queued, .scheduled, .running: false
        }
    }

    /// The states of a job that still has work ahead: a post has at most one such job.
    public static let active: [JobState] = [.queued, .scheduled, .running]
}

/// The state of one medium's upload within one job.
public enum UploadState: String, Codable, Sendable, CaseIterable {
    /// Not started yet.
    case pending
    /// Being transferred (possibly a retry).
    case uploading
    /// In the store.
    case uploaded
    /// Failed for good: attempts exhausted or a permanent error.
    case failed
    /// Stopped because the job was cancelled or another upload failed.
    case cancelled
}

/// How urgently a post's job is claimed: every high job before any normal one, every normal before any low.
public enum Priority: String, Codable, Sendable, CaseIterable {
    /// Claimed after every normal and high job that is due.
    case low
    /// The default.
    case normal
    /// Claimed before every normal and low job that is due.
    case high

    /// The sortable number `jobs.priority` stores: 0 for high, 1 for normal, 2 for low.
    ///
    /// Smaller first, so `ORDER BY priority` ascending claims the most urgent job first.
    public var rank: Int {
        switch self {
        case .high: 0
        case .normal: 1
        case .low: 2
        }
    }

    /// The priority stored as `rank`, or nil for any other number.
    public init?(rank: Int) {
        switch rank {
        case 0: self = .high
        case 1: self = .normal
        case 2: self = .low
        default: return nil
        }
    }
}

/// Why a job did not succeed: the `code` of the job's `error` object.
public enum JobErrorCode: String, Codable, Sendable, CaseIterable {
    /// An upload failed for good; the error names the medium.
    case uploadFailed = "upload_failed"
    /// The job was cancelled.
    case cancelled
    /// A medium's staged bytes are gone; the error names the medium.
    case mediaMissing = "media_missing"
    /// Anything else: a bug or an unexpected failure of Herald itself.
    case `internal`
}

// MARK: The publish state machine

/// One step of a publish: how it moves a job, its post, the post's media and the job's uploads together.
///
/// Storage applies each step in one transaction (`Transitions` in HeraldStorage), binding these states, so the
/// rows of a publish can only ever be in the combinations listed here.
public enum Transition: Sendable, CaseIterable {
    /// A post is created (or published again) with a new job that runs now.
    case enqueue
    /// A post is created with a new job that waits for `scheduled_at`.
    case schedule
    /// A scheduled job's time came.
    case promote
    /// A worker took the job: its uploads start.
    case claim
    /// Every upload succeeded: the post is published.
    case commit
    /// An upload failed for good.
    case fail
    /// A client cancelled the job (before the commit).
    case cancel
    /// The job goes back to the queue (shutdown, or its runner's lease expired), to run again from the start.
    case putBack

    /// The states the job may be in before the step (empty: the job is new).
    public var jobFrom: [JobState] {
        switch self {
        case .enqueue, .schedule: []
        case .promote: [.scheduled]
        case .claim: [.queued]
        case .commit, .fail, .putBack: [.running]
        case .cancel: JobState.active
        }
    }

    /// The job's state after the step.
    public var job: JobState {
        switch self {
        case .enqueue, .promote, .putBack: .queued
        case .schedule: .scheduled
        case .claim: .running
        case .commit: .succeeded
        case .fail: .failed
        case .cancel: .cancelled
        }
    }

    /// The post's state after the step.
    public var post: PostState {
        switch self {
        case .enqueue, .promote, .putBack: .queued
        case .schedule: .scheduled
        case .claim: .publishing
        case .commit: .published
        case .fail: .failed
        case .cancel: .cancelled
        }
    }

    /// The state of the post's media after the step; nil leaves them as they are. A staged medium has no URL.
    public var media: MediaState? {
        switch self {
        case .enqueue, .schedule, .promote: nil
        case .claim: .uploading
        case .commit: .uploaded
        case .fail, .cancel, .putBack: .staged
        }
    }

    /// Which of the job's uploads move (`from`; empty: all), and to what; nil leaves them as they are.
    ///
    /// A failed job keeps the failed upload as the runner wrote it; a cancel stops everything not in the store.
    public var uploads: (from: [UploadState], to: UploadState)? {
        switch self {
        case .enqueue, .schedule: (from: [], to: .pending)
        case .promote: nil
        case .claim, .putBack: (from: [], to: .pending)
        case .commit: (from: [], to: .uploaded)
        case .fail: (from: [.pending, .uploading], to: .cancelled)
        case .cancel: (from: [.pending, .uploading, .failed, .cancelled], to: .cancelled)
        }
    }
}
