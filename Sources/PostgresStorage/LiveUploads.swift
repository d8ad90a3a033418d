import HeraldCore
import HeraldStorage
import Synchronization

/// The uploads of the jobs this replica runs (kept in memory by ``UploadProgress``), to be written to PostgreSQL while
/// they change, so that every replica's reads and event streams show them: byte progress at least once a second.
///
/// One statement per replica every ``interval``, however many jobs run, and one notification per job that moved, not
/// one per byte step (a notification takes a lock at commit). Each write is fenced by the job's lease: a replica that
/// lost a job writes nothing of it, and forgets it.
final class LiveUploads: Sendable {
    /// How often the changes are written.
    static let interval = Duration.milliseconds(500)

    /// One upload's state to write, under the lease of its job.
    struct Pending: Sendable {
        let lease: JobLease
        let mediaID: MediaID
        let upload: UploadProgress.Upload
    }

    private struct State {
        /// The jobs this replica runs, by the lease its writes name.
        var leases: [JobID: JobLease] = [:]
        /// What was last written of each job's uploads.
        var written: [JobID: [MediaID: UploadProgress.Upload]] = [:]
    }

    private let state = Mutex(State())

    /// The jobs just claimed here.
    func hold(_ leases: [JobLease]) {
        state.withLock { state in
            for lease in leases {
                state.leases[lease.jobID] = lease
                state.written[lease.jobID] = [:]
            }
        }
    }

    /// The job ended here (or was put back): its own final write records its uploads.
    func release(_ jobID: JobID) {
        state.withLock { state in
            state.leases[jobID] = nil
            state.written[jobID] = nil
        }
    }

    /// The uploads whose state, attempts, error or bytes changed since they were last written.
    func pending(in progress: UploadProgress) -> [Pending] {
        let leases = state.withLock { Array($0.leases.values) }
        let current = leases.map { ($0, progress.uploads(of: $0.jobID)) }
        return state.withLock { state in
            current.flatMap { lease, uploads in
                uploads.filter { state.written[lease.jobID]?[$0.key] != $0.value }.sorted { $0.key < $1.key }
                    .map { Pending(lease: lease, mediaID: $0.key, upload: $0.value) }
            }
        }
    }

    /// `pending` was written for the jobs still `held`; the others' leases are lost, and forgotten.
    func wrote(_ pending: [Pending], held: Set<JobID>) {
        state.withLock { state in
            for item in pending {
                guard held.contains(item.lease.jobID) else {
                    if state.leases[item.lease.jobID] == item.lease { state.leases[item.lease.jobID] = nil }
                    continue
                }
                state.written[item.lease.jobID]?[item.mediaID] = item.upload
            }
        }
    }
}
