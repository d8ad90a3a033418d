import HeraldCore
import HeraldStorage
import Platform

/// Reads, long-polls and cancels jobs: the rules between the job routes and storage.
///
/// A class: the routes' handlers hold one reference, where a struct of two existentials was copied out of the closure's
/// context, and destroyed, on every status poll.
final class JobService: Sendable {
    let jobs: any JobRepository
    /// Plain status polls, read on the caller's (HTTP) thread.
    let status: any JobStatusReader
    let changes: JobChanges
    let readiness: Readiness

    /// The longest long-poll, in seconds.
    static let maxWait = 30
    /// A long-poll re-reads the job at least this often even without an event: that covers a change made by another
    /// process sharing the database, and ends the poll soon after draining begins.
    let recheckInterval: Duration

    init(
        jobs: any JobRepository, status: any JobStatusReader, changes: JobChanges, readiness: Readiness, recheckInterval: Duration = .seconds(1)
    ) {
        self.jobs = jobs
        self.status = status
        self.changes = changes
        self.readiness = readiness
        self.recheckInterval = recheckInterval
    }

    /// What a cancel did.
    enum Cancellation: Equatable {
        /// Cancelled at once (it was queued or scheduled), or asked to stop (it runs).
        case accepted(Job)
        /// It was cancelled already.
        case alreadyCancelled(Job)
    }

    /// The job as stored now, as its JSON object, and whether it is done: read without a hop, written from the row where
    /// the backend can (a plain status poll).
    func current(_ id: String, tenant: Tenant) throws -> (json: OwnedBytes, done: Bool) {
        // Below glibc's large requests (1,024 bytes and up), each of which first consolidates the freed small chunks: a
        // job of four uploads fits; a larger one grows the buffer.
        var writer = JSONWriter(capacity: 1000)
        guard let jobID = JobID(validating: id), let state = try status.write(id: jobID, tenant: tenant, to: &writer) else {
            throw ServiceError.notFound(kind: "job", id: id)
        }
        return (writer.finish(), state.isDone)
    }

    /// The job, once it is done or `timeout` has passed (or the server drains, or the request is cancelled).
    ///
    /// Waits for the job's change events, re-reading it after each that may have ended it (or after
    /// ``recheckInterval`` at most): never a busy loop, and a job that finishes answers at once. The event generation is taken before each read, so a
    /// change landing between the read and the wait is not missed. Each read is the status poll's (``JobStatusReader``):
    /// on SQLite on the task's own thread (one prepared statement, shorter than the hop to a GRDB reader queue and
    /// back); on PostgreSQL through the pool, never holding the thread while the database answers.
    func job(_ id: String, tenant: Tenant, waitingUpTo timeout: Duration) async throws -> Job {
        guard let jobID = JobID(validating: id) else { throw ServiceError.notFound(kind: "job", id: id) }
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        var generation = changes.generation
        guard var job = try await status.read(id: jobID, tenant: tenant) else { throw ServiceError.notFound(kind: "job", id: id) }
        while !job.done, !readiness.isDraining, !Task.isCancelled {
            let remaining = clock.now.duration(to: deadline)
            guard remaining > .zero else { break }
            await changes.waitForChange(of: jobID, after: generation, timeout: min(remaining, recheckInterval))
            // An upload's progress changes the job many times before its end: only a change that may have ended it (or
            // the periodic recheck) is worth a read.
            let skip = changes.changedButNotDone(jobID, after: generation)
            generation = changes.generation
            if skip { continue }
            guard let current = try await status.read(id: jobID, tenant: tenant) else { throw ServiceError.notFound(kind: "job", id: id) }
            job = current
        }
        return job
    }

    /// One page of jobs, newest first.
    func list(_ query: ListParameters<JobState>, tenant: Tenant) async throws -> Page<Job> {
        try await jobs.list(tenant: tenant, state: query.state, limit: query.limit, after: query.cursor)
    }

    /// Cancels a queued or scheduled job at once, or asks a running one to stop (its runner hears the change).
    func cancel(_ id: String, tenant: Tenant) async throws -> Cancellation {
        guard let jobID = JobID(validating: id) else { throw ServiceError.notFound(kind: "job", id: id) }
        switch try await jobs.requestCancel(id: jobID, tenant: tenant, now: .now()) {
        case .cancelledNow(let job), .requested(let job): return .accepted(job)
        case .alreadyCancelled(let job): return .alreadyCancelled(job)
        case .finished(let job): throw ServiceError.conflict("job \(job.id) has already \(job.state.rawValue); it cannot be cancelled")
        case .notFound: throw ServiceError.notFound(kind: "job", id: id)
        }
    }
}
