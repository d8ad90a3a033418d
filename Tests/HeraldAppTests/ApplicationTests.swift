import AsyncHTTPClient
import CoreMetrics
import Foundation
import HTTPTypes
import HeraldCore
import HeraldStorage
import HeraldTestSupport
import Logging
import MicroHTTP
import NIOCore
import NIOHTTP1
import Prometheus
import Publishing
import SQLiteStorage
import ServiceLifecycle
import Testing

@testable import HeraldApp

/// The registry every test's Herald records into: `MetricsSystem` takes one factory per process, as `herald serve` does.
enum TestMetrics {
    static let registry: PrometheusCollectorRegistry = {
        let registry = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
        return registry
    }()
}

/// Builds Herald on a temporary data directory and 127.0.0.1:0, runs it while `body` runs, then shuts it down.
func withHerald<T: Sendable>(
    configure: (inout HeraldConfiguration) -> Void = { _ in },
    store: (any MediaStore)? = nil,
    metrics: PrometheusCollectorRegistry = TestMetrics.registry,
    logger: Logger? = nil,
    _ body: @Sendable (_ base: String, _ group: ServiceGroup, _ application: Application) async throws -> T
) async throws -> T {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("herald-\(UUID().uuidString)").path
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let logger =
        logger
        ?? {
            var logger = Logger(label: "HeraldAppTests")
            logger.logLevel = .warning
            return logger
        }()
    let (ports, continuation) = AsyncStream.makeStream(of: Int.self)
    // No disk reserve: the tests must not depend on this machine's free space (LifecycleTests checks the reserve).
    var configuration = HeraldConfiguration(host: "127.0.0.1", port: 0, dataDirectory: directory, logLevel: .warning, minFreeDisk: 0)
    configure(&configuration)
    let application = try await Application.build(
        configuration: configuration,
        logger: logger,
        metrics: metrics,
        store: store
    ) { port in
        continuation.yield(port)
        continuation.finish()
    }
    let group = ServiceGroup(configuration: .init(services: application.services, logger: logger))
    return try await whileRunning(group) {
        let port = try #require(await ports.first { _ in true })
        // Every helper request carries the initial admin key, as a client of a fresh Herald would.
        return try await TestKey.$current.withValue(application.initialKey?.secret) {
            try await body("\(application.configuration.tlsCertificatePath == nil ? "http" : "https")://127.0.0.1:\(port)", group, application)
        }
    }
}

/// The API key the test helpers send (`Authorization: Bearer`), set by ``withHerald(configure:store:metrics:_:)``.
enum TestKey {
    @TaskLocal static var current: String?
}

extension Application {
    /// The SQLite database the application opened, for tests that read its rows or its file.
    var sqlite: SQLiteStorage {
        get throws { try #require(storage as? SQLiteStorage) }
    }
}

extension HTTPClientRequest {
    /// Adds the current test key, if any and if no `Authorization` is set yet.
    mutating func authorize() {
        if let key = TestKey.current, !headers.contains(name: "Authorization") { headers.add(name: "Authorization", value: "Bearer \(key)") }
    }
}

/// The value of the Prometheus line that starts with `label` (its name, labels and a space), if there is one.
func metricValue(_ body: String, _ label: String) -> Int? {
    body.split(separator: "\n").first { $0.hasPrefix(label) }.flatMap { Int($0.dropFirst(label.count)) }
}

func get(_ url: String) async throws -> (HTTPResponseStatus, HTTPHeaders, String) {
    var request = HTTPClientRequest(url: url)
    request.authorize()
    let response = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
    return (response.status, response.headers, String(buffer: try await response.body.collect(upTo: 4 << 20)))
}

@Suite("Herald operations endpoints", .serialized, .timeLimit(.minutes(1)))
struct ApplicationTests {
    @Test func healthzAndReadyzAreOK() async throws {
        try await withHerald { base, _, _ in
            let (health, headers, body) = try await get("\(base)/healthz")
            #expect(health == .ok)
            #expect(body == #"{"status":"ok"}"#)
            #expect(headers["Content-Type"] == ["application/json"])
            let (ready, _, _) = try await get("\(base)/readyz")
            #expect(ready == .ok)
        }
    }

    @Test func servesTheProjectsOpenAPIDocument() async throws {
        let source = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let expected = try String(contentsOf: source.appendingPathComponent("openapi.yaml"), encoding: .utf8)
        try await withHerald { base, _, _ in
            let (status, headers, body) = try await get("\(base)/openapi.yaml")
            #expect(status == .ok)
            #expect(headers["Content-Type"] == ["application/yaml"])
            #expect(body.trimmingCharacters(in: .whitespacesAndNewlines) == expected.trimmingCharacters(in: .whitespacesAndNewlines))
            #expect(body.contains("openapi: 3.1"))
        }
    }

    @Test func metricsCountRequestsByRouteAndStatus() async throws {
        try await withHerald { base, _, _ in
            _ = try await get("\(base)/healthz")
            _ = try await get("\(base)/no-such-thing")
            let (status, headers, body) = try await get("\(base)/metrics")
            #expect(status == .ok)
            #expect(headers["Content-Type"].first?.hasPrefix("text/plain") == true)
            #expect(body.contains(#"http_requests_total{method="GET",route="/healthz",status="200"}"#))
            #expect(body.contains(#"http_requests_total{method="GET",route="unmatched",status="404"}"#))
            #expect(body.contains("http_request_duration_seconds_bucket"))
            #expect(body.contains(#"herald_jobs{state="queued"} 0"#))
            #expect(body.contains("herald_queue_depth 0"))
        }
    }

    @Test func alternatingRoutesAndStatusesAreCountedApart() async throws {
        // The daemon keeps the last request's meters at hand: a request of another route or status must not use them.
        let healthz = #"http_requests_total{method="GET",route="/healthz",status="200"} "#
        let missingJob = #"http_requests_total{method="GET",route="/v1/jobs/{id}",status="404"} "#
        @Sendable func counts(_ base: String) async throws -> (healthz: Int, missingJob: Int) {
            let (_, _, body) = try await get("\(base)/metrics")
            return (metricValue(body, healthz) ?? 0, metricValue(body, missingJob) ?? 0)
        }
        try await withHerald { base, _, _ in
            let before = try await counts(base)
            for _ in 0..<3 {
                #expect(try await get("\(base)/healthz").0 == .ok)
                #expect(try await get("\(base)/v1/jobs/\(UUID().uuidString.lowercased())").0 == .notFound)
            }
            let after = try await counts(base)
            // At least this test's three of each (other suites share the process's registry).
            #expect(after.healthz - before.healthz >= 3, "\(before) → \(after)")
            #expect(after.missingJob - before.missingJob >= 3, "\(before) → \(after)")
        }
    }

    @Test func methodsNoRouteKnowsShareOneMetricsLabel() async throws {
        try await withHerald { base, _, _ in
            // A client picks the method: each made-up one a label of its own would grow the metrics without bound.
            for method in ["FOO1", "FOO2", "BREW"] {
                var request = HTTPClientRequest(url: "\(base)/healthz")
                request.method = .RAW(value: method)
                let response = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
                #expect(response.status == .methodNotAllowed)
            }
            let (_, _, body) = try await get("\(base)/metrics")
            #expect(!body.contains("FOO1") && !body.contains("FOO2") && !body.contains("BREW"))
            let label = #"http_requests_total{method="_OTHER",route="unmatched",status="405"} "#
            let count = try #require(metricValue(body, label), "\(body)")
            // At least this test's three (other suites share the process's registry).
            #expect(count >= 3, "\(count)")
        }
    }

    @Test func metricsServesTheRegistryTheCallerGave() async throws {
        // A registry of the test's own, not bootstrapped: /metrics shows what is in it, and only that.
        let registry = PrometheusCollectorRegistry()
        registry.makeCounter(descriptor: MetricNameDescriptor(metricName: "herald_test_marker", unitName: "total", helpText: "a marker")).increment()
        try await withHerald(metrics: registry) { base, _, _ in
            let (status, _, body) = try await get("\(base)/metrics")
            #expect(status == .ok)
            #expect(body.contains("herald_test_marker"))
            #expect(!body.contains("http_requests_total"))
        }
        let (_, _, shared) = try await withHerald { base, _, _ in try await get("\(base)/metrics") }
        #expect(!shared.contains("herald_test_marker"))
    }

    @Test func readyzTurns503WhenShutdownBegins() async throws {
        try await withHerald { _, _, application in
            let request = Request(head: HTTPRequest(method: .get, scheme: nil, authority: nil, path: "/readyz"))
            #expect(await application.router.respond(to: request).status == .ok)
            // What the readiness service does when the group signals graceful shutdown (it is listed last, so hears it first).
            application.readiness.beginDraining()
            let draining = await application.router.respond(to: request)
            #expect(draining.status == .serviceUnavailable)
            #expect(draining.headerFields[.retryAfter] != nil)
            #expect(draining.headerFields[.contentType] == "application/problem+json")
        }
    }

    @Test func databaseLivesInTheDataDirectoryWithEveryMigration() async throws {
        try await withHerald { _, _, application in
            let path = try application.sqlite.path
            #expect(path.hasSuffix("/herald.sqlite"))
            #expect(FileManager.default.fileExists(atPath: path))
            #expect(await application.storage.isReachable())
        }
    }
}
