import HTTPTypes
import HeraldCore
import HeraldStorage
import Metrics
import MicroHTTP
import Prometheus
import Publishing
import Synchronization

/// `/healthz`, `/readyz`, `/metrics` and `/openapi.yaml`.
struct OperationsRoutes {
    let storage: any Storage
    let store: any MediaStore
    let jobs: any JobRepository
    let readiness: Readiness
    let registry: PrometheusCollectorRegistry
    let tenants = TenantGauges()

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
        router.get("/metrics") { [registry, jobs, tenants] _ in
            // Jobs by state and the queue's depth come from the database at scrape time: exact across restarts.
            if let counts = try? await jobs.counts() {
                Gauge(label: "herald_jobs", dimensions: [("state", "running")]).record(counts.running)
                Gauge(label: "herald_jobs", dimensions: [("state", "queued")]).record(counts.queued)
                Gauge(label: "herald_jobs", dimensions: [("state", "scheduled")]).record(counts.scheduled)
                Gauge(label: "herald_queue_depth").record(counts.queued + counts.scheduled)
                if let busiest = try? await jobs.busiestTenants(limit: TenantGauges.shown) {
                    tenants.record(busiest, total: counts, in: registry)
                }
            }
            return Response(headerFields: [.contentType: "text/plain; version=0.0.4; charset=utf-8"], body: .bytes(registry.emitToBuffer()))
        }
        router.get("/openapi.yaml") { _ in
            Response(headerFields: [.contentType: "application/yaml"], body: .bytes(Self.openAPI))
        }
    }
}

/// `herald_tenant_jobs{tenant,state}`: queued and running jobs of the ``shown`` tenants with the longest queues, the
/// rest summed as `tenant="(others)"` (no tenant name has parentheses), so that a million tenants make a dozen series.
/// A tenant that leaves the top loses its series.
final class TenantGauges: Sendable {
    static let shown = 10
    static let others = "(others)"
    /// A computed property: the descriptor is not `Sendable`.
    private static var descriptor: MetricNameDescriptor {
        MetricNameDescriptor(
            metricName: "herald_tenant_jobs", unitName: "",
            helpText: "Queued and running jobs of the tenants with the longest queues; the rest as (others).")
    }

    /// The label pairs recorded at the last scrape.
    private let recorded = Mutex<Set<[String]>>([])

    func record(_ busiest: [TenantJobCounts], total: (running: Int, queued: Int, scheduled: Int), in registry: PrometheusCollectorRegistry) {
        var values: [[String]: Int] = [:]
        for counts in busiest {
            values[[counts.tenant.rawValue, JobState.queued.rawValue]] = counts.queued
            values[[counts.tenant.rawValue, JobState.running.rawValue]] = counts.running
        }
        // The two reads may see different moments: the rest is never shown below zero.
        values[[Self.others, JobState.queued.rawValue]] = max(0, total.queued - busiest.reduce(0) { $0 + $1.queued })
        values[[Self.others, JobState.running.rawValue]] = max(0, total.running - busiest.reduce(0) { $0 + $1.running })
        let gone = recorded.withLock { recorded in
            defer { recorded = Set(values.keys) }
            return recorded.subtracting(values.keys)
        }
        for labels in gone { registry.unregisterGauge(registry.makeGauge(descriptor: Self.descriptor, labels: Self.pairs(labels))) }
        for (labels, value) in values { registry.makeGauge(descriptor: Self.descriptor, labels: Self.pairs(labels)).set(Int64(value)) }
    }

    private static func pairs(_ labels: [String]) -> [(String, String)] {
        [("tenant", labels[0]), ("state", labels[1])]
    }
}
