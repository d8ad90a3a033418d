import AsyncHTTPClient
import Foundation
import HeraldTestSupport
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
}
