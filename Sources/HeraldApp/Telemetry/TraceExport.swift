import Logging
import Metrics
public import ServiceLifecycle
public import Tracing

#if OTLP
    import OTel
#endif

/// Herald's traces, exported by swift-otel over OTLP/HTTP: the tracer every part starts its spans with, and the
/// service that batches finished spans and sends them (a span within 5 s of its end).
///
/// The export never holds up a request or a job: a finished span goes into the batch processor's queue, and a batch
/// the endpoint refuses, or does not take within the export timeout, is dropped and counted in
/// `herald_trace_spans_dropped_total`.
public struct TraceExport: Sendable {
    public let tracer: any Tracer
    /// Runs the batch processor and the exporter; first in the service group, so that it stops last and sends the
    /// spans of everything that stopped before it.
    public let service: any Service

    /// The export to `endpoint`'s `/v1/traces`, the service named `herald` (or `OTEL_SERVICE_NAME`) with this
    /// replica's id. swift-otel reads the other `OTEL_*` variables (`OTEL_BSP_SCHEDULE_DELAY`, …) as usual.
    public init(
        endpoint: String, replicaID: String, version: String, delay: Duration = .seconds(5), timeout: Duration = .seconds(5), logger: Logger
    ) throws {
        #if OTLP
            var configuration = OTel.Configuration.default
            configuration.serviceName = "herald"
            configuration.resourceAttributes = ["service.instance.id": replicaID, "service.version": version]
            configuration.logs.enabled = false
            configuration.metrics.enabled = false
            configuration.traces.exporter = .otlp
            configuration.traces.otlpExporter.protocol = .httpProtobuf
            // Set in code, the endpoint is used as given: the signal's path is the caller's to add (OTLP/HTTP's rule).
            configuration.traces.otlpExporter.endpoint = endpoint.hasSuffix("/") ? endpoint + "v1/traces" : endpoint + "/v1/traces"
            configuration.traces.batchSpanProcessor.scheduleDelay = delay
            // OTel's defaults (10 s a request, 30 s a batch) would hold a shutdown that long when the collector is gone.
            configuration.traces.otlpExporter.timeout = timeout
            configuration.traces.batchSpanProcessor.exportTimeout = timeout
            configuration.diagnosticLogLevel = .warning
            let forwarded = logger.handler
            configuration.diagnosticLogger = .custom(Logger(label: logger.label) { _ in DroppedSpanCounter(forwardingTo: forwarded) })
            let backend = try OTel.makeTracingBackend(configuration: configuration)
            tracer = backend.factory
            service = backend.service
        #else
            throw ConfigurationError("--otlp-endpoint: this herald was built without its OTLP exporter (the package's OTLP trait)")
        #endif
    }
}

/// swift-otel's diagnostic log handler: passes its lines on, and counts the spans its warnings say were lost.
///
/// swift-otel has no counter of its own for them; its batch processor warns once per batch it could not export (with
/// `batch_size`) and once per tick in which its queue was full (with `dropped_count`).
struct DroppedSpanCounter: LogHandler {
    var metadata: Logger.Metadata = [:]
    var metadataProvider: Logger.MetadataProvider?
    private var forwarded: any LogHandler
    private var forwardedLevel: Logger.Level = .warning

    init(forwardingTo handler: any LogHandler) {
        forwarded = handler
    }

    /// Never above `warning`, so that the warnings are counted whatever level passes them on.
    var logLevel: Logger.Level {
        get { min(forwardedLevel, .warning) }
        set { forwardedLevel = newValue }
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        let all = metadata.merging(event.metadata ?? [:]) { $1 }
        switch event.message.description {
        case "Failed to export batch.":
            Self.count(all["batch_size"], reason: "export_failed")
        case let message where message.hasPrefix("Spans were dropped"):
            Self.count(all["dropped_count"], reason: "queue_full")
        default:
            break
        }
        guard event.level >= forwardedLevel else { return }
        var event = event
        event.metadata = all
        forwarded.log(event: event)
    }

    private static func count(_ value: Logger.Metadata.Value?, reason: String) {
        guard let value, let count = Int("\(value)"), count > 0 else { return }
        Counter(label: "herald_trace_spans_dropped_total", dimensions: [("reason", reason)]).increment(by: count)
    }
}
