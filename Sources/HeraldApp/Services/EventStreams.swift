import HTTPTypes
import HeraldCore
import HeraldStorage
import MicroHTTP
import Synchronization

/// Server-Sent Events of job changes: `GET /v1/jobs/{id}/events` and `GET /v1/events`.
///
/// A stream is a task that waits: for a committed change to one of its jobs (``JobChanges``), for the keep-alive
/// timer, or for shutdown. While it waits its connection is suspended in libmicrohttpd (the streamed response's
/// reader has nothing to send), so an idle stream holds no thread and polls nothing.
///
/// A committed change is read from SQLite (one read per stream). A byte event is not: the stream lays the new counts
/// (``UploadProgress``) over the job it last sent, whose committed part is still current.
struct EventStreams: Sendable {
    let jobs: any JobRepository
    let changes: JobChanges
    let progress: UploadProgress
    let readiness: Readiness
    let limit: StreamLimit
    /// A comment line at least this often keeps proxies from closing an idle stream.
    var keepAlive: Duration = .seconds(15)

    /// What wakes a stream.
    private enum Wake: Sendable {
        case changed(JobChange)
        case keepAlive
        case shutdown
    }

    /// What a stream has sent: per job, the last snapshot (for byte events; dropped once the job is done).
    private struct Sent {
        var last: [JobID: JobSnapshot] = [:]

        /// Writes `snapshot` unless an event as new was sent already.
        mutating func write(_ snapshot: JobSnapshot, to writer: ResponseBodyWriter) async throws {
            guard snapshot.eventID > (last[snapshot.job.id]?.eventID ?? -1) else { return }
            last[snapshot.job.id] = snapshot.job.done ? nil : snapshot
            var event = Array("id: \(snapshot.eventID)\nevent: job\ndata: ".utf8)
            event += snapshot.job.json
            event += Array("\n\n".utf8)
            try await writer.write(event)
        }
    }

    /// One job's events: its snapshot at once (unless `lastEventID` says the client has it), one event per change,
    /// the last when the job is done; then the stream ends.
    func job(_ id: String, tenant: Tenant, lastEventID: Int?) async throws -> Response {
        guard let jobID = JobID(validating: id), try await jobs.snapshot(id: jobID, tenant: tenant) != nil else {
            throw ServiceError.notFound(kind: "job", id: id)
        }
        let slot = try limit.acquire()
        return Self.response { writer in
            _ = slot  // held, so the slot is freed when this stream is (run or not)
            try await follow(only: jobID, tenant: tenant, writer: writer) { sent in
                // Subscribed first, so no change between the read and the wait is missed.
                guard let snapshot = try await jobs.snapshot(id: jobID, tenant: tenant) else { return true }
                if snapshot.eventID > (lastEventID ?? -1) { try await sent.write(snapshot, to: writer) }
                return snapshot.job.done
            }
        }
    }

    /// Every job of the tenant: a snapshot of each not yet done, then every change, until the client leaves.
    func tenant(_ tenant: Tenant) throws -> Response {
        let slot = try limit.acquire()
        return Self.response { writer in
            _ = slot
            try await follow(only: nil, tenant: tenant, writer: writer) { sent in
                for snapshot in try await jobs.activeSnapshots(tenant: tenant) { try await sent.write(snapshot, to: writer) }
                return false
            }
        }
    }

    // MARK: Implementation

    private static func response(_ produce: @escaping @Sendable (ResponseBodyWriter) async throws -> Void) -> Response {
        Response(
            headerFields: [.contentType: "text/event-stream", .cacheControl: "no-store"],
            body: .stream(produce)
        )
    }

    /// Subscribes, calls `start` (the snapshot; true ends the stream at once), then writes an event per change to
    /// `only` (or to any job of `tenant`), a comment per keep-alive, until a followed job is done, the client
    /// leaves (a write throws) or shutdown begins.
    private func follow(
        only jobID: JobID?, tenant: Tenant, writer: ResponseBodyWriter,
        start: (inout Sent) async throws -> Bool
    ) async throws {
        let subscription = changes.subscribe()
        let (wakes, wake) = AsyncStream.makeStream(of: Wake.self, bufferingPolicy: .bufferingNewest(1024))
        try await withThrowingTaskGroup(of: Void.self) { group in
            defer { group.cancelAll() }
            group.addTask {
                for await change in subscription where jobID == nil || change.jobID == jobID { wake.yield(.changed(change)) }
            }
            group.addTask { [keepAlive] in
                while true {
                    try await Task.sleep(for: keepAlive)
                    wake.yield(.keepAlive)
                }
            }
            group.addTask { [readiness] in
                await readiness.waitUntilDraining()
                if !Task.isCancelled { wake.yield(.shutdown) }
            }
            // An event goes out only when newer than the last one sent for its job.
            var sent = Sent()
            if try await start(&sent) { return }
            for await event in wakes {
                switch event {
                case .keepAlive:
                    try await writer.write(": keep-alive\n\n")
                case .shutdown:
                    return
                case .changed(let change) where change.kind == .live:
                    // Only jobs this stream has shown (so of its tenant); a job it has not yet shown waits for its
                    // next committed change. The shown job, its uploads as they are now: no read.
                    guard let shown = sent.last[change.jobID] else { continue }
                    try await sent.write(progress.snapshot(shown.job, version: shown.version), to: writer)
                case .changed(let change):
                    // Another tenant's job reads as none: its changes are never sent.
                    guard let snapshot = try await jobs.snapshot(id: change.jobID, tenant: tenant) else { continue }
                    try await sent.write(snapshot, to: writer)
                    if jobID != nil, snapshot.job.done { return }
                }
            }
        }
    }
}

/// `--max-streams`: event streams open at once; more get a 503 with `Retry-After`.
final class StreamLimit: Sendable {
    let maximum: Int
    private let open = Atomic(0)

    init(maximum: Int) {
        self.maximum = maximum
    }

    /// Streams open now.
    var count: Int { open.load(ordering: .relaxed) }

    /// A slot, released when the returned object goes; 503 when every slot is taken.
    func acquire() throws(HTTPError) -> Slot {
        guard open.add(1, ordering: .relaxed).newValue <= maximum else {
            open.subtract(1, ordering: .relaxed)
            throw HTTPError(
                .serviceUnavailable, detail: "\(maximum) event streams are open, the most this server keeps", headerFields: [.retryAfter: "5"])
        }
        return Slot(limit: self)
    }

    /// One open stream's place.
    final class Slot: Sendable {
        private let limit: StreamLimit

        init(limit: StreamLimit) { self.limit = limit }

        deinit { limit.open.subtract(1, ordering: .relaxed) }
    }
}
