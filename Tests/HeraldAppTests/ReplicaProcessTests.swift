import AsyncHTTPClient
import Foundation
import HeraldCore
import HeraldTestSupport
import Logging
import NIOHTTP1
import Platform
import PostgresNIO
import Synchronization
import Testing

/// Three `herald serve` processes on one PostgreSQL database and one S3 (the fake, which holds a job's copy in flight
/// as long as a test needs): what replicas promise when one is killed, stopped, terminated or cut from its notifications.
@Suite("Replicas as processes", .serialized, .timeLimit(.minutes(3)))
struct ReplicaProcessTests {
    @Test("media through one replica, a post through another, a cancel through the third stops the copy where it runs")
    func cancelThroughAThird() async throws {
        try await withReplicas(3) { replicas, fake, _ in
            let (jobID, copy) = try await replicas.runningJob(fake)
            let runner = try await replicas.runner(of: jobID)
            // The third replica (neither the media's nor the post's), or the second when the third runs the job.
            let canceller = try #require(replicas.names.last { $0 != runner })
            #expect(try await replicas.call(.POST, canceller, "/v1/jobs/\(jobID)/cancel").status == .accepted)
            _ = await fake.waitForClose(connection: copy.connection)
            let ended = try await replicas.json(.GET, runner, "/v1/jobs/\(jobID)?wait=20")
            #expect(ended["state"] as? String == "cancelled" && ended["runner"] is NSNull, "\(ended)")
        }
    }

    @Test("a cancel reaches the runner after its notifications were cut (pg_terminate_backend of the listeners)")
    func cancelAfterTheListenerWasCut() async throws {
        try await withReplicas(2) { replicas, fake, database in
            let (jobID, copy) = try await replicas.runningJob(fake)
            let runner = try await replicas.runner(of: jobID)
            let other = try #require(replicas.names.first { $0 != runner })
            // Every replica's listener cut: the cancel's notification may reach none of them; the runner learns of it
            // from its listener's catch-up once reconnected, or from its next lease renewal.
            let cut = try await database.terminateListeners()
            #expect(cut == 2)
            #expect(try await replicas.call(.POST, other, "/v1/jobs/\(jobID)/cancel").status == .accepted)
            _ = await fake.waitForClose(connection: copy.connection)
            let ended = try await replicas.json(.GET, other, "/v1/jobs/\(jobID)?wait=20")
            #expect(ended["state"] as? String == "cancelled", "\(ended)")
        }
    }

    @Test("SIGKILL of the replica running a job: another takes it over once the lease ends, and publishes it once")
    func killedRunner() async throws {
        try await withReplicas(3) { replicas, fake, _ in
            let (jobID, _) = try await replicas.runningJob(fake)
            let runner = try await replicas.runner(of: jobID)
            replicas.signal(runner, SIGKILL)
            let survivor = try #require(replicas.names.first { $0 != runner })
            let done = try await replicas.json(.GET, survivor, "/v1/jobs/\(jobID)?wait=20")
            #expect(done["state"] as? String == "succeeded" && done["attempt"] as? Int == 2, "\(done)")
            try await replicas.expectPublishedOnce(jobID, through: survivor, fake: fake)
        }
    }

    @Test("SIGSTOP of the runner past its lease, then SIGCONT: another replica publishes; the stopped one, fenced, changes nothing")
    func stoppedRunner() async throws {
        try await withReplicas(2) { replicas, fake, _ in
            let (jobID, copy) = try await replicas.runningJob(fake)
            let runner = try await replicas.runner(of: jobID)
            let other = try #require(replicas.names.first { $0 != runner })
            replicas.signal(runner, SIGSTOP)
            let done = try await replicas.json(.GET, other, "/v1/jobs/\(jobID)?wait=20")
            #expect(done["state"] as? String == "succeeded" && done["attempt"] as? Int == 2, "\(done)")
            let requestsBefore = fake.requests.count

            replicas.signal(runner, SIGCONT)
            // Woken, the old runner finds its lease lost at its next renewal and stops its copy (closing its connection).
            _ = await fake.waitForClose(connection: copy.connection)
            let after = try await replicas.json(.GET, runner, "/v1/jobs/\(jobID)")
            #expect(after["state"] as? String == "succeeded" && after["attempt"] as? Int == 2)
            #expect(after["finished_at"] as? String == done["finished_at"] as? String)
            // Nothing more reached the store from it: no second copy over the object, no delete of it.
            #expect(fake.requests.dropFirst(requestsBefore).filter { $0.uri.contains("/media/") }.isEmpty)
            try await replicas.expectPublishedOnce(jobID, through: runner, fake: fake)
        }
    }

    @Test("SIGTERM of the runner hands its job back at once: another replica resumes it long before the lease would end")
    func terminatedRunnerHandsOver() async throws {
        // A 60-second lease: only the hand-off can have the job done within the 20-second wait.
        try await withReplicas(2, leaseTimeout: 60) { replicas, fake, _ in
            let (jobID, _) = try await replicas.runningJob(fake)
            let runner = try await replicas.runner(of: jobID)
            let other = try #require(replicas.names.first { $0 != runner })
            replicas.signal(runner, SIGTERM)
            let done = try await replicas.json(.GET, other, "/v1/jobs/\(jobID)?wait=20")
            #expect(done["state"] as? String == "succeeded" && done["attempt"] as? Int == 2, "\(done)")
            #expect(await replicas.exitStatus(runner) == 0)
        }
    }
}

// MARK: - The replicas

/// `herald serve` processes on one database and one store, by name (`--replica-id`).
final class Replicas: Sendable {
    let names: [String]
    let key: String
    private let processes: [String: ServingProcess]

    init(processes: [String: ServingProcess], names: [String], key: String) {
        self.processes = processes
        self.names = names
        self.key = key
    }

    func base(_ name: String) -> String { processes[name]!.base }

    func call(_ method: HTTPMethod, _ name: String, _ path: String, json: [String: Any]? = nil) async throws -> RawAnswer {
        let body = try json.map { Array(try JSONSerialization.data(withJSONObject: $0)) }
        return try await HeraldAppTests.call(method, base(name) + path, key: key, contentType: json == nil ? nil : "application/json", body: body)
    }

    func json(_ method: HTTPMethod, _ name: String, _ path: String, json: [String: Any]? = nil) async throws -> [String: Any] {
        let answer = try await call(method, name, path, json: json)
        return try #require(try JSONSerialization.jsonObject(with: Data(answer.body.utf8)) as? [String: Any], "\(answer.status) \(answer.body)")
    }

    /// A medium through the first replica, a post of it through the second (the last if one), and its job running
    /// somewhere with its copy held by the fake: the job's id and that copy.
    func runningJob(_ fake: FakeS3) async throws -> (job: String, copy: FakeS3.Received) {
        let upload = try await HeraldAppTests.call(.POST, base(names[0]) + "/v1/media", key: key, contentType: "image/png", body: pngBytes)
        let media = try #require(try JSONSerialization.jsonObject(with: Data(upload.body.utf8)) as? [String: Any], "\(upload.body)")
        let mediaID = try #require(media["id"] as? String)
        let created = try await json(.POST, names[min(1, names.count - 1)], "/v1/posts", json: ["text": "replicated", "media_ids": [mediaID]])
        let jobID = try #require((created["job"] as? [String: Any])?["id"] as? String, "\(created)")
        await fake.waitForRequests(1) { $0.isCopy }
        return (jobID, try #require(fake.requests.first { $0.isCopy }))
    }

    /// The replica running the job (it is running: its copy is held).
    func runner(of jobID: String) async throws -> String {
        let job = try await json(.GET, names[0], "/v1/jobs/\(jobID)")
        return try #require(job["runner"] as? String, "\(job)")
    }

    /// The post is published by its one job (the database is the test's own), and no replica deleted its object.
    func expectPublishedOnce(_ jobID: String, through name: String, fake: FakeS3) async throws {
        let job = try await json(.GET, name, "/v1/jobs/\(jobID)")
        let postID = try #require(job["post_id"] as? String)
        let post = try await json(.GET, name, "/v1/posts/\(postID)")
        #expect(post["state"] as? String == "published")
        let jobs = try await json(.GET, name, "/v1/jobs")
        #expect((jobs["data"] as? [[String: Any]])?.compactMap { $0["id"] as? String } == [jobID])
        #expect(fake.requests.filter { $0.method == "DELETE" && $0.uri.contains("/media/") }.isEmpty)
    }

    func signal(_ name: String, _ signal: Int32) {
        kill(processes[name]!.process.processIdentifier, signal)
    }

    /// Waits for the replica's exit (off the cooperative pool) and returns its status.
    func exitStatus(_ name: String) async -> Int32 {
        let process = processes[name]!.process
        return await withCheckedContinuation { continuation in
            Thread.detachNewThread {
                process.waitUntilExit()
                continuation.resume(returning: process.terminationStatus)
            }
        }
    }

    /// Stops every replica still running (SIGCONT first: a stopped one would not see SIGKILL's pending siblings).
    func stop() async {
        for name in names where processes[name]!.process.isRunning {
            signal(name, SIGCONT)
            signal(name, SIGKILL)
            _ = await exitStatus(name)
        }
    }
}

/// `count` replicas (`r1`, `r2`, …) on a new database and the fake S3, leases short enough for a test to see them end.
///
/// The fake answers every request at once but a job's copies (`PUT` with `x-amz-copy-source`): the first is held
/// until its connection closes, the later ones answered.
func withReplicas(
    _ count: Int,
    leaseTimeout: Int = 3,
    _ body: @Sendable (Replicas, FakeS3, TestDatabase) async throws -> Void
) async throws {
    let server = try await PostgresServer.shared()
    let database = TestDatabase(server: server, name: try await server.makeDatabase())
    let copies = Atomic(0)
    try await FakeS3.with(react: { request in
        guard request.isCopy else { return .respond(status: 200) }
        return copies.add(1, ordering: .relaxed).newValue == 1 ? .hang : .respond(status: 200)
    }) { fake in
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("herald-replicas-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: root) }
        let credentials = ["AWS_ACCESS_KEY_ID": "AKIDTEST", "AWS_SECRET_ACCESS_KEY": "secret"]
        func start(_ name: String) async throws -> ServingProcess {
            try await ServingProcess.start(
                [
                    "--data-dir", "\(root)/\(name)", "--replica-id", name, "--database", server.url(database: database.name),
                    "--store", "s3://bucket?endpoint=\(fake.endpoint)&region=us-east-1", "--lease-timeout", "\(leaseTimeout)",
                    "--lease-renew", "1", "--shutdown-grace", "1",
                ], environment: credentials)
        }
        let names = (1...count).map { "r\($0)" }
        // The first makes the initial key; the others find it there.
        var processes = [names[0]: try await start(names[0])]
        let key = try #require(processes[names[0]]?.key)
        for name in names.dropFirst() { processes[name] = try await start(name) }
        let replicas = Replicas(processes: processes, names: names, key: key)
        do {
            try await body(replicas, fake, database)
        } catch {
            await replicas.stop()
            throw error
        }
        await replicas.stop()
    }
}

/// A test's database on the shared server, with the statements the tests run on it directly.
struct TestDatabase: Sendable {
    let server: PostgresServer
    let name: String

    /// Terminates the replicas' listener connections (`application_name` herald-listener); how many there were.
    func terminateListeners() async throws -> Int {
        let logger = Logger(label: "test-database", factory: { _ in SwiftLogNoOpLogHandler() })
        let connection = try await PostgresConnection.connect(
            configuration: .init(host: "127.0.0.1", port: server.port, username: server.user, password: nil, database: name, tls: .disable),
            id: 1, logger: logger)
        do {
            let rows = try await connection.query(
                """
                SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))::int AS terminated FROM pg_stat_activity
                WHERE datname = \(name) AND application_name = 'herald-listener'
                """, logger: logger)
            var terminated = 0
            for try await count in rows.decode(Int.self) { terminated = count }
            try await connection.close()
            return terminated
        } catch {
            try? await connection.close()
            throw error
        }
    }
}

extension FakeS3.Received {
    /// A `CopyObject`: a job's upload on a replica (staged bytes copied within the store).
    var isCopy: Bool { method == "PUT" && header("x-amz-copy-source") != nil }
}
