import HTTPTypes
import HeraldStorage
import Metrics
import MicroHTTP
import Prometheus
import Publishing

/// `/healthz`, `/readyz`, `/metrics` and `/openapi.yaml`.
struct OperationsRoutes {
    let storage: any Storage
    let store: any MediaStore
    let jobs: any JobRepository
    let readiness: Readiness
    let registry: PrometheusCollectorRegistry

    private static let ok: [UInt8] = Array(#"{"status":"ok"}"#.utf8)
    private static let openAPI: [UInt8] = Array((EmbeddedOpenAPI.files.first?.contents ?? "").utf8)

    func register(in router: inout Router) {
        router.get("/healthz") { _ in
            Response(headerFields: [.contentType: "application/json"], body: .bytes(Self.ok))
        }
        router.get("/readyz") { [storage, store, readiness] _ in
            if readiness.isDraining {
                throw HTTPError(.serviceUnavailable, detail: "shutting down", headerFields: [.retryAfter: "5"])
            }
            guard await storage.isReachable() else {
                throw HTTPError(.serviceUnavailable, detail: "the database does not answer", headerFields: [.retryAfter: "5"])
            }
            if let problem = store.availabilityProblem {
                throw HTTPError(.serviceUnavailable, detail: "media store: \(problem)", headerFields: [.retryAfter: "5"])
            }
            return Response(headerFields: [.contentType: "application/json"], body: .bytes(Self.ok))
        }
        router.get("/metrics") { [registry, jobs] _ in
            // Jobs by state and the queue's depth come from the database at scrape time: exact across restarts.
            if let counts = try? await jobs.counts() {
                Gauge(label: "herald_jobs", dimensions: [("state", "running")]).record(counts.running)
                Gauge(label: "herald_jobs", dimensions: [("state", "queued")]).record(counts.queued)
                Gauge(label: "herald_jobs", dimensions: [("state", "scheduled")]).record(counts.scheduled)
                Gauge(label: "herald_queue_depth").record(counts.queued + counts.scheduled)
            }
            return Response(headerFields: [.contentType: "text/plain; version=0.0.4; charset=utf-8"], body: .bytes(registry.emitToBuffer()))
        }
        router.get("/openapi.yaml") { _ in
            Response(headerFields: [.contentType: "application/yaml"], body: .bytes(Self.openAPI))
        }
    }
}
