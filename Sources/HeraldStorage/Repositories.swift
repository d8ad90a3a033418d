public import HeraldCore

// What Herald keeps, as protocols: routes, services, the runner and the background services reach storage only
// through these; a backend (SQLiteStorage) implements them, and the conformance suite (`Tests/StorageConformanceTests`)
// holds every backend to the same behaviour.

/// A database Herald runs on: its repositories, the status reader and the feed of committed changes.
public protocol Storage: Sendable {
    /// Jobs: read, cancelled, claimed, leased and finished.
    var jobs: any JobRepository { get }
    /// Posts: created with their first job, read, re-published, deleted.
    var posts: any PostRepository { get }
    /// Staged media.
    var media: any MediaRepository { get }
    /// Resumable uploads under way.
    var uploads: any UploadRepository { get }
    /// API keys.
    var keys: any KeyRepository { get }
    /// Webhook endpoints and their deliveries (the outbox).
    var webhooks: any WebhookRepository { get }
    /// Stored objects to delete (the clean-up's outbox).
    var objectDeletions: any ObjectDeletionRepository { get }
    /// The queue's switch and the replicas that work it.
    var queue: any QueueRepository { get }
    /// Every committed change to a job, announced once committed.
    var changes: JobChanges { get }
    /// Running uploads' states and bytes, in memory, laid over every job read.
    var uploadProgress: UploadProgress { get }
    /// A reader for status polls, with `connections` connections of its own (one per calling thread).
    func statusReader(connections: Int) throws -> any JobStatusReader
    /// Whether the database answers a query, for readiness checks; never throws.
    func isReachable() async -> Bool
    /// What the database's own checks (integrity, foreign keys) find, one line each; empty when all is well.
    func integrityProblems() async throws -> [String]
}

/// Reads one job for a status poll, on the caller's thread: the hottest read Herald serves.
public protocol JobStatusReader: Sendable {
    /// The job with this id, its uploads in media position order, their live bytes laid over; nil if `tenant` has none.
    func job(id: JobID, tenant: Tenant) throws -> Job?
    /// The same read from a task (a long-poll's): a backend whose read waits on the network answers without holding
    /// a thread of the cooperative pool.
    func read(id: JobID, tenant: Tenant) async throws -> Job?
    /// The job's JSON object (``HeraldCore/Job/write(to:)``) written into `writer`, and its state; nil (nothing written) if
    /// `tenant` has none. What a plain status poll answers: a backend may write it from the row, making no `Job`.
    func write(id: JobID, tenant: Tenant, to writer: inout JSONWriter) throws -> JobState?
}

extension JobStatusReader {
    /// A read that does not wait on the network (SQLite's) is as quick from a task as from a thread.
    public func read(id: JobID, tenant: Tenant) async throws -> Job? {
        try job(id: id, tenant: tenant)
    }

    /// The job read as a `Job`, then written.
    public func write(id: JobID, tenant: Tenant, to writer: inout JSONWriter) throws -> JobState? {
        guard let job = try job(id: id, tenant: tenant) else { return nil }
        job.write(to: &writer)
        return job.state
    }
}

/// Publish jobs: read and cancelled by clients, claimed, leased and finished by a runner.
///
/// Every method that writes is one transaction, so a job, its post, its media and its uploads always move together;
/// a runner's writes check its lease inside that transaction (fencing: a runner that lost the job changes nothing).
public protocol JobRepository: Sendable {
    /// The job with this id, its uploads in media position order; nil if `tenant` has none.
    func find(id: JobID, tenant: Tenant) async throws -> Job?
    /// The job with its live bytes and its event id (``UploadProgress/eventID(version:step:)``); nil if `tenant` has none.
    func snapshot(id: JobID, tenant: Tenant) async throws -> JobSnapshot?
    /// The tenant's jobs not yet done, oldest first, with their event ids: what a new event stream starts with.
    func activeSnapshots(tenant: Tenant) async throws -> [JobSnapshot]
    /// One page of jobs, newest first, optionally of one state, strictly after `cursor`.
    func list(tenant: Tenant, state: JobState?, limit: Int, after cursor: HeraldCore.Cursor?) async throws -> Page<Job>
    /// How many jobs are running, queued and scheduled (for `/v1/queue` and metrics).
    func counts() async throws -> (running: Int, queued: Int, scheduled: Int)
    /// The `limit` tenants with the most queued jobs (then running ones, then by name), with their counts (for
    /// metrics: bounded however many tenants there are).
    func busiestTenants(limit: Int) async throws -> [TenantJobCounts]
    /// Cancels a queued or scheduled job at once; asks a running one to stop.
    func requestCancel(id: JobID, tenant: Tenant, now: Timestamp) async throws -> CancelRequest
    /// Scheduled jobs whose `run_at <= now` become queued, and so do their posts. Returns how many.
    func promoteDue(now: Timestamp) async throws -> Int
    /// The earliest `run_at` among scheduled jobs (for the runner's timer), nil if none.
    func nextScheduledRunAt() async throws -> Timestamp?
    /// Claims up to `limit` due queued jobs, leased to `runner` until `leaseUntil`, in one transaction, in fair-share
    /// order: by priority, then by turn between tenants (a tenant's n-th due job, counting its jobs running on any
    /// replica first, goes with the other tenants' n-th), then by due time, age and id; with `tenantCap`, no more than
    /// that many of one tenant's jobs run at once, over every runner (exactly: two claims never both pass it).
    func claim(upTo limit: Int, runner: String, leaseUntil: Timestamp, now: Timestamp, tenantCap: Int?) async throws -> [ClaimedJob]
    /// Extends the leases that still hold their jobs, in one statement (a replica renews all of its leases at once),
    /// and says which of those jobs a client asked to cancel: the backstop for a cancel whose notification was lost.
    /// A lease missing from the answer no longer holds its job (its runner must stop and not commit).
    func renewLeases(_ leases: [JobLease], until: Timestamp) async throws -> LeaseRenewal
    /// Running jobs whose lease ended at or before `now` go back to queued. Returns their ids.
    func reclaimExpired(now: Timestamp) async throws -> [JobID]
    /// Running jobs held by `runner` go back to queued, lease or not: what a runner restarted under its own name does
    /// at start; nil takes every running job back (the only process on the database). Returns their ids.
    func reclaimRunning(heldBy runner: String?) async throws -> [JobID]
    /// One upload's new state, kept in memory (``UploadProgress``) until the job's final write.
    func updateUpload(jobID: JobID, mediaID: MediaID, state: UploadState, attempts: Int, error: String?)
    /// `bytes` of the upload's current attempt are taken by the store: kept in memory.
    func reportBytes(jobID: JobID, mediaID: MediaID, bytes: Int)
    /// Whether cancellation was requested (false for an unknown job).
    func isCancelRequested(jobID: JobID) async throws -> Bool
    /// One transaction, only while `lease` holds the job and no cancel was requested: the post is published.
    func commit(_ lease: JobLease, objects: [MediaID: StoredObject], now: Timestamp) async throws -> JobCompletion
    /// The job failed with `error`, only while `lease` holds it.
    func fail(_ lease: JobLease, error: Job.Failure, now: Timestamp) async throws -> JobCompletion
    /// The job cancelled, only while `lease` holds it.
    func finishCancelled(_ lease: JobLease, now: Timestamp) async throws -> JobCompletion
    /// Shutdown: the job back to queued, only while `lease` holds it.
    func requeue(_ lease: JobLease) async throws
}

extension JobRepository {
    /// Claims the next due queued job in claim order, as ``claim(upTo:runner:leaseUntil:now:)`` does; nil if none is due.
    public func claim(runner: String, leaseUntil: Timestamp, now: Timestamp) async throws -> ClaimedJob? {
        try await claim(upTo: 1, runner: runner, leaseUntil: leaseUntil, now: now).first
    }

    /// Claims as ``claim(upTo:runner:leaseUntil:now:tenantCap:)`` does, with no cap per tenant.
    public func claim(upTo limit: Int, runner: String, leaseUntil: Timestamp, now: Timestamp) async throws -> [ClaimedJob] {
        try await claim(upTo: limit, runner: runner, leaseUntil: leaseUntil, now: now, tenantCap: nil)
    }

    /// Extends one lease, as ``renewLeases(_:until:)`` does; false if it no longer holds the job.
    public func renewLease(_ lease: JobLease, until: Timestamp) async throws -> Bool {
        try await renewLeases([lease], until: until).held.contains(lease.jobID)
    }
}

/// Posts: created with their media and first publish job in one transaction, read back, re-published, deleted.
public protocol PostRepository: Sendable {
    /// One transaction: the idempotency key's check, the listed media's, `newMedia`'s rows, the post, its job and its
    /// uploads. Any outcome but ``PostCreation/created(_:)`` writes nothing.
    func create(
        _ request: PostRequest, tenant: Tenant, newMedia: [NewMedia], idempotency: IdempotencyRecord?, now: Timestamp
    ) async throws
        -> PostCreation
    /// For posts whose media must be staged first: reserves the key (in progress) before staging.
    func reserve(_ idempotency: IdempotencyRecord, tenant: Tenant, now: Timestamp) async throws -> PostCreation?
    /// Drops a reservation whose request failed, so a retry can proceed. A completed key is never dropped.
    func release(_ idempotency: IdempotencyRecord, tenant: Tenant) async throws
    /// The post with this id, its media in position order; nil if `tenant` has none.
    func find(id: PostID, tenant: Tenant) async throws -> Post?
    /// One page of posts, newest first, optionally of one state, strictly after `cursor`.
    func list(tenant: Tenant, state: PostState?, limit: Int, after cursor: HeraldCore.Cursor?) async throws -> Page<Post>
    /// The problems of listed media ids (`index` in the draft, `id` as sent) that only the database can find.
    func mediaIssues(_ ids: [(index: Int, id: String)], tenant: Tenant) async throws -> [ValidationIssue]
    /// A failed or cancelled post gets a new job, queued now; `traceparent` (the traced request's) is kept with it
    /// (see ``PostRequest/traceparent``).
    func republish(id: PostID, tenant: Tenant, now: Timestamp, traceparent: String?) async throws -> Republication
    /// What deleting the post would remove, or why it cannot be deleted now.
    func deletionPlan(id: PostID, tenant: Tenant) async throws -> PostDeletionPlan
    /// Deletes the post's rows in one transaction, re-checking that no job is active.
    func delete(id: PostID, tenant: Tenant) async throws -> PostDeletionPlan
    /// Forgets idempotency keys past their 24 hours; returns how many.
    func forgetExpiredKeys(now: Timestamp) async throws -> Int
}

extension PostRepository {
    /// Re-publishes for a request that was not traced.
    public func republish(id: PostID, tenant: Tenant, now: Timestamp) async throws -> Republication {
        try await republish(id: id, tenant: tenant, now: now, traceparent: nil)
    }

    /// Creates a post of media staged before (no new media).
    public func create(_ request: PostRequest, tenant: Tenant, idempotency: IdempotencyRecord?, now: Timestamp) async throws -> PostCreation {
        try await create(request, tenant: tenant, newMedia: [], idempotency: idempotency, now: now)
    }
}

/// Media rows: inserted once their bytes are staged, read back as the API's media object.
public protocol MediaRepository: Sendable {
    /// Records a staged medium of `tenant`; `stagingPath` is relative to the data directory.
    func insert(_ media: Media, tenant: Tenant, stagingPath: String) async throws
    /// The medium with this id, if `tenant` owns it.
    func find(id: MediaID, tenant: Tenant) async throws -> Media?
    /// Deletes a staged medium of `tenant` that no post holds, in one transaction.
    func deleteStaged(id: MediaID, tenant: Tenant) async throws -> MediaDeletion
    /// Deletes unattached media created at or before `cutoff`; returns their staged paths.
    func expireUnattached(createdBy cutoff: Timestamp) async throws -> [String]
    /// The staged paths whose files are still needed: media not attached, or attached to a post not published.
    func liveStagingPaths() async throws -> Set<String>
    /// Every medium, with what it should have on disk and in the store.
    func holdings() async throws -> [MediaHolding]
}

/// What taking an upload for a `PATCH` found.
public enum UploadHold: Sendable, Equatable {
    /// Held: the upload as it is.
    case held(Upload)
    /// Another `PATCH` holds it (423).
    case busy
    /// No such upload of the tenant, or it expired.
    case notFound
}

/// Resumable uploads (tus): the offset durable in the database, the bytes in the staging area.
public protocol UploadRepository: Sendable {
    /// Records a new upload of `tenant`.
    func insert(_ upload: Upload, tenant: Tenant) async throws
    /// The upload with this id, if `tenant` owns it and it has not expired by `now`.
    func find(id: MediaID, tenant: Tenant, now: Timestamp) async throws -> Upload?
    /// Takes the upload for one `PATCH` until `until`, as `holder`, if no live hold is on it: the upload then, or why not.
    func hold(id: MediaID, tenant: Tenant, holder: String, now: Timestamp, until: Timestamp) async throws -> UploadHold
    /// Extends `holder`'s hold; false when it is no longer held by it (lost, or the upload is gone).
    func renew(id: MediaID, holder: String, until: Timestamp) async throws -> Bool
    /// Ends `holder`'s hold (nothing when it holds none).
    func release(id: MediaID, holder: String) async throws
    /// Ends every hold, or (with `prefix`) those whose holder starts with it: a process's own after a restart.
    func releaseHolds(prefix: String?) async throws
    /// Moves the offset from `from` to `to` for `holder` and ends its hold unless the upload is now complete (it stays
    /// held until it becomes media); false when the offset no longer was `from`, the hold is not `holder`'s (fencing: a
    /// replica that lost the hold changes nothing), or the upload is gone.
    func advance(id: MediaID, holder: String, from: Int64, to: Int64) async throws -> Bool
    /// ``advance(id:holder:from:to:)`` once `synchronize`, a blocking call that makes the bytes up to `to` durable (their
    /// `fsync`), has returned; both run to the end even if the calling task is cancelled (a dropped connection's bytes
    /// still count). A backend may run the two together, with nothing between them.
    func advance(id: MediaID, holder: String, from: Int64, to: Int64, after synchronize: @escaping BlockingStep) async throws -> Bool
    /// Makes the complete upload the staged media `media`, its bytes at `stagingPath`: the upload's row goes and the
    /// media's comes, in one transaction. False when the upload is gone (or not complete).
    func complete(id: MediaID, tenant: Tenant, as media: Media, stagingPath: String) async throws -> Bool
    /// Deletes the upload of `tenant`: it as it was (its bytes to remove), or nil when there was none.
    func delete(id: MediaID, tenant: Tenant) async throws -> Upload?
    /// Deletes the uploads expired by `now`: them, their bytes to remove once this has committed.
    func expire(now: Timestamp) async throws -> [Upload]
    /// The paths of every upload's bytes, which the staging sweep keeps.
    func liveBytesPaths() async throws -> Set<String>
}

extension UploadRepository {
    /// The `fsync` on NIO's blocking-I/O pool, then the offset's move, apart from the calling task.
    public func advance(id: MediaID, holder: String, from: Int64, to: Int64, after synchronize: @escaping BlockingStep) async throws -> Bool {
        try await Task.detached {
            try await BlockingWork.run(synchronize)
            return try await advance(id: id, holder: holder, from: from, to: to)
        }.value
    }
}

/// API keys, kept as the SHA-256 of their text.
public protocol KeyRepository: Sendable {
    /// Records a new key whose text hashes to `hash` (64 lowercase hex digits).
    func insert(_ key: APIKey, hash: String) async throws
    /// Records `key` only if there is no key at all, in one transaction (so two starts make one initial key).
    func insertIfEmpty(_ key: APIKey, hash: String) async throws -> Bool
    /// The key whose text hashes to `hash`, revoked or not; nil if there is none.
    func find(hash: String) throws -> APIKey?
    /// The key with this id, revoked or not.
    func find(id: KeyID) async throws -> APIKey?
    /// One page of every tenant's keys, newest first, strictly after `cursor`.
    func list(limit: Int, after cursor: HeraldCore.Cursor?) async throws -> Page<APIKey>
    /// Revokes the key (keeping the first revocation's time); the key as it is now, nil if there is none.
    func revoke(id: KeyID, now: Timestamp) async throws -> APIKey?
    /// Records when keys were last used, in one transaction (a later time never goes back).
    func recordUse(_ uses: [KeyID: Timestamp]) async throws
}

/// Webhook endpoints, and their deliveries: written with the job's end (the outbox), attempted by the dispatcher.
public protocol WebhookRepository: Sendable {
    /// Records a new endpoint of `tenant`, signed with `secret`.
    func insert(_ webhook: Webhook, tenant: Tenant, secret: String) async throws
    /// The endpoint with this id; nil if `tenant` has none.
    func find(id: WebhookID, tenant: Tenant) async throws -> Webhook?
    /// One page of the tenant's endpoints, newest first, strictly after `cursor`.
    func list(tenant: Tenant, limit: Int, after cursor: HeraldCore.Cursor?) async throws -> Page<Webhook>
    /// Removes the endpoint and its deliveries; false if `tenant` has no such endpoint.
    func delete(id: WebhookID, tenant: Tenant) async throws -> Bool
    /// One page of the endpoint's deliveries, newest first; nil if `tenant` has no such endpoint.
    func deliveries(of id: WebhookID, tenant: Tenant, limit: Int, after cursor: HeraldCore.Cursor?) async throws -> Page<WebhookDelivery>?
    /// Claims up to `limit` pending deliveries due at `now` for `replica`, oldest due first: each is due again only at
    /// `leaseUntil`, so that no other replica attempts it meanwhile, and so that another does if this one dies before
    /// recording it.
    func claimDue(now: Timestamp, leaseUntil: Timestamp, limit: Int, by replica: String) async throws -> [PendingDelivery]
    /// The claims `replica` holds (every claim when nil: the only process on the database) are dropped, their deliveries
    /// due at `now`: what a process starting again does. Returns how many.
    func releaseClaims(heldBy replica: String?, now: Timestamp) async throws -> Int
    /// When the next pending delivery is due; nil when none is pending.
    func nextDue() async throws -> Timestamp?
    /// Records one attempt of `id` (its count grows by one) and what it came to.
    func record(_ id: DeliveryID, _ outcome: DeliveryOutcome, now: Timestamp) async throws
    /// A pending delivery whose endpoint is disabled is failed without an attempt.
    func abandon(_ id: DeliveryID, reason: String) async throws
    /// Forgets deliveries created before `cutoff`, and the events no delivery refers to any more. Returns how many.
    func expire(before cutoff: Timestamp) async throws -> Int
}

/// The objects failed and cancelled jobs may have left in the store, to delete: written with the job's end.
public protocol ObjectDeletionRepository: Sendable {
    /// Claims up to `limit` deletions due at `now`, soonest first: each is due again only at `leaseUntil` (its version,
    /// ``PendingObjectDeletion/dueAt``, is then that), so no other replica takes it meanwhile and another does if this
    /// one dies.
    func claimDue(now: Timestamp, leaseUntil: Timestamp, limit: Int) async throws -> [PendingObjectDeletion]
    /// When the next deletion is due; nil when none is pending.
    func nextDue() async throws -> Timestamp?
    /// Whether `deletion` is still wanted: not removed by a re-publish, nor pushed back by a later job's end.
    func isPending(_ deletion: PendingObjectDeletion) async throws -> Bool
    /// The object is gone: the row goes, unless a later job's end wrote it again meanwhile.
    func done(_ deletion: PendingObjectDeletion) async throws
    /// The DELETE failed: try again at `next`.
    func retry(_ deletion: PendingObjectDeletion, at next: Timestamp, error: String) async throws
    /// Every pending deletion's medium, for tests and `herald check`.
    func pendingMediaIDs() async throws -> [MediaID]
}

/// The queue's pause switch, one for every replica, and the replicas alive.
public protocol QueueRepository: Sendable {
    /// Whether claiming is paused.
    func isPaused() async throws -> Bool
    /// Pauses or resumes claiming on every replica; announced (``JobChanges/observeQueue(_:)``) once written.
    func setPaused(_ paused: Bool) async throws
    /// `replica`, with `workers` workers, is alive until `until`. Returns whether the queue is paused: a replica that
    /// missed the announcement learns it here.
    func heartbeat(replica: String, workers: Int, until: Timestamp) async throws -> Bool
    /// The replicas alive at `now`, and their workers' sum.
    func liveReplicas(now: Timestamp) async throws -> (replicas: Int, workers: Int)
    /// `replica` stops (a graceful shutdown): no longer counted.
    func leave(replica: String) async throws
}

// MARK: What they take and answer

/// What an attempt came to.
public enum DeliveryOutcome: Sendable, Equatable {
    /// A 2xx: delivered.
    case delivered(statusCode: Int)
    /// Not delivered; try again at `next`.
    case retry(statusCode: Int?, error: String, next: Timestamp)
    /// Given up; `disable` also disables the endpoint (a 410).
    case failed(statusCode: Int?, error: String, disable: Bool)
}

/// A delivery due for an attempt, with what the attempt needs.
public struct PendingDelivery: Sendable, Hashable {
    public var id: DeliveryID
    public var webhookID: WebhookID
    /// The `webhook-id` header.
    public var eventID: String
    /// Attempts made before this one.
    public var attempts: Int
    public var url: String
    /// `whsec_…`.
    public var secret: String
    public var endpointDisabled: Bool
    /// The exact bytes to send and sign.
    public var body: [UInt8]
    /// The `traceparent` of the request that made the job the event ends, when it was traced: each attempt's span links
    /// to it.
    public var traceparent: String?

    /// Creates a pending delivery.
    public init(
        id: DeliveryID, webhookID: WebhookID, eventID: String, attempts: Int, url: String, secret: String, endpointDisabled: Bool, body: [UInt8],
        traceparent: String? = nil
    ) {
        self.traceparent = traceparent
        self.id = id
        self.webhookID = webhookID
        self.eventID = eventID
        self.attempts = attempts
        self.url = url
        self.secret = secret
        self.endpointDisabled = endpointDisabled
        self.body = body
    }
}

/// What deleting a staged medium found.
public enum MediaDeletion: Sendable, Equatable {
    /// Deleted; the staged file at this data-directory-relative path can go too.
    case deleted(stagingPath: String)
    case notFound
    /// Attached to a post: kept (the API answers 409).
    case attached(postID: PostID)
}

/// A medium as `herald check` compares it with the files and the store.
public struct MediaHolding: Sendable, Hashable {
    public var mediaID: MediaID
    public var postID: PostID?
    /// Data-directory-relative staged path.
    public var stagingPath: String
    /// The stored object's key, once its post is published.
    public var objectKey: String?
    /// Whether its post is published (its staged file is then gone and its object must exist).
    public var published: Bool

    /// Creates a holding.
    public init(mediaID: MediaID, postID: PostID?, stagingPath: String, objectKey: String?, published: Bool) {
        self.mediaID = mediaID
        self.postID = postID
        self.stagingPath = stagingPath
        self.objectKey = objectKey
        self.published = published
    }
}

/// Outcome of creating a post.
public enum PostCreation: Sendable, Equatable {
    /// Created (202).
    case created(PostAndJob)
    /// Same key, same payload: the same ids, current state (202).
    case replayed(PostAndJob)
    /// Unknown media ids, or media attached to another post (`/media_ids/N`); nothing was written (422).
    case invalid([ValidationIssue])
    /// The key was used for a different payload (422).
    case keyReusedWithOtherPayload
    /// The first request with this key is still being processed (409).
    case keyInProgress
}

/// The idempotency part of a request: the key (quotes stripped by the caller) and a hash of the payload.
public struct IdempotencyRecord: Sendable, Equatable {
    /// How long a key is remembered: the API promises at least 24 hours.
    public static let lifetimeMilliseconds: Int64 = 24 * 3_600_000
    /// How long an `in_progress` reservation is honoured before it counts as abandoned.
    public static let reservationTimeoutMilliseconds: Int64 = 60_000

    /// The `Idempotency-Key` value.
    public var key: String
    /// A hash of the request (method, path, canonical body).
    public var requestHash: String

    /// Creates the idempotency part of a request.
    public init(key: String, requestHash: String) {
        self.key = key
        self.requestHash = requestHash
    }
}

/// A medium staged with the post's own request (a form's file part): its row is written with the post.
public struct NewMedia: Sendable, Equatable {
    /// The medium, `staged` and unattached.
    public var media: Media
    /// Where its bytes are, relative to the data directory.
    public var stagingPath: String

    /// Creates a new medium for a post.
    public init(media: Media, stagingPath: String) {
        self.media = media
        self.stagingPath = stagingPath
    }
}

/// Outcome of re-publishing a post.
public enum Republication: Sendable, Equatable {
    /// A new job was queued (202).
    case queued(PostAndJob)
    /// No such post (404).
    case notFound
    /// Published, or a job is active (409); the detail says which.
    case conflict(String)
}

/// What deleting a post needs to know first, and finds.
public enum PostDeletionPlan: Sendable, Equatable {
    /// The post can go: its media's stored objects (keys) and staged files (data-directory-relative paths).
    case deletable(objectKeys: [String], stagingPaths: [String])
    /// No such post for this tenant (404).
    case notFound
    /// Its job is queued, scheduled or running (409): cancel first.
    case active(JobID)
}

/// What a cancel request found and did.
public enum CancelRequest: Sendable, Equatable {
    /// Was queued or scheduled: the job and its post are cancelled, the media stay attached (staged) (202).
    case cancelledNow(Job)
    /// Running: `cancel_requested` is set (idempotent); the runner stops it (202).
    case requested(Job)
    /// Already cancelled (200).
    case alreadyCancelled(Job)
    /// Succeeded or failed (409).
    case finished(Job)
    /// No such job (404).
    case notFound
}

/// What a runner's final write did.
public enum JobCompletion: Sendable, Equatable {
    /// The final state was written.
    case done(Job)
    /// This runner no longer holds the job: nothing written.
    case lostLease
    /// (commit only) `cancel_requested` was set before the commit: nothing written; cancel instead.
    case cancelRequested
}

/// A runner's hold on a running job, which every write of that runner names: the fencing token. A write is refused
/// once the job moved on (its lease expired and another claim took it, or the same runner's later claim did).
public struct JobLease: Sendable, Hashable, CustomStringConvertible {
    /// The job held.
    public var jobID: JobID
    /// Who claimed it (`jobs.locked_by`).
    public var runner: String
    /// The attempt this claim started: a later claim, even by the same runner, has another.
    public var attempt: Int

    /// Creates a lease.
    public init(jobID: JobID, runner: String, attempt: Int) {
        self.jobID = jobID
        self.runner = runner
        self.attempt = attempt
    }

    public var description: String { "\(jobID) held by \(runner), attempt \(attempt)" }
}

/// One tenant's queued and running jobs.
public struct TenantJobCounts: Sendable, Equatable {
    public var tenant: Tenant
    public var queued: Int
    public var running: Int

    /// Creates a tenant's counts.
    public init(tenant: Tenant, queued: Int, running: Int) {
        self.tenant = tenant
        self.queued = queued
        self.running = running
    }
}

/// What one renewal of a runner's leases found.
public struct LeaseRenewal: Sendable, Equatable {
    /// The jobs whose leases still held, now extended.
    public var held: Set<JobID>
    /// Those of them a client asked to cancel.
    public var cancelRequested: Set<JobID>

    public init(held: Set<JobID> = [], cancelRequested: Set<JobID> = []) {
        self.held = held
        self.cancelRequested = cancelRequested
    }
}

/// A job the runner has just claimed: what it needs to upload the post's media.
public struct ClaimedJob: Sendable, Equatable {
    /// The job's id.
    public var jobID: JobID
    /// Its post's id.
    public var postID: PostID
    /// Who claimed it.
    public var runner: String
    /// This run's attempt number (1 for the first).
    public var attempt: Int
    /// The post's media, in position order.
    public var media: [ClaimedMedia]
    /// The `traceparent` of the request that made the job, when it was traced: the run's span links to it.
    public var traceparent: String?

    /// Creates a claimed job.
    public init(jobID: JobID, postID: PostID, runner: String, attempt: Int, media: [ClaimedMedia], traceparent: String? = nil) {
        self.jobID = jobID
        self.postID = postID
        self.runner = runner
        self.attempt = attempt
        self.media = media
        self.traceparent = traceparent
    }

    /// The claim's hold on the job, for the runner's writes.
    public var lease: JobLease { JobLease(jobID: jobID, runner: runner, attempt: attempt) }
}

/// One medium of a claimed job.
public struct ClaimedMedia: Sendable, Equatable {
    /// The medium's id.
    public var mediaID: MediaID
    /// Where its bytes are staged, relative to the data directory.
    public var stagingPath: String
    /// Its size in bytes.
    public var size: Int
    /// The SHA-256 of its bytes, 64 lowercase hex digits.
    public var sha256: String
    /// Its content type.
    public var contentType: MediaType
    /// Upload attempts so far (from the uploads row).
    public var attempts: Int

    /// Creates a claimed medium.
    public init(mediaID: MediaID, stagingPath: String, size: Int, sha256: String, contentType: MediaType, attempts: Int) {
        self.mediaID = mediaID
        self.stagingPath = stagingPath
        self.size = size
        self.sha256 = sha256
        self.contentType = contentType
        self.attempts = attempts
    }
}

/// One object to delete: its medium, whose id and type make the key.
public struct PendingObjectDeletion: Sendable, Hashable {
    public var mediaID: MediaID
    public var contentType: String
    /// As stored: identifies this version of the row (a later job's end writes a new one).
    public var dueAt: String
    public var attempts: Int

    /// How long after a job's end its objects are deleted (again): a PUT already sent in full when its upload was
    /// cancelled can still land in the store after the runner's own DELETE. Milliseconds.
    public static let settle: Int64 = 10_000

    /// Creates a pending deletion.
    public init(mediaID: MediaID, contentType: String, dueAt: String, attempts: Int) {
        self.mediaID = mediaID
        self.contentType = contentType
        self.dueAt = dueAt
        self.attempts = attempts
    }
}
