import AsyncHTTPClient
import Foundation
import HeraldCore
import HeraldTestSupport
import NIOCore
import NIOHTTP1
import Testing

@testable import HeraldApp

/// `GET /`: the dashboard's files as served, and the page used in a real browser (headless Chromium).
@Suite("The web dashboard", .serialized, .timeLimit(.minutes(3)))
struct DashboardTests {
    /// A GET that does not follow redirects.
    static func fetch(_ url: String, headers: [(String, String)] = []) async throws -> (status: UInt, headers: HTTPHeaders, body: String) {
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: .init(redirectConfiguration: .disallow))
        do {
            var request = HTTPClientRequest(url: url)
            for (name, value) in headers { request.headers.add(name: name, value: value) }
            let response = try await client.execute(request, timeout: .seconds(10))
            let body = try await response.body.collect(upTo: 1 << 20)
            try await client.shutdown()
            return (response.status.code, response.headers, String(buffer: body))
        } catch {
            try? await client.shutdown()
            throw error
        }
    }

    @Test func thePageAndItsFilesAreServedWithAStrictPolicyAndNoKey() async throws {
        try await withHerald { base, _, _ in
            let page = try await Self.fetch(base + "/")
            #expect(page.status == 200)
            #expect(page.headers["Content-Type"] == ["text/html; charset=utf-8"])
            let policy = try #require(page.headers["Content-Security-Policy"].first)
            #expect(policy.contains("default-src 'none'") && policy.contains("script-src 'self'") && policy.contains("frame-ancestors 'none'"))
            #expect(!policy.contains("unsafe"), "no unsafe-inline, no unsafe-eval")
            #expect(page.headers["X-Content-Type-Options"] == ["nosniff"])
            // A reload with the ETag costs no body.
            let etag = try #require(page.headers["ETag"].first)
            let again = try await Self.fetch(base + "/", headers: [("If-None-Match", etag)])
            #expect(again.status == 304 && again.body.isEmpty)

            // Every file the page names is served, with its type; the whole under 50 KiB.
            var total = page.body.utf8.count
            for name in DashboardRoutes.files.keys where name != "index.html" {
                let file = try await Self.fetch(base + "/dashboard/" + name)
                #expect(file.status == 200, "\(name)")
                #expect(file.headers["Content-Type"].first == DashboardRoutes.contentType(of: name))
                #expect(file.headers["Content-Security-Policy"].first == policy)
                total += file.body.utf8.count
            }
            #expect(total < 50 * 1024, "the page's files take \(total) bytes")
            print("dashboard: \(DashboardRoutes.files.count) files, \(total) bytes uncompressed")

            let missing = try await Self.fetch(base + "/dashboard/nothing.js")
            #expect(missing.status == 404 && missing.headers["Content-Type"] == ["application/problem+json"])
            let index = try await Self.fetch(base + "/dashboard/index.html")
            #expect(index.status == 308 && index.headers["Location"] == ["/"])
        }
    }

    /// What the policy forbids must not be needed: no inline script or handler, no style attribute, nothing from elsewhere.
    @Test func thePageNeedsNothingThePolicyForbids() throws {
        let html = try #require(EmbeddedDashboard.files.first { $0.name == "index.html" }?.contents)
        let scripts = html.components(separatedBy: "<script").dropFirst()
        #expect(!scripts.isEmpty)
        for script in scripts {
            let tag = script.prefix { $0 != ">" }
            #expect(tag.contains("src=\"/dashboard/"), "inline or foreign script: <script\(tag)>")
            #expect(script.dropFirst(tag.count + 1).hasPrefix("</script>"), "a script element with a body")
        }
        for file in EmbeddedDashboard.files {
            #expect(file.contents.range(of: #"\son[a-z]+\s*="#, options: .regularExpression) == nil, "\(file.name): inline event handler")
            #expect(file.contents.range(of: #"\sstyle\s*=\s*""#, options: .regularExpression) == nil, "\(file.name): style attribute")
            #expect(!file.contents.contains("http://") && !file.contents.contains("https://"), "\(file.name): a resource from elsewhere")
            #expect(!file.contents.contains("eval("), "\(file.name): eval")
        }
    }

    /// The browser test: Tests/Browser/dashboard_test.py drives headless Chromium through the page against this Herald
    /// (sign in, publish two images, cancel a running job, re-publish, upload 20 MiB through tus across a dropped
    /// connection, pause and resume, figures, phone and dark mode). Screenshots go to .build/test-artifacts/dashboard.
    @Test func inARealBrowser() async throws {
        let out = FileManager.default.currentDirectoryPath + "/.build/test-artifacts/dashboard"
        try? FileManager.default.removeItem(atPath: out)
        try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true)
        try await withHerald(store: TestStore.paced(.milliseconds(500))) { base, _, application in
            let key = try #require(application.initialKey?.secret)
            let script = FileManager.default.currentDirectoryPath + "/Tests/Browser/dashboard_test.py"
            // The python3 on this process's PATH: the one `make test-deps` installed selenium for.
            let run = try ClientProcess(
                ["python3", script, "--url", base, "--key", key, "--out", out], environment: ProcessInfo.processInfo.environment,
                executable: "/usr/bin/env")
            let status = await run.exitStatus()
            #expect(status == 0, "stdout: \(run.stdout)\nstderr: \(run.stderr)")
            let results = try #require(
                try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: out + "/results.json"))) as? [String: Any])
            #expect((results["page_bytes"] as? Int ?? .max) < 50 * 1024)
            #expect(results["idle_requests"] as? Int == 0)
            #expect((results["resumed_at"] as? Int ?? 0) > 8 << 20, "the tus upload resumed inside its second PATCH")
            print("dashboard in Chromium: \(run.stdout.trimmingCharacters(in: .whitespacesAndNewlines)); screenshots in \(out)")
            // What the browser did, seen from the server: the jobs it made ended as the script says.
            let jobs = try await send(.GET, "\(base)/v1/jobs?limit=10")
            let states = (jobs.json["data"] as? [[String: Any]] ?? []).compactMap { $0["state"] as? String }
            #expect(states.contains("succeeded") && states.contains("cancelled"), "\(states)")
            #expect(!states.contains("running") && !states.contains("queued"), "nothing left running: \(states)")
        }
    }
}
