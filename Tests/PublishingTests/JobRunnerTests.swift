import Foundation
import HeraldCore
import HeraldStorage
import HeraldTestSupport
import Logging
import Publishing
import SQLiteStorage
import ServiceLifecycle
import Testing

/// A database in a temporary directory with the repositories a runner needs.
struct Harness {
    let directory: String
    let storage: SQLiteStorage
    let media: any MediaRepository
    let posts: any PostRepository
    let jobs: any JobRepository
    var changes: JobChanges { storage.changes }
    let logger: Logger = {
        var logger = Logger(label: "JobRunnerTests")
        logger.logLevel = .warning
        return logger
    }()

    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("runner-\(UUID().uuidString)").path
        storage = try SQLiteStorage.open(directory: directory, logger: Logger(label: "JobRunnerTests"))
        media = storage.media
        posts = storage.posts
        jobs = storage.jobs
    }

    func remove() { try? FileManager.default.removeItem(atPath: directory) }

    /// A post with `count` staged media (the test store never reads their files).
    func post(media count: Int, scheduledAt: Timestamp? = nil) async throws -> PostAndJob {
        var ids: [MediaID] = []
        for index in 0..<count {
            let id = MediaID.generate()
            let item = Media(id: id, contentType: .png, size: 100, sha256: String(repeating: "a", count: 64), createdAt: .now())
            try await media.insert(item, tenant: .default, stagingPath: "staging/\(id)-\(index).png")
            ids.append(id)
        }
        guard
            case .created(let created) = try await posts.create(
                PostRequest(text: "hello", mediaIDs: ids, scheduledAt: scheduledAt), tenant: .default, idempotency: nil, now: .now())
        else { throw HarnessError.notCreated }
        return created
    }

    /// The job once it is done, woken by the runner's events (no polling interval).
    func waitUntilDone(_ jobID: JobID) async throws -> Job {
        while true {
            let generation = changes.generation
            let job = try #require(try await jobs.find(id: jobID, tenant: .default))
            if job.done { return job }
            await changes.waitForChange(of: jobID, after: generation, timeout: .seconds(5))
        }
    }

    func configuration(concurrency: Int = 4, attempts: Int = 3) -> RunnerConfiguration {
        RunnerConfiguration(
            workers: 4,
            uploadConcurrency: concurrency,
            uploadAttempts: attempts,
            uploadTimeout: .seconds(30),
            shutdownGrace: .seconds(5),
            uploadRetry: .uploads(base: .milliseconds(10)),
            staging: .directory(directory)
        )
    }

    /// Runs a runner under a service group while `body` runs.
    func withRunner<T: Sendable>(
        _ store: TestStore,
        _ configuration: RunnerConfiguration,
        cleaner: ObjectCleaner? = nil,
        _ body: @Sendable (JobRunner) async throws -> T
    ) async throws -> T {
        let runner = JobRunner(jobs: jobs, store: store, cleaner: cleaner, changes: changes, configuration: configuration, logger: logger)
        return try await whileRunning(ServiceGroup(configuration: .init(services: [runner], logger: logger))) { try await body(runner) }
    }
}

enum HarnessError: Error { case notCreated }

@Suite("Job runner", .serialized, .timeLimit(.minutes(1)))
struct JobRunnerTests {
    @Test func everyUploadSucceedsThenThePostIsPublishedInOneGo() async throws {
        let harness = try Harness()
        defer { harness.remove() }
        let store = TestStore(default: .succeed(after: .milliseconds(20)))
        let created = try await harness.post(media: 6)
        let job = try await harness.withRunner(store, harness.configuration(concurrency: 3)) { runner in
            return try await harness.waitUntilDone(created.job.id)
        }
        #expect(job.state == .succeeded)
        #expect(job.uploads.allSatisfy { $0.state == .uploaded && $0.attempts == 1 })
        #expect(job.progress.percent == 100)
        let post = try #require(try await harness.posts.find(id: created.post.id, tenant: .default))
        #expect(post.state == .published)
        #expect(post.publishedAt != nil)
        #expect(post.media.allSatisfy { $0.state == .uploaded && $0.url?.hasPrefix("test://media/") == true })
        #expect(store.stored.count == 6)
        #expect(store.maxInFlight <= 3, "never more than upload-concurrency at once")
    }

    @Test func uploadsRunExactlyUploadConcurrencyAtOnce() async throws {
        let harness = try Harness()
        defer { harness.remove() }
        let store = TestStore(default: .hang)
        let created = try await harness.post(media: 7)
        try await harness.withRunner(store, harness.configuration(concurrency: 3)) { runner in
            await store.waitUntilInFlight(3)
            // The hang never ends by itself: cancel to finish the test.
            _ = try await harness.jobs.requestCancel(id: created.job.id, tenant: .default, now: .now())
            _ = try await harness.jobs.requestCancel(id: created.job.id, tenant: .default, now: .now())
            _ = try await harness.waitUntilDone(created.job.id)
        }
        #expect(store.maxInFlight == 3)
    }

    @Test func aPermanentFailureCancelsTheSiblingsAndUndoesTheUploads() async throws {
        let harness = try Harness()
        defer { harness.remove() }
        let store = TestStore(default: .hang)
        let created = try await harness.post(media: 4)
        let ids = created.post.media.map(\.id)
        store.behave(.succeed(after: .zero), forMediaID: ids[0])
        store.behave(.failPermanently, forMediaID: ids[3])
        let job = try await harness.withRunner(store, harness.configuration(concurrency: 4)) { runner in
            return try await harness.waitUntilDone(created.job.id)
        }
        #expect(job.state == .failed)
        #expect(job.error?.code == .uploadFailed)
        #expect(job.error?.mediaID == ids[3])
        #expect(job.error?.message.contains("403") == true)
        #expect(store.sawCancellation == [ids[1], ids[2]], "the hanging siblings were cancelled and saw it")
        #expect(store.inFlight == 0)
        #expect(store.stored.isEmpty, "the object stored before the failure was deleted")
        #expect(store.deleted.contains { $0.hasPrefix("media/\(ids[0])") })
        let post = try #require(try await harness.posts.find(id: created.post.id, tenant: .default))
        #expect(post.state == .failed)
        #expect(post.publishedAt == nil)
        #expect(post.media.allSatisfy { $0.state == .staged && $0.url == nil })
    }

    @Test func cancelByIdReachesEveryUpload() async throws {
        let harness = try Harness()
        defer { harness.remove() }
        let store = TestStore(default: .hang)
        let created = try await harness.post(media: 3)
        let job = try await harness.withRunner(store, harness.configuration(concurrency: 3)) { runner in
            await store.waitUntilInFlight(3)
            guard case .requested = try await harness.jobs.requestCancel(id: created.job.id, tenant: .default, now: .now()) else {
                Issue.record("a running job's cancel is a request")
                return try #require(try await harness.jobs.find(id: created.job.id, tenant: .default))
            }
            _ = try await harness.jobs.requestCancel(id: created.job.id, tenant: .default, now: .now())
            return try await harness.waitUntilDone(created.job.id)
        }
        #expect(job.state == .cancelled)
        #expect(job.error?.code == .cancelled)
        #expect(store.inFlight == 0, "no upload still running")
        #expect(store.sawCancellation.count == 3)
        let post = try #require(try await harness.posts.find(id: created.post.id, tenant: .default))
        #expect(post.state == .cancelled)
    }

    @Test func transientFailuresAreRetriedAndCounted() async throws {
        let harness = try Harness()
        defer { harness.remove() }
        let store = TestStore()
        let created = try await harness.post(media: 2)
        let ids = created.post.media.map(\.id)
        store.behave(.failOnce(after: .zero), forMediaID: ids[1])
        let job = try await harness.withRunner(store, harness.configuration()) { runner in
            return try await harness.waitUntilDone(created.job.id)
        }
        #expect(job.state == .succeeded)
        #expect(store.calls(ids[1]) == 2)
        #expect(job.uploads.first { $0.mediaID == ids[1] }?.attempts == 2)
        #expect(job.uploads.first { $0.mediaID == ids[0] }?.attempts == 1)
    }

    @Test func retriesStopAtUploadAttempts() async throws {
        let harness = try Harness()
        defer { harness.remove() }
        let store = TestStore(default: .failTransiently)
        let created = try await harness.post(media: 1)
        let job = try await harness.withRunner(store, harness.configuration(attempts: 3)) { runner in
            return try await harness.waitUntilDone(created.job.id)
        }
        #expect(job.state == .failed)
        #expect(store.calls(created.post.media[0].id) == 3)
        #expect(job.uploads.first?.attempts == 3)
    }

    @Test func aJobWhoseLeaseExpiredIsResumedByANewRunnerAndPublishedOnce() async throws {
        let harness = try Harness()
        defer { harness.remove() }
        let created = try await harness.post(media: 2)
        // A runner that died mid-job: it claimed the job and its lease ran out.
        let claimed = try await harness.jobs.claim(runner: "dead-runner", leaseUntil: Timestamp.now().adding(milliseconds: -1), now: .now())
        #expect(claimed?.jobID == created.job.id)
        let store = TestStore()
        let job = try await harness.withRunner(store, harness.configuration()) { runner in
            return try await harness.waitUntilDone(created.job.id)
        }
        #expect(job.state == .succeeded)
        #expect(job.attempt == 2)
        let post = try #require(try await harness.posts.find(id: created.post.id, tenant: .default))
        #expect(post.state == .published)
        // Committed once: a second commit by the dead runner is refused.
        let late = try await harness.jobs.commit(JobLease(jobID: created.job.id, runner: "dead-runner", attempt: 1), objects: [:], now: .now())
        #expect(late == .lostLease)
    }

    @Test func aCancelAfterTheCommitLeavesTheJobSucceeded() async throws {
        let harness = try Harness()
        defer { harness.remove() }
        let store = TestStore()
        let created = try await harness.post(media: 1)
        _ = try await harness.withRunner(store, harness.configuration()) { runner in
            return try await harness.waitUntilDone(created.job.id)
        }
        let answer = try await harness.jobs.requestCancel(id: created.job.id, tenant: .default, now: .now())
        guard case .finished(let job) = answer else {
            Issue.record("expected .finished, got \(answer)")
            return
        }
        #expect(job.state == .succeeded)
    }

    @Test func eightUploadsOfThreeHundredMillisecondsRunSideBySide() async throws {
        let harness = try Harness()
        defer { harness.remove() }
        // Each upload waits for all eight to be in flight: side by side, whatever the machine's load (they never
        // finish, and the suite's time limit fails the test, if the runner ran fewer at once).
        let store = TestStore(default: .succeedTogether(count: 8, after: .milliseconds(300)))
        let created = try await harness.post(media: 8)
        let clock = ContinuousClock()
        let (job, elapsed) = try await harness.withRunner(store, harness.configuration(concurrency: 8)) { runner in
            let started = clock.now
            let job = try await harness.waitUntilDone(created.job.id)
            return (job, clock.now - started)
        }
        #expect(job.state == .succeeded)
        #expect(store.maxInFlight == 8)
        // A measurement for the notes, not a pass/fail timing.
        print("8 uploads x 300 ms, upload-concurrency 8: job wall time \(elapsed)")
    }

    @Test func gracefulShutdownRequeuesRunningJobs() async throws {
        let harness = try Harness()
        defer { harness.remove() }
        let store = TestStore(default: .hang)
        let created = try await harness.post(media: 1)
        var configuration = harness.configuration()
        configuration.shutdownGrace = .milliseconds(100)
        try await harness.withRunner(store, configuration) { runner in
            await store.waitUntilInFlight(1)
        }
        let job = try #require(try await harness.jobs.find(id: created.job.id, tenant: .default))
        #expect(job.state == .queued)
        #expect(job.cancelRequested == false)
        #expect(store.inFlight == 0)
        let post = try #require(try await harness.posts.find(id: created.post.id, tenant: .default))
        #expect(post.state == .queued)
    }

    /// Nothing but the new job's change can wake the runner here (its idle timer is ten minutes): the job still runs.
    @Test func aPostScheduledWhileTheRunnerIdlesRunsAtItsTime() async throws {
        let harness = try Harness()
        defer { harness.remove() }
        var configuration = harness.configuration()
        configuration.reclaimInterval = .seconds(600)
        let job = try await harness.withRunner(TestStore(), configuration) { _ in
            let created = try await harness.post(media: 1, scheduledAt: Timestamp.now().adding(milliseconds: 200))
            return try await harness.waitUntilDone(created.job.id)
        }
        #expect(job.state == .succeeded)
    }

    @Test func onceShutdownBeginsNoJobIsClaimed() async throws {
        let harness = try Harness()
        defer { harness.remove() }
        let store = TestStore()
        let created = try await harness.withRunner(store, harness.configuration()) { runner in
            runner.stopClaiming()
            let created = try await harness.post(media: 1)
            return created
        }
        let job = try #require(try await harness.jobs.find(id: created.job.id, tenant: .default))
        #expect(job.state == .queued)
        #expect(store.calls(created.post.media[0].id) == 0)
    }
}
