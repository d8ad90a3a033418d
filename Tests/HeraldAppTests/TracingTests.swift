import AsyncHTTPClient
import Foundation
import HeraldCore
import HeraldTestSupport
import NIOCore
import NIOHTTP1
import Testing

@testable import HeraldApp

/// `Tests/Support/otlp_receiver.py` on 127.0.0.1: an OTLP/HTTP endpoint that decodes Herald's exports with the
/// `opentelemetry-proto` package and keeps the spans. One process per test.
final class OTLPReceiver: Sendable {
    let port: Int
    var base: String { "http://127.0.0.1:\(port)" }

    /// One exported span, as the receiver decoded it.
    struct ExportedSpan: Sendable {
        var traceID: String
        var spanID: String
        var parentSpanID: String
        var name: String
        /// `SPAN_KIND_SERVER`, `SPAN_KIND_CLIENT`, …
        var kind: String
        var attributes: [String: String]
        var links: [(traceID: String, spanID: String)]
        /// `STATUS_CODE_UNSET`, `STATUS_CODE_ERROR`, …
        var status: String
        var resource: [String: String]
    }

    private init(port: Int) { self.port = port }

    static func with<T: Sendable>(_ body: (OTLPReceiver) async throws -> T) async throws -> T {
        try await withReceiver("otlp_receiver.py") { port in try await body(OTLPReceiver(port: port)) }
    }

    /// `ok` (keep and answer 200), `refuse` (400) or `stall` (never answer).
    func setMode(_ mode: String) async throws {
        _ = try await control(.POST, "mode", body: try JSONSerialization.data(withJSONObject: ["mode": mode]))
    }

    /// Every span kept so far, once there are at least `count` (or after 20 s).
    func spans(atLeast count: Int = 0) async throws -> [ExportedSpan] {
        let data = try await control(.GET, "spans?min=\(count)&timeout=20")
        let list = try #require(try JSONSerialization.jsonObject(with: data) as? [[String: Any]])
        func strings(_ value: Any?) -> [String: String] {
            ((value as? [String: Any]) ?? [:]).mapValues { "\($0)" }
        }
        return list.map { entry in
            ExportedSpan(
                traceID: entry["trace_id"] as? String ?? "", spanID: entry["span_id"] as? String ?? "",
                parentSpanID: entry["parent_span_id"] as? String ?? "", name: entry["name"] as? String ?? "",
                kind: entry["kind"] as? String ?? "", attributes: strings(entry["attributes"]),
                links: ((entry["links"] as? [[String: String]]) ?? []).map { ($0["trace_id"] ?? "", $0["span_id"] ?? "") },
                status: entry["status"] as? String ?? "", resource: strings(entry["resource"]))
        }
    }

    /// How many export requests arrived, whatever they were answered.
    func exportRequests() async throws -> Int {
        let data = try await control(.GET, "exports")
        return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])["requests"] as? Int ?? 0
    }

    private func control(_ method: HTTPMethod, _ path: String, body: Data? = nil) async throws -> Data {
        var request = HTTPClientRequest(url: "\(base)/_control/\(path)")
        request.method = method
        if let body { request.body = .bytes(ByteBuffer(bytes: Array(body))) }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        return Data(String(buffer: try await response.body.collect(upTo: 16 << 20)).utf8)
    }
}

/// A request with the test key and the given header fields.
private func send(
    _ url: String, method: HTTPMethod = .GET, headers: [(String, String)] = [], json: String? = nil
) async throws
    -> HTTPResponseStatus
{
    var request = HTTPClientRequest(url: url)
    request.method = method
    request.authorize()
    for (name, value) in headers { request.headers.add(name: name, value: value) }
    if let json {
        request.headers.add(name: "Content-Type", value: "application/json")
        request.body = .bytes(ByteBuffer(string: json))
    }
    let response = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
    _ = try await response.body.collect(upTo: 1 << 20)
    return response.status
}

/// The value of the Prometheus sample `name{labels}` in a `/metrics` body; 0 when absent.
private func sample(_ body: String, _ name: String) -> Double {
    for line in body.split(separator: "\n") where line.hasPrefix(name + " ") {
        return Double(line.split(separator: " ").last ?? "") ?? 0
    }
    return 0
}

@Suite("Tracing with OpenTelemetry", .serialized, .timeLimit(.minutes(2)))
struct TracingTests {
    /// Herald exporting to `endpoint` every 100 ms, giving up on an export after 1 s.
    static func traced(_ endpoint: String) -> (inout HeraldConfiguration) -> Void {
        { configuration in
            configuration.otlpEndpoint = endpoint
            configuration.traceExportDelay = .milliseconds(100)
            configuration.traceExportTimeout = .seconds(1)
        }
    }

    @Test func aRequestsServerSpanContinuesTheTraceItsTraceparentNames() async throws {
        try await OTLPReceiver.with { receiver in
            try await withHerald(configure: Self.traced(receiver.base)) { base, _, application in
                let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
                let status = try await send("\(base)/v1/jobs/job_nosuchjob", headers: [("traceparent", parent)])
                #expect(status == .notFound)
                let spans = try await receiver.spans(atLeast: 1)
                let span = try #require(spans.first { $0.traceID == "0af7651916cd43dd8448eb211c80319c" }, "\(spans.map(\.name))")
                #expect(span.parentSpanID == "b7ad6b7169203331")
                #expect(span.spanID.count == 16 && span.spanID != "b7ad6b7169203331")
                #expect(span.name == "GET /v1/jobs/{id}")
                #expect(span.kind == "SPAN_KIND_SERVER")
                #expect(span.status == "STATUS_CODE_UNSET", "a 4xx is the client's error, not the server's")
                #expect(span.attributes["http.request.method"] == "GET")
                #expect(span.attributes["http.route"] == "/v1/jobs/{id}")
                #expect(span.attributes["http.response.status_code"] == "404")
                #expect(span.attributes["url.path"] == "/v1/jobs/job_nosuchjob")
                #expect(span.attributes["herald.tenant"] == application.initialKey?.key.tenant.rawValue)
                #expect(span.resource["service.name"] == "herald")
                #expect(span.resource["service.instance.id"] == application.configuration.replicaID)
                #expect(span.resource["service.version"] == HeraldConfiguration.version)
            }
        }
    }

    @Test func everyRequestIsTracedAndAnUnsampledParentIsHonoured() async throws {
        try await OTLPReceiver.with { receiver in
            try await withHerald(configure: Self.traced(receiver.base)) { base, _, _ in
                // The caller decided not to sample this trace: Herald records nothing of it.
                let unsampled = "00-11111111111111111111111111111111-2222222222222222-00"
                #expect(try await send("\(base)/healthz", headers: [("traceparent", unsampled)]) == .ok)
                // No traceparent: a trace of its own. Sent after the unsampled one, so its span's arrival means the
                // unsampled one's would have arrived too.
                #expect(try await send("\(base)/healthz") == .ok)
                // A malformed one (an uppercase id): ignored, a trace of its own, never a 400.
                let malformed = "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01"
                #expect(try await send("\(base)/readyz", headers: [("traceparent", malformed)]) == .ok)
                let spans = try await receiver.spans(atLeast: 2)
                #expect(spans.allSatisfy { $0.traceID != "11111111111111111111111111111111" })
                let root = try #require(spans.first { $0.name == "GET /healthz" })
                #expect(root.parentSpanID.isEmpty && root.traceID.count == 32)
                let fresh = try #require(spans.first { $0.name == "GET /readyz" })
                #expect(fresh.parentSpanID.isEmpty && fresh.traceID != "0af7651916cd43dd8448eb211c80319c")
            }
        }
    }

    @Test func aMethodHTTPDoesNotDefineNamesNoSpan() async throws {
        try await OTLPReceiver.with { receiver in
            try await withHerald(configure: Self.traced(receiver.base)) { base, _, _ in
                #expect(try await send("\(base)/healthz", method: .RAW(value: "BREW")) == .methodNotAllowed)
                let spans = try await receiver.spans(atLeast: 1)
                let span = try #require(spans.first { $0.attributes["http.request.method_original"] == "BREW" }, "\(spans.map(\.name))")
                // OpenTelemetry's HTTP conventions: the name `HTTP`, the method `_OTHER`, the one sent beside it.
                #expect(span.name == "HTTP")
                #expect(span.attributes["http.request.method"] == "_OTHER")
                #expect(span.attributes["http.response.status_code"] == "405")
                #expect(spans.allSatisfy { !$0.name.contains("BREW") })
            }
        }
    }

    /// A publish with two media to the S3 fake (one PUT answered 503 once), and its webhook, followed end to end: the
    /// request's span, the job's run linked to it, an upload attempt per try under the run, a client span per S3
    /// request under its attempt with the `traceparent` S3 got, and the delivery's span linked to the request.
    @Test func aPublishIsTracedFromItsRequestThroughItsJobUploadsAndWebhook() async throws {
        try await OTLPReceiver.with { traces in
            try await WebhookReceiver.with { hooks in
                try await FakeS3.with(react: S3PublishFaultTests.slowDownOnce()) { s3 in
                    try await withS3Herald(
                        endpoint: s3.endpoint, bucket: "herald-media", credentials: S3PublishFaultTests.credentials,
                        configure: { configuration in
                            Self.traced(traces.base)(&configuration)
                            configuration.webhookAllowPrivate = true
                        }
                    ) { base, _ in
                        let hook = try await createWebhook(base, ["url": "\(hooks.base)/hook", "events": ["job.succeeded"]])
                        #expect(hook.status == .created)
                        #expect(try await exchange(.POST, "\(base)/v1/queue/pause").status == .ok)
                        let media = [
                            try await uploadMedia(base, pngBytes + Array(repeating: 1, count: 1000)),
                            try await uploadMedia(base, pngBytes + Array(repeating: 2, count: 2000)),
                        ]
                        let trace = "4bf92f3577b34da6a3ce929d0e0e4736"
                        let created = try await exchange(
                            .POST, "\(base)/v1/posts", contentType: "application/json",
                            headers: [("traceparent", "00-\(trace)-00f067aa0ba902b7-01")],
                            body: Array(try JSONSerialization.data(withJSONObject: ["text": "traced", "media_ids": media])))
                        #expect(created.status == .accepted)
                        let (post, job) = try postAndJob(created.json)
                        let jobID = try #require(job["id"] as? String)
                        let done = try await resumeAndWait(base, job: jobID)
                        #expect(done["state"] as? String == "succeeded", "\(done)")
                        let delivered = try #require(try await hooks.requests(atLeast: 1).first)

                        // Every span ends before the webhook's answer is read, the last one the delivery's: wait for it.
                        var spans = try await traces.spans()
                        let deadline = ContinuousClock.now + .seconds(20)
                        while !spans.contains(where: { $0.attributes["herald.delivery.id"] != nil }), ContinuousClock.now < deadline {
                            spans = try await traces.spans(atLeast: spans.count + 1)
                        }

                        let request = try #require(spans.first { $0.name == "POST /v1/posts" })
                        #expect(request.traceID == trace && request.parentSpanID == "00f067aa0ba902b7" && request.kind == "SPAN_KIND_SERVER")
                        #expect(request.attributes["http.response.status_code"] == "202")

                        let run = try #require(spans.first { $0.name == "publish" })
                        #expect(run.kind == "SPAN_KIND_CONSUMER")
                        #expect(run.links.contains { $0.traceID == trace && $0.spanID == request.spanID }, "\(run.links)")
                        #expect(run.attributes["herald.job.id"] == jobID && run.attributes["herald.post.id"] == post["id"] as? String)
                        #expect(run.attributes["herald.job.attempt"] == "1" && run.attributes["herald.job.outcome"] == "succeeded")

                        let attempts = spans.filter { $0.name == "upload" }
                        #expect(attempts.count == 3, "two media, one of them tried twice: \(attempts.map(\.attributes))")
                        #expect(attempts.allSatisfy { $0.parentSpanID == run.spanID && $0.traceID == run.traceID })
                        #expect(attempts.map { $0.attributes["herald.upload.outcome"] ?? "" }.sorted() == ["retried", "uploaded", "uploaded"])
                        #expect(Set(attempts.compactMap { $0.attributes["herald.media.id"] }) == Set(media))
                        let retried = try #require(attempts.first { $0.attributes["herald.upload.outcome"] == "retried" })
                        #expect(retried.status == "STATUS_CODE_ERROR")

                        // One client span per PUT, under its attempt, and the traceparent S3 received names it.
                        let clients = spans.filter { $0.kind == "SPAN_KIND_CLIENT" && $0.name == "PUT" }
                        #expect(clients.count == 3)
                        #expect(clients.allSatisfy { client in attempts.contains { $0.spanID == client.parentSpanID } })
                        #expect(clients.map { $0.attributes["http.response.status_code"] ?? "" }.sorted() == ["200", "200", "503"])
                        let sent = s3.requests.filter { $0.method == "PUT" }.compactMap { $0.header("traceparent") }
                        #expect(sent.sorted() == clients.map { "00-\($0.traceID)-\($0.spanID)-01" }.sorted())

                        let delivery = try #require(spans.first { $0.attributes["herald.delivery.id"] != nil })
                        #expect(delivery.kind == "SPAN_KIND_CLIENT" && delivery.name == "POST" && delivery.parentSpanID.isEmpty)
                        #expect(delivery.links.contains { $0.traceID == trace && $0.spanID == request.spanID }, "\(delivery.links)")
                        #expect(delivery.attributes["http.response.status_code"] == "200")
                        #expect(delivery.attributes["herald.webhook.id"] == hook.json["id"] as? String)
                        #expect(delivered.headers["traceparent"] == "00-\(delivery.traceID)-\(delivery.spanID)-01")
                    }
                }
            }
        }
    }

    @Test func anEndpointThatIsDownChangesNoAnswerAndTheLostSpansAreCounted() async throws {
        // A port nothing listens on: every export is refused at connect.
        let closed = try freeLoopbackPort()
        try await withHerald(configure: Self.traced("http://127.0.0.1:\(closed)")) { base, _, _ in
            let (_, _, before) = try await get("\(base)/metrics")
            let dropped = sample(before, #"herald_trace_spans_dropped_total{reason="export_failed"}"#)
            for _ in 0..<20 { #expect(try await send("\(base)/healthz") == .ok) }
            // Batches go out every 100 ms and fail at connect: their spans are counted as each export gives up.
            var after = dropped
            let deadline = ContinuousClock.now + .seconds(30)
            while after < dropped + 20, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(100))
                after = sample(try await get("\(base)/metrics").2, #"herald_trace_spans_dropped_total{reason="export_failed"}"#)
            }
            #expect(after >= dropped + 20, "the 20 requests' spans (and the /metrics reads') were counted as lost")
        }
    }

    @Test func aStalledEndpointChangesNoAnswer() async throws {
        try await OTLPReceiver.with { receiver in
            try await receiver.setMode("stall")
            try await withHerald(configure: Self.traced(receiver.base)) { base, _, _ in
                #expect(try await send("\(base)/healthz") == .ok)
                // The exporter is now held by the endpoint, which never answers; requests go on being answered.
                let deadline = ContinuousClock.now + .seconds(20)
                while try await receiver.exportRequests() == 0, ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(50))
                }
                #expect(try await receiver.exportRequests() >= 1)
                for _ in 0..<50 { #expect(try await send("\(base)/healthz") == .ok) }
            }
        }
    }
}

/// Runs `Tests/Support/<script>` (a receiver that prints `PORT <n>` once it listens) while `body` runs with its port.
func withReceiver<T: Sendable>(_ script: String, arguments: [String] = [], _ body: (Int) async throws -> T) async throws -> T {
    let process = Process()
    let output = Pipe()
    let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Support/\(script)")
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = ["python3", path.path, "--exit-on-stdin-eof"] + arguments
    // Held open while this process lives: the receiver exits when it closes, even if this process is killed.
    let input = Pipe()
    process.standardInput = input
    process.standardOutput = output
    try process.run()
    defer {
        // SIGKILL: the test process blocks SIGTERM (for its services' signal handling), and its child inherits the mask.
        try? input.fileHandleForWriting.close()
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }
    let line = try #require(await readLine(from: output.fileHandleForReading, containing: "PORT "), "\(script) started")
    let port = try #require(line.split(whereSeparator: \.isWhitespace).last.flatMap { Int($0) })
    return try await body(port)
}

/// A loopback port that was free a moment ago (bound, then closed).
func freeLoopbackPort() throws -> Int {
    let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(descriptor) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, length) == 0 && getsockname(descriptor, $0, &length) == 0 }
    }
    try #require(bound)
    return Int(UInt16(bigEndian: address.sin_port))
}
