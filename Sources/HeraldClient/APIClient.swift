import AsyncHTTPClient
import HeraldCore
import NIOCore
import NIOHTTP1

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Herald's HTTP API from the client's side: media uploads with progress, posts, jobs and their event streams.
///
/// Every call sends `Authorization: Bearer KEY` when a key is set. A non-2xx answer throws ``ClientError/problem(_:)``.
public struct APIClient: Sendable {
    /// A decoded answer and the JSON it came from, for `--json` output that passes the server's own bytes on.
    public struct Answer<Value: Sendable>: Sendable {
        public var value: Value
        public var json: String
    }

    /// The server's base URL, without a trailing slash: `http://127.0.0.1:8080`.
    public let server: String
    private let key: String?
    private let http: HTTPClient
    private static let decoder = JSONDecoder()
    private static let encoder = JSONEncoder()

    /// A client of the Herald at `server` that sends `key`; `http` is owned by the caller (shut it down after use).
    public init(server: String, key: String?, http: HTTPClient) {
        var server = server
        while server.hasSuffix("/") { server.removeLast() }
        self.server = server
        self.key = key
        self.http = http
    }

    // MARK: Media

    /// Uploads the file at `path` as `POST /v1/media`, its type read from its first bytes; `progress` hears the bytes sent.
    public func uploadMedia(path: String, progress: @escaping @Sendable (Int) -> Void) async throws -> Answer<Media> {
        let file = try UploadFile(path: path)
        let type = try Self.check(file)
        var request = makeRequest(.POST, "/v1/media")
        request.headers.add(name: "Content-Type", value: type.rawValue)
        request.body = .stream(file.body(progress: progress), length: .known(Int64(file.size)))
        return try await decode(Media.self, from: send(request, timeout: .hours(1)))
    }

    /// Files larger than this go through `/v1/uploads` (tus) by default, in PATCHes of ``resumableChunk`` bytes.
    public static let resumableThreshold = 8 << 20
    public static let resumableChunk = 8 << 20

    /// Uploads the file at `path` through `/v1/uploads` (tus 1.0.0) in PATCHes of `chunkSize` bytes; `progress` hears
    /// the bytes the server holds plus those of the PATCH under way. After a dropped connection, a server that is away
    /// (a restart) or answers 5xx or 423, it waits (0.5 s, doubling to 5 s), asks how far the bytes reach (`HEAD`) and
    /// sends the rest: at most one PATCH's bytes again. It gives up after `patience` without progress.
    public func uploadResumable(
        path: String, chunkSize: Int = resumableChunk, patience: Duration = .seconds(120), progress: @escaping @Sendable (Int) -> Void
    ) async throws -> Answer<Media> {
        let file = try UploadFile(path: path)
        let type = try Self.check(file)
        var creation = makeRequest(.POST, "/v1/uploads")
        creation.headers.add(name: "Tus-Resumable", value: "1.0.0")
        creation.headers.add(name: "Upload-Length", value: "\(file.size)")
        creation.headers.add(name: "Upload-Metadata", value: "filetype \(Data(type.rawValue.utf8).base64EncodedString())")
        let created = try await execute(creation, timeout: .seconds(60))
        guard created.status == .created, let location = created.headers.first(name: "Location") else { throw try await Self.problem(created) }
        // The upload's id is its media's id: the Location's last segment, whatever host it names.
        let id = location.split(separator: "/").last.map(String.init) ?? ""
        let upload = "/v1/uploads/" + Self.segment(id)

        var offset: Int64 = 0
        var retry = Duration.milliseconds(500)
        var lastProgress = ContinuousClock.now
        while offset < Int64(file.size) {
            let start = offset
            var request = makeRequest(.PATCH, upload)
            request.headers.add(name: "Tus-Resumable", value: "1.0.0")
            request.headers.add(name: "Upload-Offset", value: "\(start)")
            request.headers.add(name: "Content-Type", value: "application/offset+octet-stream")
            let end = min(start + Int64(chunkSize), Int64(file.size))
            request.body = .stream(file.body(range: start..<end) { progress(Int(start) + $0) }, length: .known(end - start))
            do {
                let response = try await execute(request, timeout: .hours(1))
                if response.status == .noContent, let reached = response.headers.first(name: "Upload-Offset").flatMap({ Int64($0) }) {
                    offset = reached
                    progress(Int(offset))
                    retry = .milliseconds(500)
                    lastProgress = .now
                    continue
                }
                // 409: the offset moved under this client (a PATCH it gave up on was counted); 423: one still holds it.
                guard response.status.code >= 500 || [409, 423].contains(response.status.code) else { throw try await Self.problem(response) }
                _ = try? await response.body.collect(upTo: 1 << 20)
            } catch let error as ClientError {
                guard case .unreachable = error else { throw error }
            }
            // Away, or answered what a moment may mend: wait, then ask how far the bytes reach.
            guard lastProgress.duration(to: .now) < patience else {
                throw ClientError.unreachable(url: server, reason: "the upload made no progress for \(patience)")
            }
            try await Task.sleep(for: retry)
            retry = min(retry * 2, .seconds(5))
            if let reached = try? await uploadOffset(upload) { offset = reached }
        }
        return try await decode(Media.self, from: send(makeRequest(.GET, "/v1/media/" + Self.segment(id))))
    }

    /// How many bytes of the upload at `path` the server holds (`HEAD`).
    private func uploadOffset(_ path: String) async throws -> Int64 {
        var request = makeRequest(.HEAD, path)
        request.headers.add(name: "Tus-Resumable", value: "1.0.0")
        let response = try await execute(request, timeout: .seconds(30))
        guard response.status == .ok, let offset = response.headers.first(name: "Upload-Offset").flatMap({ Int64($0) }) else {
            throw try await Self.problem(response)
        }
        return offset
    }

    /// Deletes staged media (`DELETE /v1/media/{id}`): what an abandoned publish leaves behind.
    public func deleteMedia(id: String) async throws {
        _ = try await send(makeRequest(.DELETE, "/v1/media/\(Self.segment(id))"))
    }

    // MARK: Posts

    /// Creates a post of `mediaIDs` (`POST /v1/posts`), once for `idempotencyKey` however often it is retried.
    public func createPost(
        text: String, mediaIDs: [String], scheduledAt: String?, priority: String?, idempotencyKey: String
    ) async throws -> Answer<PostAndJob> {
        var request = makeRequest(.POST, "/v1/posts")
        request.headers.add(name: "Content-Type", value: "application/json")
        request.headers.add(name: "Idempotency-Key", value: idempotencyKey)
        // The draft's own Codable form: the body the server decodes with the same type.
        let body = try Self.encoder.encode(PostDraft(text: text, mediaIDs: mediaIDs, scheduledAt: scheduledAt, priority: priority))
        request.body = .bytes(ByteBuffer(bytes: body))
        return try await decode(PostAndJob.self, from: send(request))
    }

    /// `GET /v1/posts/{id}`.
    public func post(id: String) async throws -> Answer<Post> {
        try await decode(Post.self, from: send(makeRequest(.GET, "/v1/posts/\(Self.segment(id))")))
    }

    /// `GET /v1/posts`, newest first.
    public func posts(state: String?, limit: Int?, cursor: String?) async throws -> Answer<Page<Post>> {
        try await decode(Page<Post>.self, from: send(makeRequest(.GET, "/v1/posts" + Self.query(state: state, limit: limit, cursor: cursor))))
    }

    // MARK: Jobs

    /// `GET /v1/jobs/{id}`.
    public func job(id: String) async throws -> Answer<Job> {
        try await decode(Job.self, from: send(makeRequest(.GET, "/v1/jobs/\(Self.segment(id))")))
    }

    /// `GET /v1/jobs`, newest first.
    public func jobs(state: String?, limit: Int?, cursor: String?) async throws -> Answer<Page<Job>> {
        try await decode(Page<Job>.self, from: send(makeRequest(.GET, "/v1/jobs" + Self.query(state: state, limit: limit, cursor: cursor))))
    }

    /// `POST /v1/jobs/{id}/cancel`: the job as it is right after the request.
    public func cancel(jobID: String) async throws -> Answer<Job> {
        try await decode(Job.self, from: send(makeRequest(.POST, "/v1/jobs/\(Self.segment(jobID))/cancel")))
    }

    /// Follows `GET /v1/jobs/{id}/events` until the job is done, calling `onEvent` with each snapshot; returns the last.
    ///
    /// A stream that breaks before the job is done is opened again with `Last-Event-ID` (after 1 s, then 2, 4, … up to
    /// 8), so no change is missed and none is seen twice; five failures in a row give up.
    public func follow(jobID: String, onEvent: (Answer<Job>) async throws -> Void) async throws -> Job {
        var lastEventID: String?
        var failures = 0
        while true {
            var request = makeRequest(.GET, "/v1/jobs/\(Self.segment(jobID))/events")
            request.headers.add(name: "Accept", value: "text/event-stream")
            if let lastEventID { request.headers.add(name: "Last-Event-ID", value: lastEventID) }
            do {
                let response = try await execute(request, timeout: .hours(24))
                guard response.status == .ok else { throw try await Self.problem(response) }
                var parser = EventStreamParser()
                for try await chunk in response.body {
                    for event in parser.feed(chunk.readableBytesView) where event.name == "job" {
                        let job = try decode(Job.self, from: event.data)
                        lastEventID = event.id ?? lastEventID
                        failures = 0
                        try await onEvent(job)
                        if job.value.done { return job.value }
                    }
                }
                throw ClientError.unreachable(url: server, reason: "the event stream ended before the job was done")
            } catch let error as ClientError {
                // A problem answer (404, 401) will not change by asking again.
                if case .problem = error { throw error }
                failures += 1
                if failures >= 5 { throw error }
                try await Task.sleep(for: .seconds(min(8, 1 << (failures - 1))))
            }
        }
    }

    // MARK: Transport

    private func makeRequest(_ method: HTTPMethod, _ path: String) -> HTTPClientRequest {
        var request = HTTPClientRequest(url: server + path)
        request.method = method
        if let key { request.headers.add(name: "Authorization", value: "Bearer \(key)") }
        request.headers.add(name: "User-Agent", value: "herald-cli")
        return request
    }

    /// Runs `request`, mapping transport errors to ``ClientError/unreachable(url:reason:)``.
    private func execute(_ request: HTTPClientRequest, timeout: TimeAmount) async throws -> HTTPClientResponse {
        do {
            return try await http.execute(request, timeout: timeout)
        } catch is CancellationError {
            throw CancellationError()
        } catch let error as ClientError {
            throw error
        } catch {
            if Task.isCancelled { throw CancellationError() }
            throw ClientError.unreachable(url: server, reason: "\(error)")
        }
    }

    /// Runs `request` and collects a 2xx answer's body (at most 16 MiB); anything else throws its problem.
    private func send(_ request: HTTPClientRequest, timeout: TimeAmount = .seconds(60)) async throws -> String {
        let response = try await execute(request, timeout: timeout)
        guard (200..<300).contains(response.status.code) else { throw try await Self.problem(response) }
        let body = try await response.body.collect(upTo: 16 << 20)
        return String(buffer: body)
    }

    private static func problem(_ response: HTTPClientResponse) async throws -> ClientError {
        let body = (try? await response.body.collect(upTo: 1 << 20)).map { String(buffer: $0) } ?? ""
        if let problem = try? decoder.decode(Problem.self, from: Data(body.utf8)) { return .problem(problem) }
        return .problem(Problem(status: Int(response.status.code), title: response.status.reasonPhrase))
    }

    private func decode<Value: Decodable & Sendable>(_ type: Value.Type, from json: String) throws -> Answer<Value> {
        do {
            return Answer(value: try Self.decoder.decode(type, from: Data(json.utf8)), json: json)
        } catch {
            throw ClientError.unexpectedAnswer("\(Value.self) from \(server): \(error)")
        }
    }

    // MARK: Encoding

    /// `s` percent-encoded as one path segment: everything but RFC 3986 unreserved characters.
    static func segment(_ s: String) -> String {
        var encoded = ""
        for byte in s.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                encoded.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                encoded += "%" + String(byte, radix: 16, uppercase: true).leftPadded(to: 2)
            }
        }
        return encoded
    }

    static func query(state: String?, limit: Int?, cursor: String?) -> String {
        var items: [String] = []
        if let state { items.append("state=\(segment(state))") }
        if let limit { items.append("limit=\(limit)") }
        if let cursor { items.append("cursor=\(segment(cursor))") }
        return items.isEmpty ? "" : "?" + items.joined(separator: "&")
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String {
        String(repeating: "0", count: max(0, width - count)) + self
    }
}

extension APIClient {
    /// The size and type of the file at `path` as `uploadMedia` will send it; throws what it would (missing, empty,
    /// not a type Herald accepts), so that a command can refuse before uploading anything.
    public static func inspect(path: String) throws(ClientError) -> (size: Int, type: MediaType) {
        let file = try UploadFile(path: path)
        return (file.size, try check(file))
    }

    /// The type of an opened file, or why Herald would refuse it: one open and one read of its first bytes per upload.
    private static func check(_ file: UploadFile) throws(ClientError) -> MediaType {
        guard let type = file.mediaType else {
            throw .file(path: file.path, reason: "not an image or video Herald accepts (JPEG, PNG, GIF, WebP, MP4, QuickTime, WebM)")
        }
        guard file.size > 0 else { throw .file(path: file.path, reason: "empty") }
        return type
    }
}
