public import Logging
public import Tracing

/// A span's W3C Trace Context `traceparent` (`00-<trace id>-<span id>-<flags>`): what a job keeps of the request
/// that made it, and where log lines' `trace_id` and `span_id` come from.
public struct TraceParent: Sendable, Hashable, CustomStringConvertible {
    /// The header's text, as sent and stored.
    public let description: String

    /// `text` if it has the header's shape: a version (not `ff`), a 32-digit trace id and a 16-digit span id (neither
    /// all zeros) and flags, in lowercase hex.
    public init?(_ text: String) {
        let bytes = Array(text.utf8)
        guard bytes.count == 55, bytes[2] == UInt8(ascii: "-"), bytes[35] == UInt8(ascii: "-"), bytes[52] == UInt8(ascii: "-") else {
            return nil
        }
        for (index, byte) in bytes.enumerated() where index != 2 && index != 35 && index != 52 {
            guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte) else {
                return nil
            }
        }
        let zeros = { (range: Range<Int>) in bytes[range].allSatisfy { $0 == UInt8(ascii: "0") } }
        guard bytes[0..<2] != [UInt8(ascii: "f"), UInt8(ascii: "f")], !zeros(3..<35), !zeros(36..<52) else { return nil }
        description = text
    }

    /// The `traceparent` `tracer` sends for the span `context` holds; nil when it holds none.
    public init?(of context: ServiceContext, tracer: any Tracer) {
        guard let text = TraceFields(of: context, tracer: tracer).traceparent, let parsed = TraceParent(text) else { return nil }
        self = parsed
    }

    /// The trace's id: 32 hex digits.
    public var traceID: Substring { field(at: 3, count: 32) }
    /// The span's id: 16 hex digits.
    public var spanID: Substring { field(at: 36, count: 16) }

    /// Offsets in UTF-8 (the text is ASCII, checked at init): `Character` offsets would walk grapheme breaks.
    private func field(at offset: Int, count: Int) -> Substring {
        let utf8 = description.utf8
        let start = utf8.index(utf8.startIndex, offsetBy: offset)
        return Substring(utf8[start..<utf8.index(start, offsetBy: count)])
    }

    /// `trace_id` and `span_id`: the metadata of a line logged within this span.
    public var metadata: Logger.Metadata { ["trace_id": "\(traceID)", "span_id": "\(spanID)"] }

    /// Adds ``metadata`` to a logger that logs within this span.
    public func annotate(_ logger: inout Logger) {
        for (key, value) in metadata { logger[metadataKey: key] = value }
    }

    /// The context of the span this names, as `tracer` reads it from a request that carried it: to continue or link it.
    public func context(tracer: any Tracer) -> ServiceContext {
        var context = ServiceContext.topLevel
        tracer.extract(TraceFields(traceparent: description), into: &context, using: TraceFields.Access())
        return context
    }
}

/// The two W3C Trace Context fields, as a propagator writes and reads them.
public struct TraceFields: Sendable, Hashable {
    public var traceparent: String?
    public var tracestate: String?

    public init(traceparent: String? = nil, tracestate: String? = nil) {
        self.traceparent = traceparent
        self.tracestate = tracestate
    }

    /// The fields `tracer` sends for the span `context` holds: the headers of a request made within that span.
    public init(of context: ServiceContext, tracer: any Tracer) {
        self.init()
        tracer.inject(context, into: &self, using: Access())
    }

    /// Each field that is set, by its header name.
    public var headers: [(name: String, value: String)] {
        [traceparent.map { ("traceparent", $0) }, tracestate.map { ("tracestate", $0) }].compactMap { $0 }
    }

    /// Injects into and extracts from ``TraceFields``; other fields a propagator names are dropped.
    public struct Access: Injector, Extractor {
        public init() {}

        public func inject(_ value: String, forKey key: String, into carrier: inout TraceFields) {
            switch key.lowercased() {
            case "traceparent": carrier.traceparent = value
            case "tracestate": carrier.tracestate = value
            default: break
            }
        }

        public func extract(key: String, from carrier: TraceFields) -> String? {
            switch key.lowercased() {
            case "traceparent": carrier.traceparent
            case "tracestate": carrier.tracestate
            default: nil
            }
        }
    }
}
