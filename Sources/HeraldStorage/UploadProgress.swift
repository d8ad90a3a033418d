public import HeraldCore
import Synchronization

/// Each running job's uploads as its runner last set them (state, attempts, error, bytes taken), kept in memory:
/// SQLite is written once, with the job's end (a backend's final writes of a job take ``uploads(of:)``).
///
/// The runner sets an upload's state (``update(jobID:mediaID:state:attempts:error:)``) and reports bytes as the
/// store takes them (``report(jobID:mediaID:bytes:)``); every read of a job lays them over its uploads
/// (``apply(to:)``); event streams hear of each state change at once and of bytes at most once per ``interval`` per
/// job (a ``JobChange`` of kind ``JobChange/Kind/live``). An event's id is ``eventID(version:step:)``: the job's
/// durable version and a step that counts live events since that version, so ids only grow for a job, across
/// restarts too (a restart re-queues running jobs, which writes a new version).
///
/// A crash forgets what was kept here, and the job runs again from the start (object keys are deterministic), as it
/// would had each change been written: what a 2xx answered for is all durable.
public final class UploadProgress: Sendable {
    /// Steps per version: an event id is `version * stepsPerVersion + step`.
    public static let stepsPerVersion = 1_000_000

    /// The id of an event showing `version` of a job and `step` live events since it.
    public static func eventID(version: Int, step: Int) -> Int { version * stepsPerVersion + step }

    /// The least time between two byte events of one job (state changes are announced at once, apart from these).
    public let interval: Duration

    /// One upload as its runner last set it.
    package struct Upload: Sendable, Equatable {
        package var state: UploadState
        package var attempts: Int
        package var error: String?
        /// Bytes the store took of the current (or, once it stopped, the last) attempt.
        package var bytes = 0
    }

    private struct Entry {
        /// The last version seen, and the live events since it.
        var version = -1
        var step = 0
        var uploads: [MediaID: Upload] = [:]
        /// When bytes were last announced (state changes are, at once, apart).
        var announced: ContinuousClock.Instant?
        /// When the job stopped running: kept a while, so that a read that saw it still running shows its last uploads.
        var ended: ContinuousClock.Instant?
    }

    private struct State {
        var entries: [JobID: Entry] = [:]
        /// Ended entries, oldest first, dropped once older than ``UploadProgress/kept``.
        var ended: [(jobID: JobID, at: ContinuousClock.Instant)] = []
        var endedStart = 0
    }

    /// How long an ended job's entry stays: far longer than a read takes between SQLite and the overlay.
    private static let kept = Duration.seconds(5)

    private let changes: JobChanges
    private let state = Mutex(State())

    /// Announces through `changes`, and follows its commits to learn which jobs run.
    package init(changes: JobChanges, interval: Duration = .milliseconds(250)) {
        self.changes = changes
        self.interval = interval
        changes.observe { [weak self] change in self?.committed(change) }
    }

    /// The runner sets one upload's state (an attempt starting: `uploading`, with 0 bytes; its end: `uploaded`, or
    /// `pending` for a retry with its `error`, or `failed`), announced to event streams at once. Ignored unless the job
    /// runs (from its claim's commit to its end's).
    public func update(jobID: JobID, mediaID: MediaID, state upload: UploadState, attempts: Int, error: String?) {
        let announce = state.withLock { state -> JobChange? in
            guard var entry = state.entries[jobID], entry.ended == nil else { return nil }
            defer { state.entries[jobID] = entry }
            // A stopped attempt keeps what it reached; a new one starts from nothing.
            let bytes = upload == .uploading ? 0 : entry.uploads[mediaID]?.bytes ?? 0
            entry.uploads[mediaID] = Upload(state: upload, attempts: attempts, error: error, bytes: bytes)
            return Self.announce(&entry, jobID: jobID)
        }
        if let announce { changes.publishLive(announce) }
    }

    /// `bytes` of `mediaID`'s current attempt are taken: announced to event streams unless the job's last live event
    /// is more recent than ``interval`` (the next report, or the upload's state change, carries them then).
    public func report(jobID: JobID, mediaID: MediaID, bytes: Int) {
        let now = ContinuousClock.now
        let announce = state.withLock { state -> JobChange? in
            // Only an attempt under way takes bytes (a late report of an ended one is dropped, not remembered).
            guard var entry = state.entries[jobID], entry.ended == nil, entry.uploads[mediaID]?.state == .uploading else { return nil }
            defer { state.entries[jobID] = entry }
            entry.uploads[mediaID]?.bytes = bytes
            if let announced = entry.announced, now - announced < interval { return nil }
            entry.announced = now
            return Self.announce(&entry, jobID: jobID)
        }
        if let announce { changes.publishLive(announce) }
    }

    /// The uploads of `jobID` its runner has set, to be written with the job's end.
    package func uploads(of jobID: JobID) -> [MediaID: Upload] {
        state.withLock { $0.entries[jobID]?.uploads ?? [:] }
    }

    /// Lays the live uploads over the job's, if it runs.
    public func apply(to job: inout Job) {
        guard job.state == .running else { return }
        state.withLock { state in
            if let entry = state.entries[job.id] { Self.overlay(entry, on: &job.uploads) { $0.mediaID } }
        }
    }

    /// Lays the live uploads over those of job `jobID` read in place (``BorrowedJob``), if it runs (`state`).
    public func apply(to uploads: inout [BorrowedUpload], of jobID: JobID, state jobState: JobState) {
        guard jobState == .running else { return }
        state.withLock { state in
            if let entry = state.entries[jobID] { Self.overlay(entry, on: &uploads) { MediaID(String($0.mediaID)) } }
        }
    }

    /// `job`, read at `version`, with the live uploads laid over it and its event id.
    ///
    /// A version older than one already seen gets step 0, so an event made from a stale read is never newer than
    /// one a stream has sent. Also refreshes a snapshot taken earlier: its committed state stays, its uploads are now's.
    public func snapshot(_ job: Job, version: Int) -> JobSnapshot {
        var snapshot = JobSnapshot(job: job, version: version, eventID: Self.eventID(version: version, step: 0))
        guard job.state == .running else { return snapshot }
        state.withLock { state in
            guard var entry = state.entries[job.id] else { return }
            if version > entry.version, entry.ended == nil {
                entry.version = version
                entry.step = 0
                state.entries[job.id] = entry
            }
            Self.overlay(entry, on: &snapshot.job.uploads) { $0.mediaID }
            snapshot.eventID = Self.eventID(version: version, step: version == entry.version ? entry.step : 0)
        }
        return snapshot
    }

    // MARK: Implementation

    /// The next step of `entry`, as a change to announce; nil once a version has used every step.
    private static func announce(_ entry: inout Entry, jobID: JobID) -> JobChange? {
        guard entry.step < stepsPerVersion - 1 else { return nil }
        entry.step += 1
        return JobChange(jobID: jobID, version: entry.version, state: .running, cancelRequested: false, kind: .live)
    }

    private static func overlay<Upload: MutableUploadValues>(_ entry: Entry, on uploads: inout [Upload], mediaID: (Upload) -> MediaID) {
        for index in uploads.indices {
            guard let live = entry.uploads[mediaID(uploads[index])] else { continue }
            uploads[index].state = live.state
            uploads[index].attempts = live.attempts
            uploads[index].error = live.error
            uploads[index].bytesSent = live.state == .uploaded ? uploads[index].size : min(live.bytes, uploads[index].size)
        }
    }

    /// A committed change: a claim starts a fresh entry, a new version restarts the steps, an end keeps the entry
    /// for a while (``kept``).
    private func committed(_ change: JobChange) {
        let now = ContinuousClock.now
        state.withLock { state in
            Self.forgetEnded(&state, now: now)
            let entry = state.entries[change.jobID]
            guard change.state == .running else {
                if var entry, entry.ended == nil {
                    entry.ended = now
                    state.entries[change.jobID] = entry
                    state.ended.append((change.jobID, now))
                }
                return
            }
            guard var entry, entry.ended == nil else {
                // Claimed (again): its uploads start from what SQLite says.
                state.entries[change.jobID] = Entry(version: change.version)
                return
            }
            if change.version > entry.version {
                entry.version = change.version
                entry.step = 0
                state.entries[change.jobID] = entry
            }
        }
    }

    private static func forgetEnded(_ state: inout State, now: ContinuousClock.Instant) {
        while state.endedStart < state.ended.count, now - state.ended[state.endedStart].at > kept {
            let (jobID, at) = state.ended[state.endedStart]
            state.endedStart += 1
            // A job claimed again since has a live entry of its own.
            if state.entries[jobID]?.ended == at { state.entries[jobID] = nil }
        }
        if state.endedStart > 1024, state.endedStart * 2 > state.ended.count {
            state.ended.removeFirst(state.endedStart)
            state.endedStart = 0
        }
    }
}

/// A job as one read saw it, with its live uploads, and the id of the event that shows it.
public struct JobSnapshot: Sendable {
    /// The job.
    public var job: Job
    /// Its durable version when read.
    public var version: Int
    /// ``UploadProgress/eventID(version:step:)``: grows with every committed change and live event.
    public var eventID: Int
}

/// An upload whose live values can be laid over (``UploadProgress``).
protocol MutableUploadValues: UploadValues {
    var state: UploadState { get set }
    var attempts: Int { get set }
    var error: String? { get set }
    var bytesSent: Int { get set }
}

extension Job.Upload: MutableUploadValues {}
extension BorrowedUpload: MutableUploadValues {}
