import Foundation
import HTTPTypes
import HeraldStorage
import MicroHTTP
import NIOHTTP1
import Publishing
import SQLiteStorage
import Testing

@testable import HeraldApp

/// Creates a post and returns its job's id.
func createJob(_ base: String, _ fields: [String: Any] = ["text": "hello"]) async throws -> String {
    let created = try await createPost(base, fields)
    #expect(created.status == .accepted)
    return try #require(try postAndJob(created.json).job["id"] as? String)
}

@Suite("Job and queue endpoints", .serialized, .timeLimit(.minutes(2)))
struct JobRoutesTests {
    @Test func aJobCarriesRetryAfterUntilItIsDone() async throws {
        try await withHerald { base, _, _ in
            #expect(try await exchange(.POST, "\(base)/v1/queue/pause").status == .ok)
            let id = try await createJob(base)
            for query in ["", "?wait=0"] {
                let pending = try await exchange(.GET, "\(base)/v1/jobs/\(id)\(query)")
                #expect(pending.status == .ok)
                #expect(pending.headers["Retry-After"] == ["1"])
                #expect(pending.json["done"] as? Bool == false)
                #expect(pending.json["state"] as? String == "queued")
            }
            for wait in ["31", "-1", "x", "1.5", "", "%2B1", "0030"] {
                let answer = try await exchange(.GET, "\(base)/v1/jobs/\(id)?wait=\(wait)")
                #expect(answer.status == .badRequest, "wait=\(wait)")
                #expect(answer.headers["Content-Type"] == ["application/problem+json"])
            }
            for path in ["/v1/jobs/\(unknownID)", "/v1/jobs/\(unknownID)?wait=5", "/v1/jobs/nope"] {
                #expect(try await exchange(.GET, "\(base)\(path)").status == .notFound, "\(path)")
            }

            #expect(try await exchange(.POST, "\(base)/v1/queue/resume").status == .ok)
            let done = try await exchange(.GET, "\(base)/v1/jobs/\(id)?wait=30")
            #expect(done.status == .ok)
            #expect(done.json["state"] as? String == "succeeded")
            #expect(done.json["done"] as? Bool == true)
            #expect(done.headers["Retry-After"].isEmpty)

            for method in [HTTPMethod.POST, .DELETE] {
                let path = method == .POST ? "/v1/jobs/\(id)/cancel" : "/v1/jobs/\(id)"
                let finished = try await exchange(method, "\(base)\(path)")
                #expect(finished.status == .conflict)
                #expect(finished.headers["Content-Type"] == ["application/problem+json"])
            }
        }
    }

    @Test func queuedAndScheduledJobsAreCancelledAtOnce() async throws {
        try await withHerald { base, _, _ in
            #expect(try await exchange(.POST, "\(base)/v1/queue/pause").status == .ok)
            let media = try await uploadMedia(base)
            let queued = try await createJob(base, ["text": "queued", "media_ids": [media]])
            let cancelled = try await exchange(.POST, "\(base)/v1/jobs/\(queued)/cancel")
            #expect(cancelled.status == .accepted)
            #expect(cancelled.headers["Location"] == ["/v1/jobs/\(queued)"])
            #expect(cancelled.json["state"] as? String == "cancelled")
            #expect(cancelled.json["done"] as? Bool == true)
            #expect((cancelled.json["error"] as? [String: Any])?["code"] as? String == "cancelled")
            let postID = try #require(cancelled.json["post_id"] as? String)
            #expect(try await exchange(.GET, "\(base)/v1/posts/\(postID)").json["state"] as? String == "cancelled")
            // Asking again changes nothing: 200, by either call.
            let again = try await exchange(.POST, "\(base)/v1/jobs/\(queued)/cancel")
            #expect(again.status == .ok)
            #expect(again.json["state"] as? String == "cancelled")
            #expect(try await exchange(.DELETE, "\(base)/v1/jobs/\(queued)").status == .ok)
            let read = try await exchange(.GET, "\(base)/v1/jobs/\(queued)")
            #expect(read.headers["Retry-After"].isEmpty)

            let scheduled = try await createJob(base, ["text": "later", "scheduled_at": "2099-01-01T00:00:00Z"])
            let deleted = try await exchange(.DELETE, "\(base)/v1/jobs/\(scheduled)")
            #expect(deleted.status == .accepted)
            #expect(deleted.json["state"] as? String == "cancelled")
            #expect(try await exchange(.GET, "\(base)/v1/jobs/\(scheduled)").json["state"] as? String == "cancelled")

            for path in ["/v1/jobs/\(unknownID)/cancel", "/v1/jobs/nope/cancel"] {
                #expect(try await exchange(.POST, "\(base)\(path)").status == .notFound, "\(path)")
            }
            #expect(try await exchange(.DELETE, "\(base)/v1/jobs/\(unknownID)").status == .notFound)
        }
    }

    @Test func aLongPollAnswersWhenItsScheduledJobIsCancelled() async throws {
        try await withHerald { base, _, _ in
            let id = try await createJob(base, ["text": "later", "scheduled_at": "2099-01-01T00:00:00Z"])
            let started = ContinuousClock.now
            async let poll = exchange(.GET, "\(base)/v1/jobs/\(id)?wait=30")
            #expect(try await exchange(.DELETE, "\(base)/v1/jobs/\(id)").status == .accepted)
            let answer = try await poll
            #expect(answer.status == .ok)
            #expect(answer.json["state"] as? String == "cancelled")
            #expect(answer.headers["Retry-After"].isEmpty)
            #expect(ContinuousClock.now - started < .seconds(20))
        }
    }

    /// With re-reads a minute apart, only the cancel's event can end a 30-second wait early.
    @Test func theCancelsEventWakesTheLongPoll() async throws {
        try await withHerald { base, _, application in
            var router = Router()
            JobRoutes(
                service: JobService(
                    jobs: application.storage.jobs,
                    status: try application.storage.statusReader(connections: 1),
                    changes: application.storage.changes,
                    readiness: application.readiness,
                    recheckInterval: .seconds(60)
                ),
                events: application.events
            ).register(in: &router)
            router.gate = AccessGate(mode: .off, requestsPerSecond: 0, failuresPerMinute: 0)
            let routes = router
            let id = try await createJob(base, ["text": "later", "scheduled_at": "2099-01-01T00:00:00Z"])
            let started = ContinuousClock.now
            let waiting = Request(head: HTTPRequest(method: .get, scheme: nil, authority: nil, path: "/v1/jobs/\(id)"), query: [("wait", "30")])
            async let poll = routes.respond(to: waiting)
            let cancel = await routes.respond(to: Request(head: HTTPRequest(method: .delete, scheme: nil, authority: nil, path: "/v1/jobs/\(id)")))
            #expect(cancel.status == .accepted)
            let answer = await poll
            #expect(answer.status == .ok)
            #expect(answer.headerFields[.retryAfter] == nil)
            let job = try JSONSerialization.jsonObject(with: Data(answer.body.bytes ?? [])) as? [String: Any]
            #expect(job?["state"] as? String == "cancelled")
            #expect(ContinuousClock.now - started < .seconds(20))
        }
    }

    @Test func aLongPollEndsWhenTheServerStartsDraining() async throws {
        try await withHerald { base, _, application in
            let readiness = Readiness()
            var router = Router()
            JobRoutes(
                service: JobService(
                    jobs: application.storage.jobs,
                    status: try application.storage.statusReader(connections: 1),
                    changes: application.storage.changes,
                    readiness: readiness,
                    recheckInterval: .milliseconds(100)
                ),
                events: application.events
            ).register(in: &router)
            router.gate = AccessGate(mode: .off, requestsPerSecond: 0, failuresPerMinute: 0)
            let routes = router
            let id = try await createJob(base, ["text": "later", "scheduled_at": "2099-01-01T00:00:00Z"])
            let started = ContinuousClock.now
            let waiting = Request(head: HTTPRequest(method: .get, scheme: nil, authority: nil, path: "/v1/jobs/\(id)"), query: [("wait", "30")])
            async let poll = routes.respond(to: waiting)
            readiness.beginDraining()
            let answer = await poll
            #expect(answer.status == .ok)
            #expect(answer.headerFields[.retryAfter] == "1")
            #expect(ContinuousClock.now - started < .seconds(20))
        }
    }

    @Test func jobListsPageWithCursorsAndFilters() async throws {
        try await withHerald { base, _, _ in
            #expect(try await exchange(.POST, "\(base)/v1/queue/pause").status == .ok)
            var ids: [String] = []
            for index in 0..<3 { ids.append(try await createJob(base, ["text": "job \(index)"])) }
            let scheduled = try await createJob(base, ["text": "later", "scheduled_at": "2099-01-01T00:00:00Z"])

            let first = try await exchange(.GET, "\(base)/v1/jobs?limit=3")
            #expect(first.status == .ok)
            #expect((first.json["data"] as? [[String: Any]])?.compactMap { $0["id"] as? String } == [scheduled, ids[2], ids[1]])
            let cursor = try #require(first.json["next_cursor"] as? String)
            let second = try await exchange(.GET, "\(base)/v1/jobs?limit=3&cursor=\(cursor)")
            #expect((second.json["data"] as? [[String: Any]])?.compactMap { $0["id"] as? String } == [ids[0]])
            #expect(second.json["next_cursor"] is NSNull)
            let onlyScheduled = try await exchange(.GET, "\(base)/v1/jobs?state=scheduled")
            #expect((onlyScheduled.json["data"] as? [[String: Any]])?.compactMap { $0["id"] as? String } == [scheduled])
            #expect((try await exchange(.GET, "\(base)/v1/jobs?state=succeeded").json["data"] as? [Any])?.isEmpty == true)

            for query in ["state=published", "state=", "limit=0", "limit=1000", "limit=two", "cursor=%2F%2F", "cursor="] {
                let answer = try await exchange(.GET, "\(base)/v1/jobs?\(query)")
                #expect(answer.status == .badRequest, "\(query)")
                #expect(answer.headers["Content-Type"] == ["application/problem+json"], "\(query)")
            }
        }
    }

    @Test func theQueueCanBePausedAndResumed() async throws {
        try await withHerald(configure: { $0.workers = 3 }) { base, _, _ in
            let initial = try await exchange(.GET, "\(base)/v1/queue")
            #expect(initial.status == .ok)
            #expect(initial.json["paused"] as? Bool == false)
            #expect(initial.json["workers"] as? Int == 3)
            #expect(initial.json["replicas"] as? Int == 1)
            #expect(initial.json["queued"] as? Int == 0)

            let paused = try await exchange(.POST, "\(base)/v1/queue/pause")
            #expect(paused.status == .ok)
            #expect(paused.json["paused"] as? Bool == true)
            #expect(try await exchange(.POST, "\(base)/v1/queue/pause").json["paused"] as? Bool == true)
            let queued = try await createJob(base)
            _ = try await createJob(base, ["text": "later", "scheduled_at": "2099-01-01T00:00:00Z"])
            let counted = try await exchange(.GET, "\(base)/v1/queue")
            #expect(counted.json["paused"] as? Bool == true)
            #expect(counted.json["queued"] as? Int == 1)
            #expect(counted.json["scheduled"] as? Int == 1)
            #expect(counted.json["running"] as? Int == 0)
            // Paused: the job stays queued however long one waits.
            #expect(try await exchange(.GET, "\(base)/v1/jobs/\(queued)?wait=1").json["state"] as? String == "queued")

            let resumed = try await exchange(.POST, "\(base)/v1/queue/resume")
            #expect(resumed.status == .ok)
            #expect(resumed.json["paused"] as? Bool == false)
            #expect(try await exchange(.GET, "\(base)/v1/jobs/\(queued)?wait=30").json["state"] as? String == "succeeded")
            let after = try await exchange(.GET, "\(base)/v1/queue")
            #expect(after.json["queued"] as? Int == 0)
            #expect(after.json["scheduled"] as? Int == 1)
            #expect(try await exchange(.GET, "\(base)/v1/queue/pause").status == .methodNotAllowed)
        }
    }
}
