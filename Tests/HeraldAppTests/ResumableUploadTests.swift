import AsyncAlgorithms
import AsyncHTTPClient
import Crypto
import Foundation
import HeraldCore
import NIOCore
import NIOHTTP1
import Platform
import Testing

@testable import HeraldApp

/// A JPEG of `count` bytes: the signature, then bytes that do not repeat in short runs.
func jpeg(count: Int) -> [UInt8] {
    let head: [UInt8] = [0xFF, 0xD8, 0xFF, 0xE0, 0, 0x10, 0x4A, 0x46, 0x49, 0x46, 0, 1]
    return head + (0..<(count - head.count)).map { UInt8(truncatingIfNeeded: $0 &* 2_654_435_761 >> 13) }
}

/// One tus request: `Tus-Resumable: 1.0.0` and the key unless told otherwise.
func tus(
    _ method: HTTPMethod, _ url: String, key: String?, headers: [(String, String)] = [], body: [UInt8]? = nil, version: String? = "1.0.0"
) async throws -> RawAnswer {
    var all = headers
    if let version { all.append(("Tus-Resumable", version)) }
    let contentType = body == nil ? nil : "application/offset+octet-stream"
    return try await call(method, url, key: key, contentType: contentType, headers: all, body: body)
}

/// Creates an upload of `length` bytes of `type`; its URL.
func createUpload(_ base: String, key: String, length: Int, type: String = "image/jpeg") async throws -> String {
    let metadata = "filetype \(Data(type.utf8).base64EncodedString()),filename \(Data("clip.jpg".utf8).base64EncodedString())"
    let created = try await tus(.POST, "\(base)/v1/uploads", key: key, headers: [("Upload-Length", "\(length)"), ("Upload-Metadata", metadata)])
    try #require(created.status == .created, "\(created.status) \(created.body)")
    #expect(created.headers["Tus-Resumable"] == ["1.0.0"])
    #expect(created.headers["Upload-Expires"].first?.hasSuffix(" GMT") == true)
    return base + (try #require(created.headers["Location"].first))
}

/// A PATCH at `offset` with the key, its body to be set.
func patchRequest(_ url: String, key: String, offset: Int) -> HTTPClientRequest {
    var request = HTTPClientRequest(url: url)
    request.method = .PATCH
    request.headers.add(name: "Authorization", value: "Bearer \(key)")
    request.headers.add(name: "Tus-Resumable", value: "1.0.0")
    request.headers.add(name: "Upload-Offset", value: "\(offset)")
    request.headers.add(name: "Content-Type", value: "application/offset+octet-stream")
    return request
}

/// A PATCH whose body sends `head` of its declared `length`, then stalls until the task is cancelled.
func stalledPatch(_ url: String, key: String, offset: Int, head: [UInt8], length: Int) -> Task<Void, Never> {
    Task {
        var request = patchRequest(url, key: key, offset: offset)
        request.body = .stream(StalledBody(head: head), length: .known(Int64(length)))
        _ = try? await HTTPClient.shared.execute(request, timeout: .seconds(60))
    }
}

func uploadOffset(_ url: String, key: String) async throws -> Int? {
    let answer = try await tus(.HEAD, url, key: key)
    return answer.status == .ok ? answer.headers["Upload-Offset"].first.flatMap { Int($0) } : nil
}

/// Runs Tests/Support/tus_upload.py (tuspy); its JSON line.
func tuspy(_ arguments: [String]) async throws -> [String: Any] {
    let script = FileManager.default.currentDirectoryPath + "/Tests/Support/tus_upload.py"
    let run = try ClientProcess(["python3", script] + arguments, environment: ProcessInfo.processInfo.environment, executable: "/usr/bin/env")
    let status = await run.exitStatus()
    try #require(status == 0, "stdout: \(run.stdout)\nstderr: \(run.stderr)")
    return try #require(try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any])
}

@Suite("Resumable uploads (tus)", .serialized, .timeLimit(.minutes(2)))
struct ResumableUploadTests {
    /// tuspy, unchanged, sends a file in 256 KiB PATCHes with sha1 checksums; the upload becomes a staged media with the
    /// file's size and SHA-256, which a post publishes.
    @Test func tuspyUploadsInChunksAndTheUploadBecomesAPostsMedia() async throws {
        try await withHerald { base, _, application in
            let key = try #require(application.initialKey?.secret)
            let bytes = jpeg(count: 1_300_000)
            let file = FileManager.default.temporaryDirectory.appendingPathComponent("tus-\(UUID().uuidString).jpg").path
            try Data(bytes).write(to: URL(fileURLWithPath: file))
            defer { try? FileManager.default.removeItem(atPath: file) }
            let common = ["--url", "\(base)/v1/uploads", "--key", key, "--file", file, "--type", "image/jpeg", "--chunk-size", "\(256 << 10)"]

            // Two chunks, then a new tuspy process resumes from the offset the server reports.
            let first = try await tuspy(common + ["--stop-after", "2", "--checksum", "--description", "a cat"])
            let url = try #require(first["url"] as? String)
            #expect(first["offset"] as? Int == 2 << 18)
            #expect(try await uploadOffset(url, key: key) == 2 << 18)
            let id = String(try #require(url.split(separator: "/").last))
            #expect(try await call(.GET, "\(base)/v1/media/\(id)", key: key).status == .notFound, "not media before the last byte")
            let rest = try await tuspy(common + ["--resume-url", url, "--checksum"])
            #expect(rest["offset"] as? Int == bytes.count)
            #expect(rest["patches"] as? Int == 3, "only what was missing was sent")

            let media = try await send(.GET, "\(base)/v1/media/\(id)")
            #expect(media.status == .ok)
            #expect(media.json["size"] as? Int == bytes.count)
            #expect(media.json["sha256"] as? String == sha256(bytes))
            #expect(media.json["content_type"] as? String == "image/jpeg")
            #expect(media.json["description"] as? String == "a cat")
            #expect(stagedFiles(application) == ["\(id).jpg"])
            // HEAD of a finished upload: complete.
            #expect(try await uploadOffset(url, key: key) == bytes.count)

            let post = try await createPost(base, ["text": "resumed", "media_ids": [id]])
            #expect(post.status == .accepted, "\(post.json)")
        }
    }

    /// A connection dropped mid-PATCH: the bytes that arrived count (the next HEAD says so) and the rest resumes from there.
    @Test func aDroppedPatchKeepsWhatArrivedAndTheRestResumes() async throws {
        try await withHerald { base, _, application in
            let key = try #require(application.initialKey?.secret)
            let bytes = jpeg(count: 800_000)
            let url = try await createUpload(base, key: key, length: bytes.count)
            let id = String(try #require(url.split(separator: "/").last))
            let partial = application.configuration.dataDirectory + "/staging/\(id).upload"
            let sent = 300_000
            let patch = stalledPatch(url, key: key, offset: 0, head: Array(bytes.prefix(sent)), length: bytes.count)
            // Nothing outside the process tells when the bytes are written: look until a batch of them is in the file (the
            // rest waits in memory for the next batch, or the body's end).
            for _ in 0..<500 where fileSize(partial) < StagingArea.batchSize { try await Task.sleep(for: .milliseconds(20)) }
            #expect(fileSize(partial) >= StagingArea.batchSize && fileSize(partial) < sent)
            #expect(try await uploadOffset(url, key: key) == 0, "not counted while the PATCH goes on")
            let busy = try await tus(.PATCH, url, key: key, headers: [("Upload-Offset", "0")], body: [1])
            #expect(busy.status.code == 423, "one PATCH at a time: \(busy.status) \(busy.body)")
            patch.cancel()
            _ = await patch.result

            var offset: Int?
            for _ in 0..<500 where offset != sent {
                offset = try await uploadOffset(url, key: key)
                if offset != sent { try await Task.sleep(for: .milliseconds(20)) }
            }
            #expect(offset == sent, "the bytes before the drop count")
            let stale = try await tus(.PATCH, url, key: key, headers: [("Upload-Offset", "0")], body: Array(bytes.prefix(10)))
            #expect(stale.status == .conflict, "\(stale.body)")
            let rest = try await tus(.PATCH, url, key: key, headers: [("Upload-Offset", "\(sent)")], body: Array(bytes[sent...]))
            #expect(rest.status == .noContent, "\(rest.body)")
            #expect(rest.headers["Upload-Offset"] == ["\(bytes.count)"])
            let media = try await send(.GET, "\(base)/v1/media/\(id)")
            #expect(media.json["sha256"] as? String == sha256(bytes))
        }
    }

    /// Every error the contract names, each a problem document with `Tus-Resumable`, and none losing bytes.
    @Test func everyErrorOfTheContract() async throws {
        try await withHerald(configure: { $0.maxMediaBytes = 1 << 20 }) { base, _, application in
            let key = try #require(application.initialKey?.secret)
            let uploads = "\(base)/v1/uploads"
            let options = try await tus(.OPTIONS, uploads, key: nil, version: nil)
            #expect(options.status == .noContent)
            #expect(options.headers["Tus-Version"] == ["1.0.0"])
            #expect(options.headers["Tus-Max-Size"] == ["\(1 << 20)"])
            #expect(options.headers["Tus-Extension"] == ["creation,creation-with-upload,termination,checksum,expiration"])
            #expect(options.headers["Tus-Checksum-Algorithm"] == ["sha1,sha256"])

            let jpegType = "filetype \(Data("image/jpeg".utf8).base64EncodedString())"
            func create(_ headers: [(String, String)], key: String? = key, version: String? = "1.0.0") async throws -> RawAnswer {
                try await tus(.POST, uploads, key: key, headers: headers, version: version)
            }
            func expectProblem(_ answer: RawAnswer, _ code: UInt, _ what: String) {
                #expect(answer.status.code == code, "\(what): \(answer.status) \(answer.body)")
                #expect(answer.headers["Content-Type"] == ["application/problem+json"], "\(what)")
                #expect(answer.headers["Tus-Resumable"] == ["1.0.0"], "\(what)")
            }
            expectProblem(try await create([("Upload-Length", "\(1 << 21)"), ("Upload-Metadata", jpegType)]), 413, "over --max-media-bytes")
            expectProblem(
                try await create([("Upload-Length", "10"), ("Upload-Metadata", "filetype \(Data("text/plain".utf8).base64EncodedString())")]), 415,
                "an unknown type")
            expectProblem(try await create([("Upload-Length", "10")]), 415, "no type")
            expectProblem(try await create([("Upload-Length", "10"), ("Upload-Metadata", "filetype %%%")]), 400, "bad metadata")
            expectProblem(try await create([("Upload-Length", "-1"), ("Upload-Metadata", jpegType)]), 400, "a negative length")
            expectProblem(try await create([("Upload-Length", "0"), ("Upload-Metadata", jpegType)]), 400, "an empty upload")
            expectProblem(try await create([("Upload-Length", "10"), ("Upload-Metadata", jpegType)], version: "0.2.2"), 412, "another version")
            // What the router answers itself is tus's answer too: the gate's refusals, an unknown path, a method not there.
            expectProblem(try await create([("Upload-Length", "10"), ("Upload-Metadata", jpegType)], key: nil), 401, "no key")
            let reader = try await makeKey(base, admin: key, name: "reader", scope: "read")
            expectProblem(try await create([("Upload-Length", "10"), ("Upload-Metadata", jpegType)], key: reader.secret), 403, "a read key")
            expectProblem(try await tus(.GET, "\(uploads)/x", key: key), 405, "GET of an upload")
            expectProblem(try await tus(.HEAD, "\(uploads)/x/y", key: key), 404, "a path under /v1/uploads that is none")
            // Not elsewhere: another resource's refusal is not tus's.
            let media = try await call(.GET, "\(base)/v1/media/x", key: nil)
            #expect(media.status == .unauthorized && media.headers["Tus-Resumable"].isEmpty)
            let lookalike = try await call(.GET, "\(base)/v1/uploadsx", key: key)
            #expect(lookalike.status == .notFound && lookalike.headers["Tus-Resumable"].isEmpty)

            let bytes = jpeg(count: 4000)
            let url = try await createUpload(base, key: key, length: bytes.count)
            let id = String(try #require(url.split(separator: "/").last))
            // HEAD answers the metadata as it was sent (tus's creation extension), keys Herald does not use included.
            let sent = "filetype \(Data("image/jpeg".utf8).base64EncodedString()),filename \(Data("clip.jpg".utf8).base64EncodedString())"
            #expect(try await tus(.HEAD, url, key: key).headers["Upload-Metadata"] == [sent])
            let first = Array(bytes.prefix(1000))
            let wrongSum = "sha1 \(Data(Insecure.SHA1.hash(data: [1, 2, 3])).base64EncodedString())"
            let mismatch = try await tus(.PATCH, url, key: key, headers: [("Upload-Offset", "0"), ("Upload-Checksum", wrongSum)], body: first)
            expectProblem(mismatch, 460, "a checksum mismatch")
            #expect(try await uploadOffset(url, key: key) == 0, "a mismatched body appends nothing")
            let rightSum = "sha256 \(Data(SHA256.hash(data: first)).base64EncodedString())"
            let matched = try await tus(.PATCH, url, key: key, headers: [("Upload-Offset", "0"), ("Upload-Checksum", rightSum)], body: first)
            #expect(matched.status == .noContent)
            #expect(matched.headers["Upload-Offset"] == ["1000"])
            expectProblem(
                try await tus(.PATCH, url, key: key, headers: [("Upload-Offset", "0"), ("Upload-Checksum", "md5 AAAA")], body: first), 400,
                "an unsupported algorithm")
            expectProblem(try await tus(.PATCH, url, key: key, headers: [("Upload-Offset", "999")], body: [0]), 409, "a wrong offset")
            expectProblem(
                try await tus(.PATCH, url, key: key, headers: [("Upload-Offset", "1000")], body: [UInt8](repeating: 0, count: 3001)), 413,
                "past Upload-Length")
            let wrongType = try await call(
                .PATCH, url, key: key, contentType: "application/octet-stream", headers: [("Tus-Resumable", "1.0.0"), ("Upload-Offset", "1000")],
                body: [0])
            expectProblem(wrongType, 415, "a body not sent as application/offset+octet-stream")
            #expect(try await uploadOffset(url, key: key) == 1000, "no refusal lost or added a byte")

            // Another tenant sees nothing of it.
            let other = try await makeKey(base, admin: key, name: "other", tenant: "other")
            expectProblem(try await tus(.HEAD, url, key: other.secret), 404, "another tenant's HEAD")
            expectProblem(try await tus(.PATCH, url, key: other.secret, headers: [("Upload-Offset", "1000")], body: [0]), 404, "its PATCH")
            expectProblem(try await tus(.DELETE, url, key: other.secret), 404, "its DELETE")

            // Termination: 204, the bytes gone, then 404.
            #expect(try await tus(.DELETE, url, key: key).status == .noContent)
            #expect(!stagedFiles(application).contains("\(id).upload"))
            expectProblem(try await tus(.HEAD, url, key: key), 404, "HEAD after termination")
            expectProblem(try await tus(.PATCH, url, key: key, headers: [("Upload-Offset", "1000")], body: [0]), 404, "PATCH after termination")

            // Bytes that are not the declared type: 415 to the last PATCH, and the upload is gone.
            let png = try await createUpload(base, key: key, length: 2000, type: "image/png")
            let notPNG = try await tus(.PATCH, png, key: key, headers: [("Upload-Offset", "0")], body: jpeg(count: 2000))
            expectProblem(notPNG, 415, "bytes that are not the type")
            expectProblem(try await tus(.HEAD, png, key: key), 404, "the refused upload")
            #expect(stagedFiles(application).isEmpty, "\(stagedFiles(application))")
        }
    }

    /// creation-with-upload: the first bytes ride on the POST; an upload that outlives its expiry is gone, bytes too.
    @Test func creationWithUploadAndExpiry() async throws {
        try await withHerald(configure: { $0.stagedMediaTTL = 60 }) { base, _, application in
            let key = try #require(application.initialKey?.secret)
            let sweeper = try #require(application.services.compactMap { $0 as? Sweeper }.first)
            let bytes = jpeg(count: 3000)
            let created = try await call(
                .POST, "\(base)/v1/uploads", key: key, contentType: "application/offset+octet-stream",
                headers: [
                    ("Tus-Resumable", "1.0.0"), ("Upload-Length", "\(bytes.count)"),
                    ("Upload-Metadata", "filetype \(Data("image/jpeg".utf8).base64EncodedString())"),
                ], body: Array(bytes.prefix(1000)))
            #expect(created.status == .created, "\(created.body)")
            #expect(created.headers["Upload-Offset"] == ["1000"])
            let url = base + (try #require(created.headers["Location"].first))
            let id = String(try #require(url.split(separator: "/").last))
            #expect(try await uploadOffset(url, key: key) == 1000)
            #expect(stagedFiles(application) == ["\(id).upload"])
            let sent = "filetype \(Data("image/jpeg".utf8).base64EncodedString())"
            #expect(try await tus(.HEAD, url, key: key).headers["Upload-Metadata"] == [sent])

            #expect(await sweeper.sweep(now: .now()).uploads == 0)
            #expect(await sweeper.sweep(now: Timestamp.now().adding(milliseconds: 61_000)).uploads == 1)
            #expect(try await uploadOffset(url, key: key) == nil)
            #expect(stagedFiles(application).isEmpty)

            // Complete, it is media: HEAD answers what the media kept of the metadata (its type and alt text).
            let metadata = "filename \(Data("a.jpg".utf8).base64EncodedString()),\(sent),description \(Data("a cat".utf8).base64EncodedString())"
            let described = try await call(
                .POST, "\(base)/v1/uploads", key: key, contentType: "application/offset+octet-stream",
                headers: [("Tus-Resumable", "1.0.0"), ("Upload-Length", "\(bytes.count)"), ("Upload-Metadata", metadata)], body: bytes)
            #expect(described.status == .created && described.headers["Upload-Offset"] == ["\(bytes.count)"], "\(described.body)")
            let complete = try await tus(.HEAD, base + (try #require(described.headers["Location"].first)), key: key)
            #expect(complete.headers["Upload-Metadata"] == ["\(sent),description \(Data("a cat".utf8).base64EncodedString())"])
            #expect(complete.headers["Upload-Offset"] == ["\(bytes.count)"])
        }
    }

    /// The hash state of an upload kept between PATCHes is dropped once the upload is past its `Upload-Expires`, by
    /// whichever upload's PATCH comes next (the sweep that expired it may be another replica's).
    @Test func anExpiredUploadsHashStateIsDropped() {
        let sessions = UploadSessions()
        func at(_ milliseconds: Int64) -> Timestamp { Timestamp(millisecondsSinceEpoch: milliseconds) }
        func upload(expiringAt milliseconds: Int64) -> Upload {
            Upload(
                id: MediaID.generate(), contentType: .jpeg, description: nil, length: 100, bytesPath: "staging/x.upload", createdAt: at(0),
                expiresAt: at(milliseconds))
        }
        let early = upload(expiringAt: 60_000)
        let late = upload(expiringAt: 120_000)
        sessions.keep(SHA256(), of: early, at: 10, now: at(1_000))
        sessions.keep(SHA256(), of: late, at: 20, now: at(2_000))
        #expect(sessions.count == 2)
        #expect(sessions.hashState(of: early.id, at: 10) != nil && sessions.hashState(of: early.id, at: 9) == nil)
        sessions.keep(SHA256(), of: late, at: 30, now: at(60_000))
        #expect(sessions.count == 1 && sessions.hashState(of: early.id, at: 10) == nil)
        #expect(sessions.hashState(of: late.id, at: 30) != nil)
    }

    /// SIGKILL of the server after part of an upload, then a restart: HEAD reports what was counted, and the rest
    /// completes with the whole file's SHA-256 (re-read once after the restart: the hash state was in memory).
    /// A disk that fills in the middle of a PATCH (a 2 MiB tmpfs as the data directory, which root may mount, as in CI):
    /// 507, the writes before the failed one counted, and the rest taken once there is room again. A body whose declared
    /// length does not fit is refused before a byte of it is written.
    @Test(.enabled(if: getuid() == 0, "mounts a tmpfs")) func aDiskThatFillsInAPatchIs507AndKeepsWhatWasWritten() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("herald-full-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try #require(try runCommand(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", directory]) == 0)
        defer { _ = try? runCommand(["umount", "-l", directory]) }
        try await withHerald(configure: {
            $0.dataDirectory = directory
            $0.minFreeDisk = 0
        }) { base, _, application in
            let key = try #require(application.initialKey?.secret)
            let bytes = jpeg(count: 1_200_000)
            let url = try await createUpload(base, key: key, length: bytes.count)
            let id = String(try #require(url.split(separator: "/").last))
            // Room for two of a PATCH's writes (StagingArea.batchSize each), not three.
            var stats = statvfs()
            try #require(statvfs(directory, &stats) == 0)
            let room = 2 * StagingArea.batchSize + StagingArea.batchSize / 2
            let filler = directory + "/filler"
            try Data(count: Int(stats.f_bavail) * Int(stats.f_frsize) - room).write(to: URL(fileURLWithPath: filler))

            let declared = try await tus(.PATCH, url, key: key, headers: [("Upload-Offset", "0")], body: bytes)
            #expect(declared.status.code == 507, "\(declared.status) \(declared.body)")
            #expect(declared.headers["Tus-Resumable"] == ["1.0.0"])
            #expect(try await uploadOffset(url, key: key) == 0)
            #expect(fileSize(directory + "/staging/\(id).upload") == 0, "nothing of a refused body is written")

            // Not declared (chunked): the disk fills part way.
            var request = patchRequest(url, key: key, offset: 0)
            let chunks = stride(from: 0, to: bytes.count, by: 64 << 10).map { ByteBuffer(bytes: bytes[$0..<min($0 + (64 << 10), bytes.count)]) }
            request.body = .stream(chunks.async, length: .unknown)
            let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
            let answer = String(buffer: try await response.body.collect(upTo: 1 << 20))
            #expect(response.status.code == 507, "\(answer)")
            let offset = try #require(try await uploadOffset(url, key: key))
            #expect(offset == 2 * StagingArea.batchSize, "the two writes that fitted count")

            try FileManager.default.removeItem(atPath: filler)
            let rest = try await tus(.PATCH, url, key: key, headers: [("Upload-Offset", "\(offset)")], body: Array(bytes[offset...]))
            #expect(rest.status == .noContent, "\(rest.body)")
            let media = try await send(.GET, "\(base)/v1/media/\(id)")
            #expect(media.json["sha256"] as? String == sha256(bytes))
        }
    }

    @Test func anUploadResumesAfterTheServerIsKilled() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("herald-tus-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let arguments = ["--data-dir", directory, "--min-free-disk", "0"]
        let first = try await ServingProcess.start(arguments)
        let key = try #require(first.key)
        let bytes = jpeg(count: 800_000)
        let url = try await createUpload(first.base, key: key, length: bytes.count)
        let path = try #require(URL(string: url)?.path)
        let half = try await tus(.PATCH, url, key: key, headers: [("Upload-Offset", "0")], body: Array(bytes.prefix(250_000)))
        #expect(half.status == .noContent)
        // A PATCH under way when the process dies: its bytes reach the file but were never counted, and it holds the
        // upload.
        let partial = directory + "/staging/\(url.split(separator: "/").last!).upload"
        // Not the upload's bytes: had they counted, the SHA-256 would be wrong.
        let stalled = stalledPatch(url, key: key, offset: 250_000, head: [UInt8](repeating: 0xEE, count: 300_000), length: 550_000)
        defer { stalled.cancel() }
        let written = 250_000 + StagingArea.batchSize
        for _ in 0..<500 where fileSize(partial) < written { try await Task.sleep(for: .milliseconds(20)) }
        #expect(fileSize(partial) >= written && fileSize(partial) < 550_000, "a batch of the stalled PATCH's bytes reached the file")
        kill(first.process.processIdentifier, SIGKILL)
        first.process.waitUntilExit()

        let second = try await ServingProcess.start(arguments)
        defer {
            second.process.terminate()
            second.process.waitUntilExit()
        }
        let resumed = second.base + path
        #expect(try await uploadOffset(resumed, key: key) == 250_000, "bytes never counted are not reported")
        // Not 423: the dead process's hold ended at the restart. The uncounted bytes are cut off before the append.
        let rest = try await tus(.PATCH, resumed, key: key, headers: [("Upload-Offset", "250000")], body: Array(bytes[250_000...]))
        #expect(rest.status == .noContent, "\(rest.body)")
        let id = String(try #require(url.split(separator: "/").last))
        let media = try await call(.GET, "\(second.base)/v1/media/\(id)", key: key)
        let json = try #require(try JSONSerialization.jsonObject(with: Data(media.body.utf8)) as? [String: Any])
        #expect(json["sha256"] as? String == sha256(bytes))
    }

    /// `herald publish` sends a large file through `/v1/uploads`; the server is killed mid-upload and started again on
    /// its port: the client waits, asks how far the bytes reach and sends the rest of the same upload, and the post
    /// is published with it.
    @Test func heraldPublishResumesTheSameUploadAfterTheServerRestarts() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("herald-tus-cli-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let arguments = ["--data-dir", directory, "--min-free-disk", "0", "--port", "\(try freePort())"]
        let first = try await ServingProcess.start(arguments)
        let key = try #require(first.key)
        let bytes = jpeg(count: 16 << 20)
        let file = directory + "-big.jpg"
        try Data(bytes).write(to: URL(fileURLWithPath: file))
        defer { try? FileManager.default.removeItem(atPath: file) }
        let client = try ClientProcess(
            ["publish", file, "--text", "resumed by the CLI", "--resumable-above", "\(1 << 20)", "--chunk-size", "\(256 << 10)"],
            environment: ["HERALD_URL": first.base, "HERALD_KEY": key])

        // Killed once some PATCHes have counted (the upload's file has grown), long before all 64.
        let staging = directory + "/staging"
        var upload: String?
        for _ in 0..<1000 where upload == nil {
            upload = files(in: staging).first { $0.hasSuffix(".upload") && fileSize(staging + "/" + $0) >= 1 << 20 }
            if upload == nil { try await Task.sleep(for: .milliseconds(10)) }
        }
        let name = try #require(upload, "the upload reached the server: \(client.stderr)")
        kill(first.process.processIdentifier, SIGKILL)
        first.process.waitUntilExit()
        #expect(fileSize(staging + "/" + name) < bytes.count, "killed mid-upload")

        let second = try await ServingProcess.start(arguments)
        defer {
            second.process.terminate()
            second.process.waitUntilExit()
        }
        let status = await client.exitStatus()
        #expect(status == 0, "stdout: \(client.stdout)\nstderr: \(client.stderr)")
        // The same upload, finished: its id is the post's medium, with the file's SHA-256.
        let id = String(name.dropLast(".upload".count))
        let media = try await call(.GET, "\(second.base)/v1/media/\(id)", key: key)
        let json = try #require(try JSONSerialization.jsonObject(with: Data(media.body.utf8)) as? [String: Any], "\(media.body)")
        #expect(json["sha256"] as? String == sha256(bytes))
        #expect(json["post_id"] is String, "the post holds it")
    }
}

/// A TCP port on 127.0.0.1 that was free a moment ago (bound to 0, then closed).
func freePort() throws -> Int {
    let server = try SilentServer()
    return server.port
}
