public import Tracing

/// The span of one HTTP request Herald makes (to the S3 store, to a webhook endpoint), and the `traceparent` and
/// `tracestate` fields that carry it to the server.
public struct ClientSpan: Sendable {
    public let span: any Span
    /// The fields to send with the request.
    public let headers: [(name: String, value: String)]

    /// Starts the span of a `method` request to `url`, a child of the span `context` holds.
    public init(tracer: any Tracer, method: String, url: String, context: ServiceContext) {
        // The semantic conventions' name for an HTTP client span: the method alone.
        span = tracer.startSpan(method, context: context, ofKind: .client)
        span.attributes["http.request.method"] = method
        span.attributes["url.full"] = url
        let (host, port) = Self.authority(of: url)
        if let host { span.attributes["server.address"] = host }
        if let port { span.attributes["server.port"] = port }
        headers = TraceFields(of: span.context, tracer: tracer).headers
    }

    /// Ends the span with the answer's status: a 4xx or 5xx is an error (the request did not do what it asked).
    public func end(status: Int) {
        span.attributes["http.response.status_code"] = status
        if status >= 400 {
            span.attributes["error.type"] = "\(status)"
            span.setStatus(SpanStatus(code: .error))
        }
        span.end()
    }

    /// Ends the span of a request that got no answer.
    public func end(error: any Error) {
        span.attributes["error.type"] = "\(type(of: error))"
        span.recordError(error)
        span.setStatus(SpanStatus(code: .error))
        span.end()
    }

    /// The host and port of `http[s]://HOST[:PORT]/…`; the scheme's port when none is given.
    static func authority(of url: String) -> (host: String?, port: Int?) {
        guard let colon = url.firstIndex(of: ":"), url[colon...].hasPrefix("://") else { return (nil, nil) }
        let rest = url[colon...].dropFirst(3)
        let authority = rest.prefix { $0 != "/" && $0 != "?" && $0 != "#" }.split(separator: "@").last ?? ""
        let defaultPort = url.hasPrefix("https") ? 443 : 80
        if authority.hasPrefix("[") {  // [IPv6]:port
            let close = authority.firstIndex(of: "]") ?? authority.endIndex
            let host = String(authority[authority.index(after: authority.startIndex)..<close])
            let after = authority[close...].dropFirst()
            return (host, after.hasPrefix(":") ? Int(after.dropFirst()) : defaultPort)
        }
        let parts = authority.split(separator: ":", maxSplits: 1)
        guard let host = parts.first else { return (nil, nil) }
        return (String(host), parts.count == 2 ? Int(parts[1]) : defaultPort)
    }
}
