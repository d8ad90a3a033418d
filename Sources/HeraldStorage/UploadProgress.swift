public import HeraldCore
import Synchronization

/// The bytes each running upload's store has taken, kept in memory: SQLite is written only at state changes.
///
/// The runner reports bytes as the store takes them (``report(jobID:mediaID:bytes:)``); every read of a job lays them
/// over its `uploading` uploads (``apply(to:)``); event streams hear of them at most once per ``interval`` per job
/// (a ``JobChange`` of kind ``JobChange/Kind/bytes``). An event's id is ``eventID(version:step:)``: the job's durable
/// version and a step that counts byte events since that version, so ids only grow for a job, across restarts too
/// (a restart re-queues running jobs, which writes a new version).
public final class UploadProgress: Sendable {
    /// Steps per version: an event id is `version * stepsPerVersion + step`.
    public static let stepsPerVersion = 1_000_000

    /// The id of an event showing `version` of a job and `step` byte events since it.
    public static func eventID(version: Int, step: Int) -> Int { version * stepsPerVersion + step }

    /// The least time between two byte events of one job.
    public let interval: Duration

    private struct Entry {
        /// The last version seen, and the byte events since it.
        var version = -1
        var step = 0
        var bytes: [MediaID: Int] = [:]
        var announced: ContinuousClock.Instant?
    }

    private let changes: JobChanges
    private let entries = Mutex([JobID: Entry]())

    /// Announces through `changes`, and follows its commits to forget jobs that stop running.
    init(changes: JobChanges, interval: Duration = .milliseconds(250)) {
        self.changes = changes
        self.interval = interval
        changes.observe { [weak self] change in self?.committed(change) }
    }

    /// `bytes` of `mediaID`'s current attempt are taken: announced to event streams unless the job's last byte event
    /// is more recent than ``interval`` (the next report, or the upload's state change, carries them then).
    public func report(jobID: JobID, mediaID: MediaID, bytes: Int) {
        let now = ContinuousClock.now
        let announce = entries.withLock { entries -> JobChange? in
            // A job is known from its claim on (a late report of an ended job is dropped, not remembered).
            guard var entry = entries[jobID] else { return nil }
            defer { entries[jobID] = entry }
            entry.bytes[mediaID] = bytes
            if let announced = entry.announced, now - announced < interval { return nil }
            guard entry.step < Self.stepsPerVersion - 1 else { return nil }
            entry.step += 1
            entry.announced = now
            return JobChange(jobID: jobID, version: entry.version, state: .running, cancelRequested: false, kind: .bytes)
        }
        if let announce { changes.publishBytes(announce) }
    }

    /// An upload attempt starts (or stops): its count goes back to 0.
    func reset(jobID: JobID, mediaID: MediaID) {
        entries.withLock { $0[jobID]?.bytes[mediaID] = nil }
    }

    /// The bytes `mediaID`'s attempt has reached, 0 if none were reported.
    func bytes(jobID: JobID, mediaID: MediaID) -> Int {
        entries.withLock { $0[jobID]?.bytes[mediaID] ?? 0 }
    }

    /// Lays the live counts over the job's `uploading` uploads.
    public func apply(to job: inout Job) {
        guard job.state == .running else { return }
        entries.withLock { entries in
            if let entry = entries[job.id] { Self.overlay(entry, on: &job) }
        }
    }

    /// `job`, read at `version`, with the live counts laid over it and its event id.
    ///
    /// A version older than one already seen gets step 0, so an event made from a stale read is never newer than
    /// one a stream has sent. Also refreshes a snapshot taken earlier: its committed state stays, its bytes are now's.
    public func snapshot(_ job: Job, version: Int) -> JobSnapshot {
        var snapshot = JobSnapshot(job: job, version: version, eventID: Self.eventID(version: version, step: 0))
        guard job.state == .running else { return snapshot }
        entries.withLock { entries in
            guard var entry = entries[job.id] else { return }
            if version > entry.version {
                entry.version = version
                entry.step = 0
                entries[job.id] = entry
            }
            Self.overlay(entry, on: &snapshot.job)
            snapshot.eventID = Self.eventID(version: version, step: version == entry.version ? entry.step : 0)
        }
        return snapshot
    }

    private static func overlay(_ entry: Entry, on job: inout Job) {
        for index in job.uploads.indices where job.uploads[index].state == .uploading {
            if let bytes = entry.bytes[job.uploads[index].mediaID] {
                job.uploads[index].bytesSent = min(bytes, job.uploads[index].size)
            }
        }
    }

    /// A committed change: a new version restarts the steps; a job no longer running is forgotten.
    private func committed(_ change: JobChange) {
        entries.withLock { entries in
            guard change.state == .running else {
                entries[change.jobID] = nil
                return
            }
            var entry = entries[change.jobID, default: Entry()]
            if change.version > entry.version {
                entry.version = change.version
                entry.step = 0
            }
            entries[change.jobID] = entry
        }
    }
}

/// A job as one read saw it, with its live bytes, and the id of the event that shows it.
public struct JobSnapshot: Sendable {
    /// The job.
    public var job: Job
    /// Its durable version when read.
    public var version: Int
    /// ``UploadProgress/eventID(version:step:)``: grows with every committed change and byte event.
    public var eventID: Int
}
