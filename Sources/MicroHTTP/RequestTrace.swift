import HTTPTypes
public import Telemetry
public import Tracing

extension Request {
    /// The `traceparent` of this request's span when the server traces it: what work this request starts keeps, to
    /// link its own spans to this request's.
    public var traceparent: String? { trace?.traceparent?.description }
}

/// The server span of one request, while the server traces (``ServerConfiguration/tracer``).
///
/// A class: ``Request`` holds it as one optional reference, which every copy of an untraced request copies as nil (an
/// existential and a string inline cost each copy more, traced or not).
public final class RequestTrace: Sendable {
    /// The span: a handler adds attributes to it, and the spans of its work are its children.
    public let span: any Span
    /// The span's `traceparent`: what a job keeps to link its run to this request, and the ids of its log lines.
    public let traceparent: TraceParent?

    private init(span: any Span, traceparent: TraceParent?) {
        self.span = span
        self.traceparent = traceparent
    }

    /// Starts the span of a request whose head just arrived, continuing the trace its `traceparent` names (if any).
    static func start(tracer: any Tracer, method: String, path: String, fields: RequestFields, client: String?, secure: Bool) -> RequestTrace {
        // Only a well-formed traceparent is handed to the tracer: a malformed one starts a new trace, as if absent (and
        // the tracer, which warns with what it was given, never sees the other fields, the key among them).
        var context = ServiceContext.topLevel
        if let parent = fields[.traceparent].flatMap(TraceParent.init) {
            tracer.extract(TraceFields(traceparent: parent.description, tracestate: fields[.tracestate]), into: &context, using: TraceFields.Access())
        }
        // Named by the method until the route is known (the semantic conventions' `{method} {http.route}`); a method HTTP
        // does not define is `_OTHER`, and the span `HTTP`, the one sent kept beside them (no names without bound).
        let known = HTTPRequest.Method(method)
        let label = known?.label ?? HTTPRequest.Method.other
        let span = tracer.startSpan(known?.spanName ?? "HTTP", context: context, ofKind: .server)
        span.attributes["http.request.method"] = label
        if label != method { span.attributes["http.request.method_original"] = method }
        span.attributes["url.path"] = path
        span.attributes["url.scheme"] = secure ? "https" : "http"
        if let client { span.attributes["client.address"] = client }
        return RequestTrace(span: span, traceparent: TraceParent(of: span.context, tracer: tracer))
    }

    /// The route the request took: the span's name and `http.route`.
    func routed(method: HTTPRequest.Method, template: String) {
        span.operationName = "\(method.spanName) \(template)"
        span.attributes["http.route"] = template
    }

    /// Ends the span with the answer's status (nil: the client left before one was sent).
    func end(status: Int?) {
        if let status {
            span.attributes["http.response.status_code"] = status
            // A server span is an error for a 5xx only: a 4xx is the client's.
            if status >= 500 { span.setStatus(SpanStatus(code: .error)) }
        } else {
            span.attributes["error.type"] = "aborted"
            span.setStatus(SpanStatus(code: .error, message: "the connection closed before the answer was sent"))
        }
        span.end()
    }
}

extension HTTPRequest.Method {
    /// The method as metrics and spans name it: one of HTTP's own, else `_OTHER` (OpenTelemetry's name for it), so that a
    /// client's made-up methods add no labels or span names without bound.
    var label: String { Self.standard.contains(self) ? rawValue : Self.other }

    /// How a span's name begins: the method, or `HTTP` for one HTTP does not define.
    var spanName: String { Self.standard.contains(self) ? rawValue : "HTTP" }

    static let other = "_OTHER"
    private static let standard: [HTTPRequest.Method] = [.get, .head, .post, .put, .delete, .patch, .options, .connect, .trace]
}

extension HTTPField.Name {
    /// W3C Trace Context's `traceparent`.
    static let traceparent = HTTPField.Name("traceparent")!
    /// W3C Trace Context's `tracestate`.
    static let tracestate = HTTPField.Name("tracestate")!
}
