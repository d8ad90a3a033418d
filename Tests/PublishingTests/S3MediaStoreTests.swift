import Crypto
import Foundation
import HeraldTestSupport
import Logging
import Publishing
import Testing

/// A staged file of `size` pseudo-random bytes in a fresh directory, and its SHA-256.
///
/// Written a block at a time and never held whole: other suites measure this process's peak memory.
struct StagedFile {
    let directory: String
    let path: String
    let size: Int
    let sha256: String

    init(size: Int) throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("herald-s3-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        path = directory + "/staged.bin"
        self.size = size
        // A random block repeated: random enough for checksums, fast enough for tens of MiB in a debug build.
        let block = Data((0..<(64 << 10)).map { _ in UInt8.random(in: 0...255) })
        guard FileManager.default.createFile(atPath: path, contents: nil) else { throw CocoaError(.fileWriteUnknown) }
        let file = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        defer { try? file.close() }
        var hash = SHA256()
        var written = 0
        while written < size {
            let piece = block.prefix(size - written)
            try file.write(contentsOf: piece)
            hash.update(data: piece)
            written += piece.count
        }
        sha256 = hash.finalize().map { String(format: "%02x", $0) }.joined()
    }

    func object(key: String = "media/\(UUID().uuidString.lowercased()).bin") -> MediaObject {
        MediaObject(key: key, stagedFile: path, size: size, sha256: sha256, contentType: "application/octet-stream")
    }

    func remove() {
        try? FileManager.default.removeItem(atPath: directory)
    }
}

/// Runs `body` with a store for `bucket` at `endpoint`, and shuts its HTTP client down afterwards.
func withS3Store<T>(
    endpoint: String,
    bucket: String,
    credentials: SigV4Signer.Credentials,
    chunkSize: Int = 64 << 10,
    partSize: Int = 8 << 20,
    largestCopy: Int = 5 << 30,
    connectTimeout: Duration = .seconds(10),
    _ body: (S3MediaStore) async throws -> T
) async throws -> T {
    var logger = Logger(label: "S3MediaStoreTests")
    logger.logLevel = .critical
    let configuration = try S3Configuration(url: "s3://\(bucket)?endpoint=\(endpoint)&region=us-east-1", credentials: credentials)
    let store = S3MediaStore(
        configuration: configuration, connectTimeout: connectTimeout, chunkSize: chunkSize, partSize: partSize,
        largestCopy: largestCopy, logger: logger)
    do {
        let result = try await body(store)
        try await store.shutdown()
        return result
    } catch {
        try? await store.shutdown()
        throw error
    }
}

@Suite("S3 media store against moto (SigV4 verified)", .serialized, .timeLimit(.minutes(2)))
struct S3MediaStoreMotoTests {
    @Test func putStreamsTheFileAndTheStoredBytesMatch() async throws {
        let moto = try await MotoServer.shared()
        let s3 = S3TestClient(endpoint: moto.endpoint, credentials: moto.credentials)
        let bucket = try await s3.makeBucket()
        let staged = try StagedFile(size: 1_500_000)  // 23 chunks of 64 KiB
        defer { staged.remove() }
        let object = staged.object()

        try await withS3Store(endpoint: moto.endpoint, bucket: bucket, credentials: moto.credentials) { store in
            #expect(await store.checkBucket() == nil)
            let reported = BytesLog()
            let url = try await store.put(object, progress: reported.record)
            #expect(url == "\(moto.endpoint)/\(bucket)/\(object.key)")
            // A count as the client takes each next chunk, growing to the size.
            #expect(reported.counts == Array(stride(from: 64 << 10, to: staged.size, by: 64 << 10)) + [staged.size])
            let stored = try #require(try await s3.get(bucket: bucket, key: object.key))
            #expect(stored.count == staged.size)
            #expect(SigV4Signer.payloadHash(stored) == staged.sha256)
            #expect(try await store.exists(key: object.key))

            try await store.delete(key: object.key)
            #expect(try await !store.exists(key: object.key))
            #expect(try await s3.keys(bucket: bucket).isEmpty)
            // Deleting what is not there succeeds: clean-up may run twice.
            try await store.delete(key: object.key)
        }
    }

    @Test func deleteKeysRemovesThemAllInBatchesOfAThousand() async throws {
        let moto = try await MotoServer.shared()
        let s3 = S3TestClient(endpoint: moto.endpoint, credentials: moto.credentials)
        let bucket = try await s3.makeBucket()
        let staged = try StagedFile(size: 1_000)
        defer { staged.remove() }
        // 1,001 keys, two requests: the first key and the last, in each, exist; the rest (missing) succeed as DELETE does.
        let keys = (0...1_000).map { "staging/\(String(format: "%04d", $0))" }
        let kept = staged.object(key: "media/kept.bin")

        try await withS3Store(endpoint: moto.endpoint, bucket: bucket, credentials: moto.credentials) { store in
            for key in [keys[0], keys[999], keys[1_000], kept.key] {
                _ = try await store.put(staged.object(key: key))
            }
            #expect(try await s3.keys(bucket: bucket).count == 4)
            try await store.delete(keys: keys)
            #expect(try await s3.keys(bucket: bucket) == [kept.key])
            try await store.delete(keys: [])
            try await store.delete(keys: [keys[0]])  // again: nothing there, and no failure
        }
    }

    @Test(
        "write stages a large body in parts and a small one in one PUT; copy publishes it in the bucket; a body that fails part way aborts its upload"
    )
    func writeInPartsCopyAndAbort() async throws {
        let moto = try await MotoServer.shared()
        let s3 = S3TestClient(endpoint: moto.endpoint, credentials: moto.credentials)
        let bucket = try await s3.makeBucket()
        // S3's smallest part (5 MiB): 12 MiB go as three parts, the last one short.
        try await withS3Store(endpoint: moto.endpoint, bucket: bucket, credentials: moto.credentials, partSize: 5 << 20) { store in
            let large = (0..<(12 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 2_654_435_761 >> 13) }
            #expect(try await store.write(chunked(large, by: 256 << 10), key: "staging/big.mp4", contentType: "video/mp4") == large.count)
            let small = Array(large.prefix(1000))
            #expect(try await store.write(chunked(small, by: 300), key: "staging/small.png", contentType: "image/png") == small.count)
            #expect(try await s3.get(bucket: bucket, key: "staging/big.mp4") == large)
            #expect(try await s3.get(bucket: bucket, key: "staging/small.png") == small)
            #expect(try await store.list(prefix: "staging/").map(\.key).sorted() == ["staging/big.mp4", "staging/small.png"])
            #expect(try await store.list(prefix: "staging/").allSatisfy { abs($0.modified - Date().timeIntervalSince1970) < 300 })

            let object = MediaObject(key: "media/big.mp4", stagedFile: "", size: large.count, sha256: "", contentType: "video/mp4")
            let reported = BytesLog()
            #expect(try await store.copy(object, fromStaged: "staging/big.mp4", progress: reported.record) == store.url(for: "media/big.mp4"))
            #expect(reported.counts == [large.count])
            #expect(try await s3.get(bucket: bucket, key: "media/big.mp4") == large)
            await #expect(throws: MediaStoreError.self) {
                try await store.copy(object, fromStaged: "staging/none.mp4", progress: { _ in })
            }

            // Refused after two parts went: the error as it came, no object, no multipart upload left in the bucket.
            struct Refused: Error {}
            let failing = AsyncThrowingStream<[UInt8], any Error> { continuation in
                continuation.yield(Array(large.prefix(11 << 20)))
                continuation.finish(throwing: Refused())
            }
            await #expect(throws: Refused.self) { try await store.write(failing, key: "staging/cut.mp4", contentType: "video/mp4") }
            #expect(try await s3.get(bucket: bucket, key: "staging/cut.mp4") == nil)
            let uploads = try await s3.send("GET", "/\(bucket)", query: [("uploads", "")])
            #expect(uploads.status == 200 && !String(decoding: uploads.body, as: UTF8.self).contains("<Upload>"))
        }
    }

    @Test("a copy larger than largestCopy goes range by range (UploadPartCopy); a missing source fails as such and leaves no upload")
    func copyInParts() async throws {
        let moto = try await MotoServer.shared()
        let s3 = S3TestClient(endpoint: moto.endpoint, credentials: moto.credentials)
        let bucket = try await s3.makeBucket()
        // S3's smallest part (5 MiB) as the largest single copy: 12 MiB copy as 5 + 5 + 2.
        try await withS3Store(endpoint: moto.endpoint, bucket: bucket, credentials: moto.credentials, partSize: 5 << 20, largestCopy: 5 << 20) {
            store in
            let large = (0..<(12 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 2_654_435_761 >> 11) }
            _ = try await store.write(chunked(large, by: 1 << 20), key: "staging/huge.mp4", contentType: "video/mp4")
            let object = MediaObject(key: "media/huge.mp4", stagedFile: "", size: large.count, sha256: "", contentType: "video/mp4")
            let reported = BytesLog()
            #expect(try await store.copy(object, fromStaged: "staging/huge.mp4", progress: reported.record) == store.url(for: object.key))
            #expect(reported.counts == [5 << 20, 10 << 20, 12 << 20])
            #expect(try await s3.get(bucket: bucket, key: object.key) == large)

            let missing = MediaObject(key: "media/gone.mp4", stagedFile: "", size: large.count, sha256: "", contentType: "video/mp4")
            let error = try await #require(throws: MediaStoreError.self) {
                try await store.copy(missing, fromStaged: "staging/gone.mp4", progress: { _ in })
            }
            #expect(error.errorCode == .stagedFileMissing, "\(error)")
            #expect(try await s3.get(bucket: bucket, key: missing.key) == nil)
            let uploads = try await s3.send("GET", "/\(bucket)", query: [("uploads", "")])
            #expect(uploads.status == 200 && !String(decoding: uploads.body, as: UTF8.self).contains("<Upload>"))
        }
    }

    @Test func aWrongSecretFailsPermanentlyNamingSignatureDoesNotMatch() async throws {
        let moto = try await MotoServer.shared()
        let s3 = S3TestClient(endpoint: moto.endpoint, credentials: moto.credentials)
        let bucket = try await s3.makeBucket()
        let staged = try StagedFile(size: 10_000)
        defer { staged.remove() }
        var wrong = moto.credentials
        wrong.secretAccessKey = "not-the-secret"

        try await withS3Store(endpoint: moto.endpoint, bucket: bucket, credentials: wrong) { store in
            let error = try await #require(throws: MediaStoreError.self) { try await store.put(staged.object()) }
            #expect(!error.isTransient)
            #expect(error.statusCode == 403)
            #expect(error.message.contains("SignatureDoesNotMatch"), "\(error.message)")
            #expect(await store.checkBucket()?.contains("403") == true)
        }
        #expect(try await s3.keys(bucket: bucket).isEmpty)
    }

    @Test func aMissingBucketFailsPermanentlyNamingNoSuchBucket() async throws {
        let moto = try await MotoServer.shared()
        let staged = try StagedFile(size: 10_000)
        defer { staged.remove() }

        try await withS3Store(endpoint: moto.endpoint, bucket: "herald-no-such-bucket", credentials: moto.credentials) { store in
            let error = try await #require(throws: MediaStoreError.self) { try await store.put(staged.object()) }
            #expect(!error.isTransient)
            #expect(error.statusCode == 404)
            #expect(error.message.contains("NoSuchBucket"), "\(error.message)")
            let problem = try #require(await store.checkBucket())
            #expect(problem.contains("NoSuchBucket") && problem.contains("herald-no-such-bucket"))
        }
    }

    @Test func aStagedFileOfTheWrongSizeIsNotSent() async throws {
        let moto = try await MotoServer.shared()
        let s3 = S3TestClient(endpoint: moto.endpoint, credentials: moto.credentials)
        let bucket = try await s3.makeBucket()
        let staged = try StagedFile(size: 10_000)
        defer { staged.remove() }
        var object = staged.object()
        object.size += 1

        try await withS3Store(endpoint: moto.endpoint, bucket: bucket, credentials: moto.credentials) { store in
            let error = try await #require(throws: MediaStoreError.self) { try await store.put(object) }
            #expect(error.errorCode == .sizeMismatch)
            var missing = staged.object()
            missing.stagedFile += ".gone"
            let gone = try await #require(throws: MediaStoreError.self) { try await store.put(missing) }
            #expect(gone.errorCode == .stagedFileMissing)
        }
        #expect(try await s3.keys(bucket: bucket).isEmpty)
    }
}

@Suite("S3 media store against a misbehaving server", .serialized, .timeLimit(.minutes(1)))
struct S3MediaStoreFaultTests {
    static let credentials = SigV4Signer.Credentials(accessKeyID: "AKIDTEST", secretAccessKey: "secret")

    @Test func slowDownIsTransientThenTheRetrySucceeds() async throws {
        let slowDown = "<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"
        try await FakeS3.with(react: { request in
            request.number == 1 ? .respond(status: 503, body: slowDown) : .respond(status: 200)
        }) { server in
            let staged = try StagedFile(size: 5000)
            defer { staged.remove() }

            try await withS3Store(endpoint: server.endpoint, bucket: "herald-media", credentials: Self.credentials) { store in
                let error = try await #require(throws: MediaStoreError.self) { try await store.put(staged.object()) }
                #expect(error.isTransient)
                #expect(error.statusCode == 503)
                #expect(error.message.contains("SlowDown (HTTP 503): Please reduce your request rate."), "\(error.message)")
                _ = try await store.put(staged.object())
            }
            let puts = server.requests.filter { $0.method == "PUT" }
            #expect(puts.count == 2)
            for put in puts {
                #expect(put.bodyLength == staged.size)
                #expect(put.header("x-amz-content-sha256") == staged.sha256, "the payload is signed, not UNSIGNED-PAYLOAD")
                #expect(put.header("content-length") == String(staged.size))
                #expect(put.header("authorization")?.hasPrefix("AWS4-HMAC-SHA256 Credential=AKIDTEST/") == true)
            }
        }
    }

    @Test func aForbiddenAnswerIsPermanentWithItsCode() async throws {
        let denied = "<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>"
        try await FakeS3.with(react: { _ in .respond(status: 403, body: denied) }) { server in
            let staged = try StagedFile(size: 100)
            defer { staged.remove() }

            try await withS3Store(endpoint: server.endpoint, bucket: "herald-media", credentials: Self.credentials) { store in
                let error = try await #require(throws: MediaStoreError.self) { try await store.put(staged.object()) }
                #expect(!error.isTransient)
                #expect(error.message.contains("AccessDenied (HTTP 403): Access Denied"), "\(error.message)")
            }
        }
    }

    @Test func aRefusedConnectionIsTransient() async throws {
        let server = try await FakeS3.start { _ in .respond(status: 200) }
        let endpoint = server.endpoint
        try await server.stop()
        let staged = try StagedFile(size: 100)
        defer { staged.remove() }

        let clock = ContinuousClock()
        let started = clock.now
        try await withS3Store(endpoint: endpoint, bucket: "herald-media", credentials: Self.credentials, connectTimeout: .seconds(1)) { store in
            let error = try await #require(throws: MediaStoreError.self) { try await store.put(staged.object()) }
            #expect(error.isTransient, "\(error)")
            print("refused connection failed after \(clock.now - started): \(error.message)")
        }
    }

    /// A copy in parts cancelled while the server sits on a part: its connection closes and the upload is aborted.
    @Test func cancellingACopyInPartsClosesItsConnectionAndAbortsTheUpload() async throws {
        let created = "<InitiateMultipartUploadResult><UploadId>up-1</UploadId></InitiateMultipartUploadResult>"
        try await FakeS3.with(react: { request in
            switch request.method {
            case "POST": .respond(status: 200, body: created)
            case "PUT": .hang  // the first UploadPartCopy
            default: .respond(status: 204)  // the abort: DELETE ?uploadId=up-1
            }
        }) { server in
            try await withS3Store(endpoint: server.endpoint, bucket: "herald-media", credentials: Self.credentials, largestCopy: 5 << 20) { store in
                let object = MediaObject(key: "media/huge.mp4", stagedFile: "", size: 12 << 20, sha256: "", contentType: "video/mp4")
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        await #expect(throws: CancellationError.self) {
                            try await store.copy(object, fromStaged: "staging/huge.mp4", progress: { _ in })
                        }
                    }
                    await server.waitForRequests(2)
                    let part = try #require(server.requests.last)
                    #expect(part.method == "PUT" && part.header("x-amz-copy-source-range") == "bytes=0-5242879", "\(part.uri)")
                    group.cancelAll()
                    _ = await server.waitForClose(connection: part.connection)
                    try await group.waitForAll()
                }
                let abort = try #require(server.requests.last)
                #expect(abort.method == "DELETE" && abort.uri.contains("uploadId=up-1"), "\(abort.method) \(abort.uri)")
            }
        }
    }

    /// The upload's task is cancelled while the server sits on the request: the connection must close at once.
    @Test(arguments: [FakeS3.Reaction.hang, .stall])
    func cancellingAnUploadClosesItsConnection(reaction: FakeS3.Reaction) async throws {
        try await FakeS3.with(react: { _ in reaction }) { server in
            // Large enough that a stalled server cannot have read it all (socket buffers hold a few MiB).
            let staged = try StagedFile(size: 16 << 20)
            defer { staged.remove() }

            try await withS3Store(endpoint: server.endpoint, bucket: "herald-media", credentials: Self.credentials) { store in
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        await #expect(throws: CancellationError.self) { try await store.put(staged.object()) }
                    }
                    await server.waitForRequests(1)
                    if case .hang = reaction {
                        await server.waitForBody(ofRequest: 1, count: staged.size)  // all sent; no answer comes
                    }
                    let request = try #require(server.requests.first)
                    let clock = ContinuousClock()
                    let cancelled = clock.now
                    group.cancelAll()
                    server.unstall()
                    let closed = await server.waitForClose(connection: request.connection)
                    let latency = closed - cancelled
                    try await group.waitForAll()
                    // Closed by the cancel, not by a timeout or the end of the body; how fast is measured by `make bench`.
                    #expect(latency < .seconds(10), "the server saw the connection close \(latency) after the cancel")
                    if case .stall = reaction {
                        let received = server.requests.first?.bodyLength ?? 0
                        #expect(received < staged.size, "the body was not sent to the end")
                    }
                    print("cancel to connection closed (\(reaction)): \(latency)")
                }
            }
        }
    }
}
