import AsyncHTTPClient
import Foundation
import HeraldCore
import HeraldTestSupport
import NIOHTTP1
import Testing

@testable import HeraldApp

/// Fair share between tenants, through the API, on either database: a tenant's backlog does not hold back another's post.
@Suite("Fair share between tenants", .serialized, .timeLimit(.minutes(2)))
struct FairShareTests {
    enum Database: String, CaseIterable, Sendable {
        case sqlite, postgres
    }

    /// A job as its tenant's last long poll saw it: when it started and finished.
    struct Run {
        let started: Timestamp
        let finished: Timestamp
    }

    /// Herald with 2 workers whose uploads take 0.4 s each, on `database`, with the admin key and keys of tenants `a` and `b`.
    private func withTwoTenants(
        _ database: Database, tenantConcurrency: Int = 0,
        _ body: @Sendable (_ base: String, _ admin: String, _ a: String, _ b: String) async throws -> Void
    ) async throws {
        let url = database == .postgres ? try await postgresDatabase() : nil
        try await withHerald(
            configure: {
                $0.database = url
                $0.workers = 2
                $0.tenantConcurrency = tenantConcurrency
            }, store: TestStore.paced(.milliseconds(400))
        ) { base, _, application in
            let admin = try #require(application.initialKey?.secret)
            let a = try await makeKey(base, admin: admin, name: "a", tenant: "a").secret
            let b = try await makeKey(base, admin: admin, name: "b", tenant: "b").secret
            try await body(base, admin, a, b)
        }
    }

    /// `count` posts of one medium each for the tenant of `key`, their media uploaded first: their jobs' ids in order.
    private func posts(_ count: Int, _ base: String, key: String) async throws -> [String] {
        try await TestKey.$current.withValue(key) {
            var media: [String] = []
            for _ in 0..<count { media.append(try await uploadMedia(base)) }
            var jobs: [String] = []
            for medium in media {
                let created = try await createPost(base, ["text": "fair", "media_ids": [medium]])
                jobs.append(try #require(try postAndJob(created.json).job["id"] as? String))
            }
            return jobs
        }
    }

    /// Each job once done (long polls), as its tenant's key reads it.
    private func runs(of jobs: [String], _ base: String, key: String) async throws -> [Run] {
        try await TestKey.$current.withValue(key) {
            var runs: [Run] = []
            for job in jobs {
                var answer = try await exchange(.GET, "\(base)/v1/jobs/\(job)?wait=30")
                for _ in 0..<4 where answer.json["done"] as? Bool != true {
                    answer = try await exchange(.GET, "\(base)/v1/jobs/\(job)?wait=30")
                }
                #expect(answer.json["state"] as? String == "succeeded")
                let started = try #require((answer.json["started_at"] as? String).flatMap(Timestamp.init(rfc3339:)))
                let finished = try #require((answer.json["finished_at"] as? String).flatMap(Timestamp.init(rfc3339:)))
                runs.append(Run(started: started, finished: finished))
            }
            return runs
        }
    }

    @Test("B's one post starts at the next free worker, ahead of A's backlog of 30", arguments: Database.allCases)
    func aBacklogDoesNotHoldBackAnotherTenant(_ database: Database) async throws {
        try await withTwoTenants(database) { base, _, a, b in
            let backlog = try await posts(30, base, key: a)
            let mine = try await posts(1, base, key: b)
            // Once B's post is answered (committed), its job is claimable (the clock is the server's: one machine).
            let answered = Timestamp.now()
            let theirs = try await runs(of: backlog, base, key: a)
            let bRun = try #require(try await runs(of: mine, base, key: b).first)
            // At most one job of A's started between B's post and B's job: a worker freed while A still runs another
            // goes to B (B's first turn before A's second); only when both free at once do A's oldest and B's share a
            // turn, and the older goes first. Without fair share all 28 or so left of A's would.
            let overtaking = theirs.filter { $0.started > answered && $0.started < bRun.started }
            #expect(overtaking.count <= 1, "\(overtaking.count) of A's jobs started while B's waited")
            // Most of A's backlog was still queued when B's job started.
            #expect(theirs.filter { $0.started > bRun.started }.count >= 20)
        }
    }

    @Test("with --tenant-concurrency 1, A never runs two jobs at once, while B's runs beside", arguments: Database.allCases)
    func aTenantCapHoldsWhileOthersRun(_ database: Database) async throws {
        try await withTwoTenants(database, tenantConcurrency: 1) { base, _, a, b in
            let backlog = try await posts(8, base, key: a)
            let mine = try await posts(1, base, key: b)
            let theirs = try await runs(of: backlog, base, key: a).sorted { $0.started < $1.started }
            let bRun = try #require(try await runs(of: mine, base, key: b).first)
            for (earlier, later) in zip(theirs, theirs.dropFirst()) {
                #expect(later.started >= earlier.finished, "two of A's jobs ran at once")
            }
            #expect(theirs.contains { $0.started < bRun.finished && bRun.started < $0.finished }, "B's job ran beside one of A's")
        }
    }

    @Test("/metrics shows queued and running jobs of the 10 tenants with the longest queues, the rest summed", arguments: Database.allCases)
    func metricsByTenantAreBounded(_ database: Database) async throws {
        try await withTwoTenants(database) { base, admin, _, _ in
            #expect(try await call(.POST, "\(base)/v1/queue/pause", key: admin).status == .ok)
            // Eleven tenants with 1 to 11 queued posts: the one with 1 is left to "(others)". Their names are this
            // case's (the tests share one metrics registry).
            let name = { (index: Int) in "fair-\(database.rawValue)-\(index)" }
            for index in 0..<11 {
                let key = try await makeKey(base, admin: admin, name: name(index), tenant: name(index)).secret
                var theirs: [String] = []
                for _ in 0...index {
                    let created = try await TestKey.$current.withValue(key) { try await createPost(base, ["text": "queued"]) }
                    theirs.append(try #require(try postAndJob(created.json).job["id"] as? String))
                }
                if index == 10 {
                    // The first scrape: fair-0 is in the rest.
                    let lines = try await tenantLines(base)
                    #expect(lines["herald_tenant_jobs{tenant=\"\(name(10))\",state=\"queued\"}"] == 11)
                    #expect(lines["herald_tenant_jobs{tenant=\"\(name(1))\",state=\"queued\"}"] == 2)
                    #expect(lines["herald_tenant_jobs{tenant=\"\(name(0))\",state=\"queued\"}"] == nil)
                    #expect(lines[#"herald_tenant_jobs{tenant="(others)",state="queued"}"#] == 1)
                    // fair-10's jobs cancelled: it leaves the top, its series goes, fair-0 comes in.
                    for job in theirs {
                        #expect(try await call(.POST, "\(base)/v1/jobs/\(job)/cancel", key: key).status == .accepted, "cancelled at once: queued")
                    }
                }
            }
            let after = try await tenantLines(base)
            #expect(after["herald_tenant_jobs{tenant=\"\(name(10))\",state=\"queued\"}"] == nil)
            #expect(after["herald_tenant_jobs{tenant=\"\(name(0))\",state=\"queued\"}"] == 1)
            #expect(after["herald_tenant_jobs{tenant=\"\(name(0))\",state=\"running\"}"] == 0)
        }
    }

    /// `/metrics`' `herald_tenant_jobs` lines: series to value.
    private func tenantLines(_ base: String) async throws -> [String: Int] {
        let (status, _, body) = try await get("\(base)/metrics")
        #expect(status == .ok)
        var lines: [String: Int] = [:]
        for line in body.split(separator: "\n") where line.hasPrefix("herald_tenant_jobs{") {
            let parts = line.split(separator: " ")
            if parts.count == 2, let value = Double(parts[1]) { lines[String(parts[0])] = Int(value) }
        }
        return lines
    }
}
