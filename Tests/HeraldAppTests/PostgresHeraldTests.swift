import AsyncHTTPClient
import Foundation
import HeraldCore
import HeraldTestSupport
import MicroHTTP
import NIOCore
import NIOHTTP1
import PostgresStorage
import Testing

@testable import HeraldApp

/// A fresh database on the tests' PostgreSQL server, as `--database` takes it.
func postgresDatabase() async throws -> String {
    let server = try await PostgresServer.shared()
    return server.url(database: try await server.makeDatabase())
}

/// A replica's configuration: `database`, and a file store under `folder` that every replica shares.
func sharedStoreReplica(_ name: String, database: String, folder: String) -> @Sendable (inout HeraldConfiguration) -> Void {
    {
        $0.database = database
        $0.replicaID = name
        $0.store = "file://\(folder)/objects"
    }
}

/// Herald on PostgreSQL (`--database`): the contract's calls behave as on SQLite.
@Suite("Herald on PostgreSQL", .serialized, .timeLimit(.minutes(2)))
struct PostgresHeraldTests {
    @Test("a post with two media is published; polls, long-polls and lists read it from PostgreSQL")
    func publishes() async throws {
        let database = try await postgresDatabase()
        try await withHerald(configure: { $0.database = database }) { base, _, application in
            #expect(application.storage is PostgresStorage)
            let first = try await uploadMedia(base)
            let second = try await uploadMedia(base, jpegBytes, type: "image/jpeg")
            let created = try await createPost(base, ["text": "Harbour at dusk", "media_ids": [second, first]])
            #expect(created.status == .accepted)
            let (post, job) = try postAndJob(created.json)
            let jobID = try #require(job["id"] as? String)
            let postID = try #require(post["id"] as? String)

            let done = try await exchange(.GET, "\(base)/v1/jobs/\(jobID)?wait=30")
            #expect(done.json["state"] as? String == "succeeded")
            let uploads = try #require(done.json["uploads"] as? [[String: Any]])
            #expect(uploads.compactMap { $0["media_id"] as? String } == [second, first])
            #expect(uploads.allSatisfy { $0["state"] as? String == "uploaded" && $0["attempts"] as? Int == 1 })
            // The plain poll (on the HTTP thread, a blocking connection of its own) reads the same job.
            let polled = try await exchange(.GET, "\(base)/v1/jobs/\(jobID)")
            #expect(polled.status == .ok && polled.json["state"] as? String == "succeeded")
            #expect(polled.headers["Retry-After"].isEmpty)
            let published = try await exchange(.GET, "\(base)/v1/posts/\(postID)")
            #expect(published.json["state"] as? String == "published" && published.json["published_at"] is String)
            #expect((published.json["media"] as? [[String: Any]])?.allSatisfy { $0["url"] is String } == true)
            let listed = try await exchange(.GET, "\(base)/v1/jobs?state=succeeded")
            #expect((listed.json["data"] as? [[String: Any]])?.compactMap { $0["id"] as? String } == [jobID])
            #expect(try await exchange(.GET, "\(base)/readyz").status == .ok)
        }
    }

    @Test("text PostgreSQL cannot hold (a NUL) is a 422 naming the field, never a 500; a NUL in a media id is an unknown id")
    func aNulIsRefusedNotA500() async throws {
        let database = try await postgresDatabase()
        try await withHerald(configure: { $0.database = database }) { base, _, _ in
            let medium = try await uploadMedia(base)
            let text = try await createPost(base, ["text": "a\u{0}b"])
            #expect(text.status == .unprocessableEntity && "\(text.json)".contains("/text"))
            let ids = try await createPost(base, ["text": "ok", "media_ids": ["a\u{0}b", medium]])
            #expect(ids.status == .unprocessableEntity && "\(ids.json)".contains("/media_ids/0"))
            let described = try await exchange(.POST, "\(base)/v1/media?description=a%00b", contentType: "image/png", body: pngBytes)
            #expect(described.status == .unprocessableEntity && "\(described.json)".contains("/description"))
            // Nothing was taken: the medium is still free for a post.
            #expect(try await createPost(base, ["text": "ok", "media_ids": [medium]]).status == .accepted)
        }
    }

    @Test("a bad --database is refused at start with a reason that never shows the password")
    func badDatabase() async throws {
        await #expect {
            try await withHerald(configure: { $0.database = "mysql://u:secret@127.0.0.1/db" }) { _, _, _ in }
        } throws: { error in
            "\(error)".contains("postgres://") && !"\(error)".contains("secret")
        }
        // Nothing listens on port 1: unreachable, said in a line, still without the password.
        let unreachable = "postgres://herald:secret@127.0.0.1:1/herald?sslmode=disable"
        await #expect {
            try await withHerald(configure: {
                $0.database = unreachable
                $0.databaseStartTimeout = .seconds(1)
            }) { _, _, _ in }
        } throws: { error in
            "\(error)".contains("cannot be reached") && !"\(error)".contains("secret")
        }
    }

    @Test("herald keys, check and backup take --database (or HERALD_DATABASE_URL) as serve does")
    func commands() async throws {
        let database = try await postgresDatabase()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("herald-commands-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let created = try runHerald(["keys", "create", "--name", "ops", "--scope", "admin", "--database", database, "--data-dir", directory])
        #expect(created.status == 0, "\(created.err)")
        let secret = try #require(created.out.split(separator: "\n").first.map(String.init))
        let id = try #require(created.out.split(separator: "\n").dropFirst().first?.split(separator: " ").first { $0.hasPrefix("id=") }?.dropFirst(3))
            .description
        #expect(!created.err.contains("hrld_") && !created.err.contains("secret"))

        let listed = try runHerald(["keys", "list", "--data-dir", directory], environment: ["HERALD_DATABASE_URL": database])
        #expect(listed.status == 0, "\(listed.err)")
        #expect(listed.out.contains(id) && listed.out.contains("ops") && listed.out.contains("admin"))

        try await withHerald(configure: { $0.database = database }) { base, _, application in
            // The key made by the command is PostgreSQL's: no initial key, and the server takes it.
            #expect(application.initialKey == nil)
            #expect(try await call(.GET, "\(base)/v1/queue", key: secret).status == .ok)
            let revoked = try runHerald(["keys", "revoke", id, "--database", database])
            #expect(revoked.status == 0, "\(revoked.err)")
            // Revoked through the database alone: the running server refuses the key once it has read it again
            // (within a second by the contract; bounded here: 50 tries).
            var status = HTTPResponseStatus.ok
            for _ in 0..<50 where status == .ok {
                status = try await call(.GET, "\(base)/v1/queue", key: secret).status
                if status == .ok { try await Task.sleep(for: .milliseconds(100)) }
            }
            #expect(status == .unauthorized)
        }

        let checked = try runHerald(["check", "--database", database, "--data-dir", directory])
        #expect(checked.status == 0, "\(checked.out) \(checked.err)")
        #expect(checked.out.hasPrefix("ok"))

        let copy = directory + "/copy.sqlite"
        let backup = try runHerald(["backup", "--database", database, "--data-dir", directory, copy])
        #expect(backup.status == 2)
        #expect(backup.err.contains("pg_dump"))
        #expect(!FileManager.default.fileExists(atPath: copy))
    }
}

/// Herald while its PostgreSQL is down, and after it is back.
@Suite("Herald when PostgreSQL is down", .serialized, .timeLimit(.minutes(2)))
struct PostgresDownTests {
    /// How the database goes away.
    enum Outage: String, CustomStringConvertible, CaseIterable {
        /// Stopped (a fast shutdown): its connections are closed, new ones refused.
        case stopped
        /// Its processes stopped (SIGSTOP): nothing is closed, nothing answers.
        case stalled

        var description: String { rawValue }

        func begin(_ postgres: DedicatedPostgres) async throws {
            switch self {
            case .stopped: try await postgres.stop()
            case .stalled: try await postgres.pause()
            }
        }

        func end(_ postgres: DedicatedPostgres) async throws {
            switch self {
            case .stopped: try await postgres.restart()
            case .stalled: try await postgres.resume()
            }
        }
    }

    @Test(
        "down: /readyz 503, calls 503 problems with Retry-After (not hung), /healthz 200; back: Herald recovers without a restart",
        arguments: Outage.allCases)
    func downAndBack(_ outage: Outage) async throws {
        let postgres = try await DedicatedPostgres.start()
        do {
            try await downAndBack(postgres, outage)
            await postgres.close()
        } catch {
            // A stalled server's processes go on, so that closing stops them.
            if outage == .stalled { try? await postgres.resume() }
            await postgres.close()
            throw error
        }
    }

    private func downAndBack(_ postgres: DedicatedPostgres, _ outage: Outage) async throws {
        let database = postgres.server.url(database: try await postgres.server.makeDatabase())
        try await withHerald(configure: { $0.database = database }) { base, _, application in
            let storage = try #require(application.storage as? PostgresStorage)
            let created = try await createPost(base, ["text": "accepted before"])
            #expect(created.status == .accepted)
            let (post, job) = try postAndJob(created.json)
            let postID = try #require(post["id"] as? String)
            let jobID = try #require(job["id"] as? String)
            #expect(try await exchange(.GET, "\(base)/v1/jobs/\(jobID)?wait=30").json["state"] as? String == "succeeded")

            try await outage.begin(postgres)
            // Answered, not hung: the listener finds the server gone (a refused connection, or its probe unanswered
            // while nothing closes), and the calls waiting then, as those that come after, fail at once. Through the
            // pool (a post, a list) and the status poll's own connections (a job).
            for path in ["/v1/posts/\(postID)", "/v1/jobs/\(jobID)", "/v1/jobs?state=queued"] {
                let answer = try await exchange(.GET, base + path)
                #expect(answer.status == .serviceUnavailable, "\(path)")
                #expect(answer.headers["Retry-After"] == ["5"], "\(path)")
                #expect(answer.headers["Content-Type"] == ["application/problem+json"], "\(path)")
            }
            let refused = try await createPost(base, ["text": "refused while down"])
            #expect(refused.status == .serviceUnavailable)
            #expect(try await exchange(.GET, "\(base)/readyz").status == .serviceUnavailable)
            #expect(try await exchange(.GET, "\(base)/healthz").status == .ok)

            try await outage.end(postgres)
            // Back without a restart of Herald: its pool and listener reconnect; a client honouring Retry-After gets
            // through (bounded: 20 tries).
            var again: Answer?
            for _ in 0..<20 {
                let answer = try await createPost(base, ["text": "accepted after"])
                if answer.status == .accepted {
                    again = answer
                    break
                }
                try await Task.sleep(for: .milliseconds(500))
            }
            let after = try #require(again, "Herald did not recover")
            let afterJob = try #require(try postAndJob(after.json).job["id"] as? String)
            #expect(try await exchange(.GET, "\(base)/v1/jobs/\(afterJob)?wait=30").json["state"] as? String == "succeeded")
            #expect(try await exchange(.GET, "\(base)/v1/posts/\(postID)").json["state"] as? String == "published")
            #expect(try await exchange(.GET, "\(base)/readyz").status == .ok)
            // The listener's first connection was closed: by the server when stopped, by its unanswered probe when
            // stalled (nothing else closes it then).
            #expect(storage.listenerConnections >= 2)
        }
    }
}

/// Two Heralds on one PostgreSQL database, as replicas behind a load balancer would be.
@Suite("Replicas on PostgreSQL", .serialized, .timeLimit(.minutes(2)))
struct ReplicaTests {
    @Test("the queue counts both; a pause through one holds both; a cancel through one stops the upload the other runs")
    func twoReplicas() async throws {
        let database = try await postgresDatabase()
        // Uploads that never end until cancelled, so the job stays running where it was claimed.
        let stores = ["one": TestStore(default: .hang), "two": TestStore(default: .hang)]
        try await withHerald(
            configure: {
                $0.database = database
                $0.replicaID = "one"
                $0.workers = 2
            }, store: stores["one"]
        ) { one, _, _ in
            let key = TestKey.current
            try await withHerald(
                configure: {
                    $0.database = database
                    $0.replicaID = "two"
                    $0.workers = 3
                }, store: stores["two"]
            ) { two, _, _ in
                try await TestKey.$current.withValue(key) {
                    let bases = ["one": one, "two": two]
                    // Both count once each has beaten (bounded: a heartbeat comes at each runner's start).
                    var queue = try await exchange(.GET, "\(two)/v1/queue")
                    for _ in 0..<50 where queue.json["replicas"] as? Int != 2 {
                        try await Task.sleep(for: .milliseconds(100))
                        queue = try await exchange(.GET, "\(two)/v1/queue")
                    }
                    #expect(queue.json["replicas"] as? Int == 2 && queue.json["workers"] as? Int == 5)

                    // Paused through one: two holds its queued job too.
                    #expect(try await exchange(.POST, "\(one)/v1/queue/pause").json["paused"] as? Bool == true)
                    #expect(try await exchange(.GET, "\(two)/v1/queue").json["paused"] as? Bool == true)
                    let media = try await uploadMedia(one)
                    let created = try await createPost(two, ["text": "across", "media_ids": [media]])
                    let jobID = try #require(try postAndJob(created.json).job["id"] as? String)
                    #expect(try await exchange(.GET, "\(two)/v1/jobs/\(jobID)?wait=1").json["state"] as? String == "queued")

                    // Resumed through two: one replica or the other claims it; its runner is named.
                    #expect(try await exchange(.POST, "\(two)/v1/queue/resume").json["paused"] as? Bool == false)
                    var job = try await exchange(.GET, "\(one)/v1/jobs/\(jobID)")
                    for _ in 0..<100 where job.json["state"] as? String != "running" {
                        try await Task.sleep(for: .milliseconds(50))
                        job = try await exchange(.GET, "\(one)/v1/jobs/\(jobID)")
                    }
                    let runner = try #require(job.json["runner"] as? String)
                    let store = try #require(stores[runner])
                    await store.waitUntilInFlight(1)

                    // Cancelled through the other replica: the runner's upload is cancelled, the job ends cancelled.
                    let other = runner == "one" ? "two" : "one"
                    #expect(try await exchange(.POST, "\(bases[other]!)/v1/jobs/\(jobID)/cancel").status == .accepted)
                    let ended = try await exchange(.GET, "\(bases[runner]!)/v1/jobs/\(jobID)?wait=30")
                    #expect(ended.json["state"] as? String == "cancelled" && ended.json["runner"] is NSNull)
                    #expect(store.sawCancellation == [MediaID(media)])
                }
            }
        }
    }

    @Test("an upload's bytes on one replica show on the other while the job runs; a cancel through the other ends it")
    func progressAcrossReplicas() async throws {
        let database = try await postgresDatabase()
        // Each upload says half its bytes are taken, then waits until cancelled.
        let stores = ["one": TestStore(default: .halfThenHang), "two": TestStore(default: .halfThenHang)]
        @Sendable func replica(_ name: String) -> (inout HeraldConfiguration) -> Void {
            {
                $0.database = database
                $0.replicaID = name
            }
        }
        try await withHerald(configure: replica("one"), store: stores["one"]) { one, _, _ in
            let key = TestKey.current
            try await withHerald(configure: replica("two"), store: stores["two"]) { two, _, _ in
                try await TestKey.$current.withValue(key) {
                    let bases = ["one": one, "two": two]
                    let media = try await uploadMedia(one)
                    let created = try await createPost(one, ["text": "watched", "media_ids": [media]])
                    let jobID = try #require(try postAndJob(created.json).job["id"] as? String)
                    var job = try await exchange(.GET, "\(one)/v1/jobs/\(jobID)")
                    for _ in 0..<100 where job.json["runner"] as? String == nil {
                        try await Task.sleep(for: .milliseconds(50))
                        job = try await exchange(.GET, "\(one)/v1/jobs/\(jobID)")
                    }
                    let runner = try #require(job.json["runner"] as? String)
                    try await #require(stores[runner]).waitUntilInFlight(1)
                    let other = try #require(bases[runner == "one" ? "two" : "one"])

                    // The other replica reads the runner's bytes from PostgreSQL (bounded: 50 polls, 5 s).
                    func upload(_ answer: Answer) -> [String: Any]? { (answer.json["uploads"] as? [[String: Any]])?.first }
                    var seen = try await exchange(.GET, "\(other)/v1/jobs/\(jobID)")
                    for _ in 0..<50 where upload(seen)?["bytes_sent"] as? Int ?? 0 == 0 {
                        try await Task.sleep(for: .milliseconds(100))
                        seen = try await exchange(.GET, "\(other)/v1/jobs/\(jobID)")
                    }
                    let size = try #require(upload(seen)?["size"] as? Int)
                    #expect(upload(seen)?["bytes_sent"] as? Int == size / 2)
                    #expect(upload(seen)?["state"] as? String == "uploading")
                    #expect(seen.json["state"] as? String == "running")

                    #expect(try await exchange(.POST, "\(other)/v1/jobs/\(jobID)/cancel").status == .accepted)
                    let ended = try await exchange(.GET, "\(other)/v1/jobs/\(jobID)?wait=30")
                    #expect(ended.json["state"] as? String == "cancelled")
                }
            }
        }
    }

    @Test("staged bytes are in the shared file store: media through one replica, published by the other, nothing left in staging")
    func sharedFileStore() async throws {
        let database = try await postgresDatabase()
        let shared = FileManager.default.temporaryDirectory.appendingPathComponent("herald-shared-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: shared) }
        let replica = { @Sendable (name: String) in sharedStoreReplica(name, database: database, folder: shared) }
        try await withHerald(configure: replica("one")) { one, _, first in
            let key = TestKey.current
            try await withHerald(configure: replica("two")) { two, _, second in
                try await TestKey.$current.withValue(key) {
                    #expect(try await exchange(.POST, "\(one)/v1/queue/pause").status == .ok)
                    let bytes = pngBytes + Array(repeating: 7, count: 300_000)
                    let media = try await uploadMedia(one, bytes)
                    // In the store every replica reads, not in the accepting replica's data directory.
                    #expect(files(in: "\(shared)/objects/staging") == ["\(media).png"])
                    #expect(files(in: first.configuration.dataDirectory + "/staging").isEmpty)
                    #expect(try await exchange(.GET, "\(two)/v1/media/\(media)").json["size"] as? Int == bytes.count)
                    // A body refused for its bytes leaves nothing staged.
                    #expect(try await send(.POST, "\(two)/v1/media", contentType: "image/jpeg", body: bytes).status == .unsupportedMediaType)
                    #expect(files(in: "\(shared)/objects/staging") == ["\(media).png"])

                    let created = try await createPost(two, ["text": "shared", "media_ids": [media]])
                    let jobID = try #require(try postAndJob(created.json).job["id"] as? String)
                    #expect(try await exchange(.POST, "\(two)/v1/queue/resume").status == .ok)
                    let done = try await exchange(.GET, "\(one)/v1/jobs/\(jobID)?wait=30")
                    #expect(done.json["state"] as? String == "succeeded", "\(done.json)")
                    #expect(FileManager.default.contents(atPath: "\(shared)/objects/media/\(media).png").map(Array.init) == bytes)
                    // The staged file goes after the commit that the poll saw (bounded: 50 looks, 5 s).
                    for _ in 0..<50 where !files(in: "\(shared)/objects/staging").isEmpty { try await Task.sleep(for: .milliseconds(100)) }
                    #expect(files(in: "\(shared)/objects/staging").isEmpty)
                    #expect(files(in: second.configuration.dataDirectory + "/staging").isEmpty)
                }
            }
        }
    }

    @Test("a resumable upload begun through one replica is resumed through the other and published")
    func resumableUploadAcrossReplicas() async throws {
        let database = try await postgresDatabase()
        let shared = FileManager.default.temporaryDirectory.appendingPathComponent("herald-tus-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: shared) }
        let replica = { @Sendable (name: String) in sharedStoreReplica(name, database: database, folder: shared) }
        try await withHerald(configure: replica("one")) { one, _, first in
            let key = try #require(first.initialKey?.secret)
            try await withHerald(configure: replica("two")) { two, _, _ in
                let bytes = jpeg(count: 500_000)
                let url = try await createUpload(one, key: key, length: bytes.count)
                let path = try #require(URL(string: url)?.path)
                let id = String(try #require(path.split(separator: "/").last))
                let half = try await tus(.PATCH, url, key: key, headers: [("Upload-Offset", "0")], body: Array(bytes.prefix(200_000)))
                #expect(half.status == .noContent)
                // The offset is in the database and the bytes in the shared store: the other replica goes on.
                #expect(try await uploadOffset(two + path, key: key) == 200_000)
                #expect(files(in: "\(shared)/objects/staging") == ["\(id).upload"])
                let rest = try await tus(.PATCH, two + path, key: key, headers: [("Upload-Offset", "200000")], body: Array(bytes[200_000...]))
                #expect(rest.status == .noContent, "\(rest.body)")
                #expect(files(in: "\(shared)/objects/staging") == ["\(id).jpg"])
                let media = try await call(.GET, "\(one)/v1/media/\(id)", key: key)
                let json = try #require(try JSONSerialization.jsonObject(with: Data(media.body.utf8)) as? [String: Any])
                #expect(json["sha256"] as? String == sha256(bytes), "re-read once by the replica that did not take the first bytes")
                let created = try await TestKey.$current.withValue(key) { try await createPost(one, ["text": "resumed", "media_ids": [id]]) }
                let jobID = try #require(try postAndJob(created.json).job["id"] as? String)
                let done = try await call(.GET, "\(two)/v1/jobs/\(jobID)?wait=30", key: key)
                #expect(done.body.contains(#""state":"succeeded""#), "\(done.body)")
            }
        }
    }

    @Test("a key's rate limit is a total over the replicas: two together answer no more than the limit allows")
    func rateLimitIsATotal() async throws {
        let database = try await postgresDatabase()
        @Sendable func replica(_ name: String) -> (inout HeraldConfiguration) -> Void {
            {
                $0.database = database
                $0.replicaID = name
                $0.rateLimit = 5
                $0.leaseRenew = 1
                $0.leaseTimeout = 3
            }
        }
        try await withHerald(configure: replica("one")) { one, _, first in
            let key = TestKey.current
            try await withHerald(configure: replica("two")) { two, _, second in
                try await TestKey.$current.withValue(key) {
                    // Each has counted both replicas (a count every --lease-renew; bounded wait).
                    func shared(_ application: Application) -> Bool { (application.router.gate as? AccessGate)?.sharedAmong == 2 }
                    for _ in 0..<100 where !(shared(first) && shared(second)) { try await Task.sleep(for: .milliseconds(50)) }
                    #expect(shared(first) && shared(second))

                    let started = ContinuousClock.now
                    var answered = 0
                    for _ in 0..<30 {
                        for base in [one, two] where try await exchange(.GET, "\(base)/v1/queue").status == .ok { answered += 1 }
                    }
                    let seconds = Double((ContinuousClock.now - started).components.seconds) + 1
                    // At most 1.1 × (limit × T + burst) over both (10 a replica, 20 in all, had each kept the whole limit).
                    #expect(answered >= 1 && Double(answered) <= 1.1 * (5 * seconds + 10), "\(answered) answered in about \(seconds) s")
                }
            }
        }
    }
}
