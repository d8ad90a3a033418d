import AsyncHTTPClient
import Crypto
import FileReading
import Foundation
import HeraldCore
public import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import Platform
public import ServiceLifecycle
import Synchronization
import Telemetry
public import Tracing

/// Media in an S3-compatible object store (AWS S3, MinIO, R2, Ceph): SigV4-signed, path-style requests.
///
/// One `HTTPClient` with a bounded connection pool serves every request. ``put(_:)`` streams the staged
/// file in chunks (`FileChunks`) with `Content-Length`, and signs the payload with the SHA-256 computed
/// at ingest (`x-amz-content-sha256`), so S3 rejects bytes that changed since. A cancelled ``put(_:)``
/// cancels its HTTP request, which closes the connection at once: S3 discards an object whose body
/// never completed, so nothing partial is left.
///
/// As a `Service` it checks the bucket at start (`HeadBucket`, again every few seconds until it
/// answers), which ``availabilityProblem`` reports to `/readyz`, and shuts the HTTP client down last.
public struct S3MediaStore: MediaStore, Service {
    public let configuration: S3Configuration
    /// How many bytes are read from the staged file at once.
    public let chunkSize: Int
    /// The size of a multipart upload's parts when writing a body (one part is held in memory): 8 MiB, as AWS's CLI.
    public let partSize: Int
    /// The largest object one `CopyObject` copies: S3's limit, 5 GiB. A larger one is copied in parts of this size.
    public let largestCopy: Int

    private let client: HTTPClient
    private let signer: SigV4Signer
    private let bucketState: BucketState
    private let logger: Logger
    /// Traces the requests made within a traced task (an upload attempt); nil: none.
    private let tracer: (any Tracer)?

    /// A store with its own HTTP client; run it as a `Service` (or call ``shutdown()``) to release it.
    ///
    /// - Parameters:
    ///   - maxConnections: Connections to the endpoint at most; requests beyond them wait for one.
    ///   - connectTimeout: How long establishing a connection may take before the attempt fails (transiently).
    public init(
        configuration: S3Configuration,
        maxConnections: Int = 32,
        connectTimeout: Duration = .seconds(10),
        chunkSize: Int = 256 << 10,
        partSize: Int = 8 << 20,
        largestCopy: Int = 5 << 30,
        tracer: (any Tracer)? = nil,
        logger: Logger
    ) {
        self.tracer = tracer
        // S3 refuses parts under 5 MiB but the last; a smaller size only makes sense against a test server.
        precondition(chunkSize > 0 && maxConnections > 0 && partSize > 0 && largestCopy > 0)
        self.partSize = partSize
        self.largestCopy = largestCopy
        self.configuration = configuration
        self.chunkSize = chunkSize
        self.logger = logger
        self.signer = SigV4Signer(credentials: configuration.credentials, region: configuration.region, service: "s3")
        self.bucketState = BucketState()
        var client = HTTPClient.Configuration()
        client.httpVersion = .http1Only
        client.decompression = .disabled
        client.redirectConfiguration = .disallow
        client.connectionPool = .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: maxConnections)
        client.timeout = .init(connect: TimeAmount(connectTimeout))
        self.client = HTTPClient(
            eventLoopGroup: MultiThreadedEventLoopGroup.singleton,
            configuration: client,
            backgroundActivityLogger: logger
        )
    }

    // MARK: - MediaStore

    public func url(for key: String) -> String {
        let path = Self.encodedPath(key)
        if let base = configuration.publicBaseURL {
            return base + "/" + path
        }
        return "\(configuration.endpoint)/\(configuration.bucket)/\(path)"
    }

    public func put(_ object: MediaObject, progress: @escaping BytesTaken) async throws -> String {
        try Task.checkCancellation()
        try Self.validate(key: object.key)
        let file: ReadableFile
        do {
            file = try ReadableFile(path: object.stagedFile)
        } catch {
            throw MediaStoreError.reading(object, error)
        }
        guard file.size == Int64(object.size) else {
            throw MediaStoreError.sizeMismatch(key: object.key, expected: object.size, actual: Int(file.size))
        }
        let chunks = FileChunks(file: file, chunkSize: chunkSize, progress: progress) { MediaStoreError.reading(object, $0) }
        let body = HTTPClientRequest.Body.stream(chunks, length: .known(file.size))
        let response = try await send(
            "PUT",
            key: object.key,
            headers: [("content-type", object.contentType), ("content-length", String(object.size))],
            payloadHash: object.sha256,
            body: body,
            operation: "PutObject"
        )
        guard (200..<300).contains(response.status) else {
            throw response.error
        }
        return url(for: object.key)
    }

    /// One PUT for a body shorter than ``partSize``; otherwise a multipart upload of ``partSize`` parts, each sent as it
    /// fills (one part held in memory), aborted on any failure or cancellation.
    public func write<Chunks: AsyncSequence>(_ chunks: Chunks, key: String, contentType: String) async throws -> Int
    where Chunks.Element == [UInt8] {
        try Task.checkCancellation()
        try Self.validate(key: key)
        // The part fills one buffer, sent as a slice of it (not copied); the bytes after it stay for the next part.
        var part = ByteBuffer()
        var size = 0
        var upload: MultipartUpload?
        do {
            for try await chunk in chunks {
                size += chunk.count
                part.writeBytes(chunk)
                while part.readableBytes >= partSize {
                    if upload == nil { upload = try await startMultipart(key: key, contentType: contentType) }
                    try await upload!.send(part.readSlice(length: partSize)!, through: self)
                    part.discardReadBytes()
                }
            }
            guard var multipart = upload else {
                try await putBytes(part, key: key, contentType: contentType)
                return size
            }
            upload = nil  // completing it: an error from here on is the completion's, and aborts it below
            do {
                if part.readableBytes > 0 || multipart.parts.isEmpty { try await multipart.send(part, through: self) }
                try await complete(multipart)
            } catch {
                await abort(multipart)
                throw error
            }
            return size
        } catch {
            if let upload { await abort(upload) }
            throw error
        }
    }

    /// A server-side `CopyObject` (the bytes never leave the store); an object over ``largestCopy`` (S3 refuses to copy
    /// more than 5 GiB at once) is copied range by range into a multipart upload (`UploadPartCopy`), aborted on any
    /// failure or cancellation, with `progress` told after each part.
    public func copy(_ object: MediaObject, fromStaged stagedKey: String, progress: @escaping BytesTaken) async throws -> String {
        try Task.checkCancellation()
        try Self.validate(key: object.key)
        try Self.validate(key: stagedKey)
        if object.size > largestCopy {
            try await copyInParts(object, from: stagedKey, progress: progress)
            return url(for: object.key)
        }
        let answer = try await send(
            "PUT", key: object.key,
            headers: [("x-amz-copy-source", copySource(stagedKey)), ("x-amz-metadata-directive", "REPLACE"), ("content-type", object.contentType)],
            operation: "CopyObject", readsBody: true)
        guard answer.succeeded else {
            if answer.status == 404 { throw MediaStoreError.stagedFileMissing("s3://\(configuration.bucket)/\(stagedKey)") }
            throw answer.error
        }
        progress(object.size)
        return url(for: object.key)
    }

    /// `ListObjectsV2`, page after page.
    ///
    /// The prefix sent stops before its first character that a query encodes (`staging/` is sent as `staging`), the
    /// rest is filtered here: moto checks signatures over the query as werkzeug re-quotes it, `/` left bare, so a signed
    /// `%2F` never matches there.
    public func list(prefix: String) async throws -> [StoredEntry] {
        let sent = String(prefix.prefix { $0.isASCII && ($0.isLetter || $0.isNumber || "-_.~".contains($0)) })
        var entries: [StoredEntry] = []
        var continuation: String?
        repeat {
            var query = [(name: "list-type", value: "2"), (name: "prefix", value: sent)]
            if let continuation { query.append((name: "continuation-token", value: continuation)) }
            let answer = try await send("GET", key: nil, query: query, operation: "ListObjectsV2", timeout: .seconds(30), readsBody: true)
            guard answer.succeeded else { throw answer.error }
            for contents in S3ErrorDocument.elements("Contents", in: answer.body) {
                guard let key = S3ErrorDocument.element("Key", in: contents), key.hasPrefix(prefix) else { continue }
                let modified = S3ErrorDocument.element("LastModified", in: contents).flatMap { Timestamp(rfc3339: $0) }
                entries.append(StoredEntry(key: key, modified: modified.map { Double($0.millisecondsSinceEpoch) / 1000 } ?? 0))
            }
            continuation =
                S3ErrorDocument.element("IsTruncated", in: answer.body) == "true"
                ? S3ErrorDocument.element("NextContinuationToken", in: answer.body) : nil
        } while continuation != nil
        return entries
    }

    public func delete(key: String) async throws {
        try Self.validate(key: key)
        // Deleting is how a failed or cancelled job cleans up: finish it even if the caller is cancelled.
        let response = try await Task {
            try await send("DELETE", key: key, operation: "DeleteObject", timeout: .seconds(30))
        }.value
        // 404: there was nothing to delete (S3 itself answers 204 for a missing key).
        guard (200..<300).contains(response.status) || response.status == 404 else {
            throw response.error
        }
    }

    /// `DeleteObjects`, a thousand keys a request (S3's limit), quiet: the answer lists only the keys it failed.
    public func delete(keys: [String]) async throws {
        for key in keys { try Self.validate(key: key) }
        for start in stride(from: 0, to: keys.count, by: 1000) {
            let objects = keys[start..<min(start + 1000, keys.count)].map { "<Object><Key>\(xmlEscaped($0))</Key></Object>" }
            let body = Array("<Delete><Quiet>true</Quiet>\(objects.joined())</Delete>".utf8)
            // S3 refuses a DeleteObjects without the body's MD5 (or another checksum); as delete(key:), finished even
            // if the caller is cancelled.
            let answer = try await Task {
                try await send(
                    "POST", key: nil, query: [("delete", "")],
                    headers: [
                        ("content-type", "application/xml"), ("content-length", String(body.count)),
                        ("content-md5", Data(Insecure.MD5.hash(data: body)).base64EncodedString()),
                    ],
                    payloadHash: SigV4Signer.payloadHash(body), body: .bytes(ByteBuffer(bytes: body)), operation: "DeleteObjects",
                    timeout: .seconds(30), readsBody: true)
            }.value
            guard answer.succeeded else { throw answer.error }
        }
    }

    public func exists(key: String) async throws -> Bool {
        try Self.validate(key: key)
        let response = try await send("HEAD", key: key, operation: "HeadObject", timeout: .seconds(30))
        switch response.status {
        case 200..<300: return true
        case 404: return false
        default: throw response.error
        }
    }

    /// Why uploads cannot work now (the bucket did not answer at start), for `/readyz`; `nil` once it has.
    public var availabilityProblem: String? {
        bucketState.problem
    }

    /// Returns once the start-up `HeadBucket` has answered (``availabilityProblem`` no longer says "checking").
    public func bucketChecked() async {
        await bucketState.checked()
    }

    // MARK: - Service

    /// Checks the bucket until it answers, and shuts the HTTP client down on graceful shutdown.
    public func run() async throws {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.watchBucket() }
            try? await gracefulShutdown()
            group.cancelAll()
        }
        try await shutdown()
    }

    /// Releases the HTTP client; the store cannot be used afterwards.
    public func shutdown() async throws {
        try await client.shutdown()
    }

    /// `HeadBucket` until it succeeds: at once, then every `retryInterval`. Logs the first failure and the recovery.
    func watchBucket(retryInterval: Duration = .seconds(5)) async {
        var failures = 0
        while !Task.isCancelled {
            if let problem = await checkBucket() {
                bucketState.set(.unreachable(problem))
                if failures == 0 {
                    logger.error("the media store's bucket cannot be used; /readyz answers 503 until it can", metadata: ["problem": "\(problem)"])
                }
                failures += 1
                try? await Task.sleep(for: retryInterval)
            } else {
                bucketState.set(.reachable)
                if failures > 0 {
                    logger.notice("the media store's bucket answers now", metadata: ["bucket": "\(configuration.bucket)"])
                } else {
                    logger.info("media store ready", metadata: ["bucket": "\(configuration.bucket)", "endpoint": "\(configuration.endpoint)"])
                }
                return
            }
        }
    }

    /// `nil` when `HeadBucket` answers 200; otherwise what is wrong, in words.
    public func checkBucket() async -> String? {
        let target = "bucket '\(configuration.bucket)' at \(configuration.endpoint)"
        do {
            let response = try await send("HEAD", key: nil, operation: "HeadBucket", timeout: .seconds(10))
            switch response.status {
            case 200..<300:
                return nil
            case 404:
                return "\(target): NoSuchBucket (HTTP 404): the bucket does not exist"
            case 403:
                return "\(target): AccessDenied (HTTP 403): the credentials are wrong or may not use the bucket"
            case 301:
                let region = response.headers.first(name: "x-amz-bucket-region").map { " (it is in \($0))" } ?? ""
                return "\(target): HTTP 301: the bucket is in another region than \(configuration.region)\(region)"
            default:
                return "\(target): \(response.error.message)"
            }
        } catch {
            return "\(target): \((error as? MediaStoreError)?.message ?? "\(error)")"
        }
    }

    // MARK: - Writing in parts

    /// Parts that are not `MultipartUpload`'s (a resumable upload's, sent over many requests): numbered by the caller.
    private func uploadPart(_ bytes: ByteBuffer, number: Int, key: String, uploadID: String) async throws -> String {
        let answer = try await send(
            "PUT", key: key, query: [("partNumber", String(number)), ("uploadId", uploadID)],
            headers: [("content-length", String(bytes.readableBytes))], payloadHash: SigV4Signer.payloadHash(bytes.readableBytesView),
            body: .bytes(bytes), operation: "UploadPart")
        guard answer.succeeded, let etag = answer.headers.first(name: "etag") else { throw answer.error }
        return etag
    }

    /// An S3 multipart upload under way: its id and the parts sent so far.
    struct MultipartUpload {
        let key: String
        let id: String
        var parts: [(number: Int, etag: String)] = []

        mutating func send(_ bytes: ByteBuffer, through store: S3MediaStore) async throws {
            let number = parts.count + 1
            parts.append((number, try await store.uploadPart(bytes, number: number, key: key, uploadID: id)))
        }

        /// `UploadPartCopy`: the next part is `range` of the staged object, copied inside the store.
        mutating func copy(bytes range: Range<Int>, of stagedKey: String, through store: S3MediaStore) async throws {
            let number = parts.count + 1
            let answer = try await store.send(
                "PUT", key: key, query: [("partNumber", String(number)), ("uploadId", id)],
                headers: [
                    ("x-amz-copy-source", store.copySource(stagedKey)),
                    ("x-amz-copy-source-range", "bytes=\(range.lowerBound)-\(range.upperBound - 1)"),
                ],
                operation: "UploadPartCopy", readsBody: true)
            guard answer.succeeded, let etag = S3ErrorDocument.element("ETag", in: answer.body) else {
                // The source is missing (S3: NoSuchKey; moto answers a bare 404), unless the upload or the bucket is.
                let code = S3ErrorDocument.element("Code", in: answer.body)
                if answer.status == 404, code != "NoSuchUpload", code != "NoSuchBucket" {
                    throw MediaStoreError.stagedFileMissing("s3://\(store.configuration.bucket)/\(stagedKey)")
                }
                throw answer.error
            }
            parts.append((number, etag))
        }
    }

    /// The `x-amz-copy-source` of a staged object: `/bucket/key`, the key percent-encoded as in a path.
    private func copySource(_ stagedKey: String) -> String {
        "/" + configuration.bucket + "/" + Self.encodedPath(stagedKey)
    }

    private func copyInParts(_ object: MediaObject, from stagedKey: String, progress: BytesTaken) async throws {
        var upload = try await startMultipart(key: object.key, contentType: object.contentType)
        do {
            var copied = 0
            while copied < object.size {
                try Task.checkCancellation()
                let end = min(copied + largestCopy, object.size)
                try await upload.copy(bytes: copied..<end, of: stagedKey, through: self)
                copied = end
                progress(copied)
            }
            try await complete(upload)
        } catch {
            await abort(upload)
            throw error
        }
    }

    private func putBytes(_ bytes: ByteBuffer, key: String, contentType: String) async throws {
        let answer = try await send(
            "PUT", key: key, headers: [("content-type", contentType), ("content-length", String(bytes.readableBytes))],
            payloadHash: SigV4Signer.payloadHash(bytes.readableBytesView), body: .bytes(bytes), operation: "PutObject")
        guard answer.succeeded else { throw answer.error }
    }

    private func startMultipart(key: String, contentType: String) async throws -> MultipartUpload {
        let answer = try await send(
            "POST", key: key, query: [("uploads", "")], headers: [("content-type", contentType)], operation: "CreateMultipartUpload",
            readsBody: true)
        guard answer.succeeded, let id = S3ErrorDocument.element("UploadId", in: answer.body) else { throw answer.error }
        return MultipartUpload(key: key, id: id)
    }

    private func complete(_ upload: MultipartUpload) async throws {
        let parts = upload.parts.map { "<Part><PartNumber>\($0.number)</PartNumber><ETag>\(xmlEscaped($0.etag))</ETag></Part>" }
        let body = Array("<CompleteMultipartUpload>\(parts.joined())</CompleteMultipartUpload>".utf8)
        let answer = try await send(
            "POST", key: upload.key, query: [("uploadId", upload.id)],
            headers: [("content-type", "application/xml"), ("content-length", String(body.count))],
            payloadHash: SigV4Signer.payloadHash(body), body: .bytes(ByteBuffer(bytes: body)), operation: "CompleteMultipartUpload",
            readsBody: true)
        guard answer.succeeded else { throw answer.error }
    }

    /// Aborts a multipart upload, so that its parts do not stay (and cost) in the bucket; done even when the caller
    /// is cancelled. A failure is logged: the bucket's lifecycle rule for incomplete uploads is the net then.
    private func abort(_ upload: MultipartUpload) async {
        let answer = await Task {
            try? await send("DELETE", key: upload.key, query: [("uploadId", upload.id)], operation: "AbortMultipartUpload", timeout: .seconds(30))
        }.value
        if answer.map({ !(200..<300).contains($0.status) && $0.status != 404 }) ?? true {
            logger.warning("could not abort a multipart upload", metadata: ["key": "\(upload.key)", "upload_id": "\(upload.id)"])
        }
    }

    private func xmlEscaped(_ text: String) -> String {
        text.replacing("&", with: "&amp;").replacing("<", with: "&lt;").replacing(">", with: "&gt;").replacing("\"", with: "&quot;")
    }

    // MARK: - Requests

    /// An answer: its status, headers, its body (for errors, or when asked) and the error it would be.
    struct Answer {
        var status: Int
        var headers: HTTPHeaders
        var body: String
        var error: MediaStoreError

        /// Whether it succeeded: a 2xx without an error document (CopyObject and CompleteMultipartUpload can fail
        /// after their 200, in the body).
        var succeeded: Bool { (200..<300).contains(status) && !body.contains("<Error>") }
    }

    /// Signs and sends one request for `key` (or the bucket itself), and reads the answer.
    ///
    /// Errors are ``MediaStoreError``s (transient for connection failures and timeouts) or `CancellationError`.
    private func send(
        _ method: String,
        key: String?,
        query: [(name: String, value: String)] = [],
        headers extra: [(name: String, value: String)] = [],
        payloadHash: String = SigV4Signer.emptyPayloadHash,
        body: HTTPClientRequest.Body? = nil,
        operation: String,
        timeout: Duration? = nil,
        readsBody: Bool = false,
        stream: ((ByteBuffer) async throws -> Void)? = nil
    ) async throws -> Answer {
        let path = "/" + configuration.bucket + (key.map { "/" + Self.encodedPath($0) } ?? "")
        var signed = extra
        signed.append(("host", configuration.hostHeader))
        signed.append(("x-amz-content-sha256", payloadHash))
        let signature = signer.sign(method: method, path: path, query: query, headers: signed, payloadHash: payloadHash, date: .now())

        let queryString = query.isEmpty ? "" : "?" + SigV4Signer.canonicalQuery(query)
        var request = HTTPClientRequest(url: configuration.endpoint + path + queryString)
        request.method = HTTPMethod(rawValue: method)
        for (name, value) in signature.headers {
            request.headers.add(name: name, value: value)
        }
        request.headers.add(name: "authorization", value: signature.authorization)
        request.body = body
        // Traced when made within a traced task (an upload attempt): a child span, named to S3 by `traceparent`.
        let span = tracer.flatMap { tracer in
            ServiceContext.current.map { ClientSpan(tracer: tracer, method: method, url: request.url, context: $0) }
        }
        for (name, value) in span?.headers ?? [] { request.headers.add(name: name, value: value) }

        let target = "\(operation) s3://\(configuration.bucket)/\(key ?? "")"
        do {
            // Without a timeout of its own, a request is bounded by its caller (the job's --upload-timeout).
            let deadline = timeout.map { NIODeadline.now() + TimeAmount($0) } ?? .distantFuture
            let response = try await client.execute(request, deadline: deadline, logger: logger)
            let status = Int(response.status.code)
            var body = ByteBuffer()
            if let stream, (200..<300).contains(status) {
                for try await chunk in response.body { try await stream(chunk) }
            } else if readsBody || (!(200..<300).contains(status) && method != "HEAD") {
                // An S3 error is a small XML document, and so is a listing page of 1,000 keys; more is not one.
                body = (try? await response.body.collect(upTo: 4 << 20)) ?? ByteBuffer()
            }
            let text = String(buffer: body)
            let error = S3ErrorDocument(text).error(status: (200..<300).contains(status) ? 500 : status, target: target)
            span?.end(status: status)
            return Answer(status: status, headers: response.headers, body: text, error: error)
        } catch let error as MediaStoreError {
            span?.end(error: error)
            throw Task.isCancelled ? CancellationError() : error
        } catch {
            span?.end(error: error)
            if Task.isCancelled || error is CancellationError {
                throw CancellationError()
            }
            if let error = error as? HTTPClientError, error == .deadlineExceeded, let timeout {
                throw MediaStoreError.timedOut(after: timeout)
            }
            throw MediaStoreError.transient("\(target) at \(configuration.endpoint): \(error)")
        }
    }

    /// Keys are Herald's own (`media/ID.EXT`); an empty one would address the bucket.
    private static func validate(key: String) throws {
        guard !key.isEmpty, !key.hasPrefix("/") else {
            throw MediaStoreError.invalidKey(key, reason: "it is empty or starts with '/'")
        }
    }

    /// The key's segments percent-encoded, the slashes between them kept: S3 signs the path as sent.
    static func encodedPath(_ key: String) -> String {
        key.split(separator: "/", omittingEmptySubsequences: false).map { percentEncoded($0, keeping: .unreserved) }.joined(separator: "/")
    }
}

// MARK: - Errors

/// The `<Error><Code>…</Code><Message>…</Message></Error>` body of a failed S3 request.
struct S3ErrorDocument {
    var code: String?
    var message: String?

    init(_ xml: String) {
        code = Self.element("Code", in: xml)
        message = Self.element("Message", in: xml)
    }

    /// Codes S3 sends with a 4xx or 5xx that mean "try again" (AWS's SDKs retry them too).
    static let transientCodes: Set<String> = [
        "SlowDown", "RequestTimeout", "InternalError", "ServiceUnavailable", "Throttling", "ThrottlingException",
        "RequestThrottled", "TooManyRequests",
    ]

    /// The error for an answer with `status`: transient for 429, 5xx and the transient codes; permanent otherwise.
    func error(status: Int, target: String) -> MediaStoreError {
        let code = self.code ?? (status == 404 ? "NotFound" : "HTTP \(status)")
        let text = "\(target) failed: \(code) (HTTP \(status))" + (message.map { ": \($0)" } ?? "")
        if status == 429 || (500...599).contains(status) || Self.transientCodes.contains(code) {
            return .transient(text, statusCode: status)
        }
        return .permanent(text, statusCode: status)
    }

    /// The raw insides of every `<name>…</name>` in order (a listing's `Contents`).
    static func elements(_ name: String, in xml: String) -> [Substring] {
        var found: [Substring] = []
        var rest = xml[...]
        while let open = rest.firstRange(of: "<\(name)>"), let close = rest[open.upperBound...].firstRange(of: "</\(name)>") {
            found.append(rest[open.upperBound..<close.lowerBound])
            rest = rest[close.upperBound...]
        }
        return found
    }

    /// The text of the first `<name>…</name>`, unescaped; enough for S3's flat documents.
    static func element(_ name: String, in xml: some StringProtocol) -> String? {
        guard let open = xml.firstRange(of: "<\(name)>"), let close = xml[open.upperBound...].firstRange(of: "</\(name)>") else {
            return nil
        }
        let text = xml[open.upperBound..<close.lowerBound]
        return String(text)
            .replacing("&lt;", with: "<").replacing("&gt;", with: ">").replacing("&quot;", with: "\"")
            .replacing("&apos;", with: "'").replacing("&amp;", with: "&")
    }
}

/// Whether the bucket answered the start-up check; touched by the watcher and read by `/readyz`.
private final class BucketState: Sendable {
    enum State {
        case checking
        case reachable
        case unreachable(String)
    }

    private struct Guarded {
        var state = State.checking
        /// Callers of ``checked()`` waiting for the first answer.
        var waiters: [CheckedContinuation<Void, Never>] = []
    }

    private let guarded = Mutex(Guarded())

    func set(_ new: State) {
        let waiters = guarded.withLock { guarded in
            guarded.state = new
            defer { guarded.waiters = [] }
            return guarded.waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Returns once the first check has an answer, whatever it is.
    func checked() async {
        await withCheckedContinuation { continuation in
            let known = guarded.withLock { guarded in
                guard case .checking = guarded.state else { return true }
                guarded.waiters.append(continuation)
                return false
            }
            if known { continuation.resume() }
        }
    }

    var problem: String? {
        guarded.withLock { guarded in
            switch guarded.state {
            case .checking: return "checking the media store's bucket"
            case .reachable: return nil
            case .unreachable(let problem): return problem
            }
        }
    }
}

extension MediaStoreError {
    /// A staged file that could not be opened or read, in a store's terms: missing or not a file is for good, a failed
    /// open or read may pass, a file cut short is a size mismatch.
    static func reading(_ object: MediaObject, _ error: FileReadError) -> MediaStoreError {
        switch error {
        case .cannotOpen(errno: ENOENT): .stagedFileMissing(object.stagedFile)
        case .cannotOpen: .transient("Cannot open '\(object.stagedFile)': \(error.reason)")
        case .notARegularFile: .permanent("The staged file '\(object.stagedFile)' is not a regular file.")
        case .cannotRead: .transient("Cannot read the staged file of '\(object.key)': \(error.reason)")
        case .shortened(let offset): .sizeMismatch(key: object.key, expected: object.size, actual: Int(offset))
        }
    }
}

// MARK: - MultipartStore

extension S3MediaStore: MultipartStore {
    public func beginParts(key: String, contentType: String) async throws -> String {
        try Self.validate(key: key)
        return try await startMultipart(key: key, contentType: contentType).id
    }

    public func sendPart(_ bytes: ByteBuffer, number: Int, key: String, uploadID: String) async throws {
        _ = try await uploadPart(bytes, number: number, key: key, uploadID: uploadID)
    }

    /// `ListParts` (page after page) for the parts' ETags, then `CompleteMultipartUpload` of parts `1...count`.
    public func completeParts(count: Int, key: String, uploadID: String) async throws {
        var etags: [Int: String] = [:]
        var marker: String?
        repeat {
            var query = [(name: "uploadId", value: uploadID)]
            if let marker { query.append((name: "part-number-marker", value: marker)) }
            let answer = try await send("GET", key: key, query: query, operation: "ListParts", timeout: .seconds(30), readsBody: true)
            guard answer.succeeded else { throw answer.error }
            for part in S3ErrorDocument.elements("Part", in: answer.body) {
                guard let number = S3ErrorDocument.element("PartNumber", in: part).flatMap({ Int($0) }),
                    let etag = S3ErrorDocument.element("ETag", in: part)
                else { continue }
                etags[number] = etag
            }
            marker =
                S3ErrorDocument.element("IsTruncated", in: answer.body) == "true"
                ? S3ErrorDocument.element("NextPartNumberMarker", in: answer.body) : nil
        } while marker != nil
        var upload = MultipartUpload(key: key, id: uploadID)
        for number in 1...max(count, 1) {
            guard let etag = etags[number] else {
                throw MediaStoreError.permanent("part \(number) of the multipart upload of s3://\(configuration.bucket)/\(key) is missing")
            }
            upload.parts.append((number, etag))
        }
        try await complete(upload)
    }

    public func abortParts(key: String, uploadID: String) async {
        await abort(MultipartUpload(key: key, id: uploadID))
    }

    public func putObject(_ bytes: ByteBuffer, key: String) async throws {
        try Self.validate(key: key)
        try await putBytes(bytes, key: key, contentType: "application/octet-stream")
    }

    public func read(key: String, range: Range<Int>?, _ body: (ByteBuffer) async throws -> Void) async throws -> Bool {
        try Self.validate(key: key)
        let headers = range.map { [(name: "range", value: "bytes=\($0.lowerBound)-\($0.upperBound - 1)")] } ?? []
        let answer = try await withoutActuallyEscaping(body) { body in
            try await send("GET", key: key, headers: headers, operation: "GetObject", stream: body)
        }
        if answer.status == 404 { return false }
        guard (200..<300).contains(answer.status) else { throw answer.error }
        return true
    }
}
