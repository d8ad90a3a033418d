import Foundation
import HeraldCore
import Testing

/// The schemas of `openapi.yaml`, read by its own layout (two spaces a level): enough to list a schema's properties.
enum OpenAPI {
    static let lines: [Substring] = {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let text = (try? String(contentsOf: root.appendingPathComponent("openapi.yaml"), encoding: .utf8)) ?? ""
        return text.split(separator: "\n", omittingEmptySubsequences: false)
    }()

    /// The `properties` of `components.schemas.<schema>`, in their documented order; empty if there is no such schema.
    static func properties(of schema: String) -> [String] {
        guard let schemas = lines.firstIndex(of: "  schemas:"),
            let start = lines[schemas...].firstIndex(of: "    \(schema):")
        else { return [] }
        var names: [String] = []
        var inProperties = false
        for line in lines[(start + 1)...] {
            let indent = line.prefix { $0 == " " }.count
            if line.isEmpty { continue }
            if indent <= 4 { break }
            if indent == 6 { inProperties = line == "      properties:" }
            if inProperties, indent == 8, line.hasSuffix(":") { names.append(String(line.dropFirst(8).dropLast())) }
        }
        return names
    }
}

/// The keys of each object, as `openapi.yaml` documents them.
enum APIKeys {
    static let media = Set(OpenAPI.properties(of: "Media"))
    static let post = Set(OpenAPI.properties(of: "Post"))
    static let job = Set(OpenAPI.properties(of: "Job"))
    static let progress = Set(OpenAPI.properties(of: "Progress"))
    static let upload = Set(OpenAPI.properties(of: "Upload"))
    static let page: Set = ["data", "next_cursor"]
    static let queue = Set(OpenAPI.properties(of: "Queue"))
}

/// Writes `value` as the server does and reads it back as a JSON object, the way a client sees it.
func jsonObject(_ value: some JSONWritable) throws -> [String: Any] {
    try #require(try JSONSerialization.jsonObject(with: Data(value.json)) as? [String: Any])
}

/// Encodes `value` (a request body) and reads it back as a JSON object.
func jsonObject(_ value: some Encodable) throws -> [String: Any] {
    try #require(try JSONSerialization.jsonObject(with: JSONEncoder().encode(value)) as? [String: Any])
}

/// Writes `value` as the server does and decodes it as the client does.
func roundTrip<Value: JSONWritable & Decodable>(_ value: Value) throws -> Value {
    try JSONDecoder().decode(Value.self, from: Data(value.json))
}

enum Fixtures {
    static let created = Timestamp(rfc3339: "2026-11-22T10:15:30.123Z")!
    static let later = Timestamp(rfc3339: "2026-11-22T10:16:00.000Z")!
    static let mediaID = MediaID("01a202c0-f64b-7d41-9e6f-0a1b2c3d4e5f")
    static let postID = PostID("01a202c0-f64b-7d41-9e6f-0a1b2c3d4e60")
    static let jobID = JobID("01a202c0-f64b-7d41-9e6f-0a1b2c3d4e61")

    static let stagedMedia = Media(
        id: mediaID, contentType: .png, size: 1234, sha256: String(repeating: "ab", count: 32), createdAt: created)
    static let publishedMedia = Media(
        id: mediaID, contentType: .quickTime, size: 99, sha256: String(repeating: "0f", count: 32), description: "A cat",
        state: .uploaded, url: "https://cdn.example/objects/x.mov", postID: postID, createdAt: created)
}

@Suite("API objects")
struct APIObjectTests {
    /// Each object's member list against its schema.
    static let documented: [(schema: String, members: [String])] = [
        ("Media", Media.Member.allCases.map(\.rawValue)),
        ("Post", Post.Member.allCases.map(\.rawValue)),
        ("Job", Job.Member.allCases.map(\.rawValue)),
        ("Progress", Job.Progress.Member.allCases.map(\.rawValue)),
        ("Upload", Job.Upload.Member.allCases.map(\.rawValue)),
        ("JobError", Job.Failure.Member.allCases.map(\.rawValue)),
        ("PostAndJob", PostAndJob.Member.allCases.map(\.rawValue)),
        ("Queue", QueueStatus.Member.allCases.map(\.rawValue)),
        // The secret is in CreatedKey's schema (ApiKey's members, then `key`).
        ("ApiKey", APIKey.Member.allCases.filter { $0 != .key }.map(\.rawValue)),
        ("Webhook", Webhook.Member.allCases.map(\.rawValue)),
        ("WebhookDelivery", WebhookDelivery.Member.allCases.map(\.rawValue)),
        ("WebhookEvent", WebhookEvent.Member.allCases.map(\.rawValue)),
    ]

    @Test("every object's members are its documented properties, in the documented order", arguments: documented)
    func membersAreDocumented(schema: String, members: [String]) {
        #expect(OpenAPI.properties(of: schema) == members, "openapi.yaml's \(schema)")
    }

    @Test("a staged medium has every key, with nulls")
    func mediaNulls() throws {
        let json = try jsonObject(Fixtures.stagedMedia)
        #expect(Set(json.keys) == APIKeys.media)
        #expect(json["description"] is NSNull)
        #expect(json["url"] is NSNull)
        #expect(json["post_id"] is NSNull)
        #expect(json["content_type"] as? String == "image/png")
        #expect(json["size"] as? Int == 1234)
        #expect(json["state"] as? String == "staged")
        #expect(json["created_at"] as? String == "2026-11-22T10:15:30.123Z")
    }

    @Test("media round-trip exactly", arguments: [Fixtures.stagedMedia, Fixtures.publishedMedia])
    func mediaRoundTrip(media: Media) throws {
        #expect(try roundTrip(media) == media)
        #expect(Set(try jsonObject(media).keys) == APIKeys.media)
    }

    @Test("a post has every key, with nulls, and its media as media objects")
    func post() throws {
        let post = Post(
            id: Fixtures.postID, text: "Hello", state: .queued, media: [Fixtures.stagedMedia, Fixtures.publishedMedia],
            jobID: Fixtures.jobID, createdAt: Fixtures.created)
        let json = try jsonObject(post)
        #expect(Set(json.keys) == APIKeys.post)
        #expect(json["scheduled_at"] is NSNull)
        #expect(json["published_at"] is NSNull)
        #expect(json["priority"] as? String == "normal")
        #expect(json["job_id"] as? String == Fixtures.jobID.rawValue)
        let media = try #require(json["media"] as? [[String: Any]])
        #expect(media.count == 2)
        #expect(media.allSatisfy { Set($0.keys) == APIKeys.media })
        #expect(media.map { $0["content_type"] as? String } == ["image/png", "video/quicktime"])
        #expect(try roundTrip(post) == post)

        let published = Post(
            id: Fixtures.postID, text: "", state: .published, media: [], jobID: Fixtures.jobID, priority: .high,
            scheduledAt: Fixtures.later, createdAt: Fixtures.created, publishedAt: Fixtures.later)
        let publishedJSON = try jsonObject(published)
        #expect(Set(publishedJSON.keys) == APIKeys.post)
        #expect(publishedJSON["published_at"] as? String == "2026-11-22T10:16:00.000Z")
        #expect(try roundTrip(published) == published)
    }

    @Test("a new job has every key, with nulls, done and progress")
    func newJob() throws {
        let job = Job(
            id: Fixtures.jobID, postID: Fixtures.postID, state: .queued, runAt: Fixtures.created,
            uploads: [Job.Upload(mediaID: Fixtures.mediaID)], createdAt: Fixtures.created)
        let json = try jsonObject(job)
        #expect(Set(json.keys) == APIKeys.job)
        #expect(json["done"] as? Bool == false)
        #expect(json["cancel_requested"] as? Bool == false)
        #expect(json["attempt"] as? Int == 0)
        #expect(json["error"] is NSNull)
        #expect(json["started_at"] is NSNull)
        #expect(json["finished_at"] is NSNull)
        #expect(json["run_at"] as? String == "2026-11-22T10:15:30.123Z")
        let progress = try #require(json["progress"] as? [String: Any])
        #expect(Set(progress.keys) == APIKeys.progress)
        #expect(progress["total"] as? Int == 1)
        #expect(progress["percent"] as? Int == 0)
        let uploads = try #require(json["uploads"] as? [[String: Any]])
        #expect(uploads.count == 1)
        #expect(Set(uploads[0].keys) == APIKeys.upload)
        #expect(uploads[0]["error"] is NSNull)
        #expect(uploads[0]["state"] as? String == "pending")
        #expect(try roundTrip(job) == job)
    }

    @Test("a failed job's error names the medium; media_id is left out when the error is about no medium")
    func failedJob() throws {
        let failure = Job.Failure(code: .uploadFailed, message: "HTTP 403", mediaID: Fixtures.mediaID)
        let job = Job(
            id: Fixtures.jobID, postID: Fixtures.postID, state: .failed, priority: .low, attempt: 2, runAt: Fixtures.created,
            cancelRequested: true,
            uploads: [Job.Upload(mediaID: Fixtures.mediaID, state: .failed, attempts: 3, error: "HTTP 403")],
            error: failure, createdAt: Fixtures.created, startedAt: Fixtures.created, finishedAt: Fixtures.later)
        let json = try jsonObject(job)
        #expect(Set(json.keys) == APIKeys.job)
        #expect(json["done"] as? Bool == true)
        #expect(json["priority"] as? String == "low")
        let error = try #require(json["error"] as? [String: Any])
        #expect(Set(error.keys) == ["code", "message", "media_id"])
        #expect(error["code"] as? String == "upload_failed")
        #expect(error["media_id"] as? String == Fixtures.mediaID.rawValue)
        #expect(try roundTrip(job) == job)

        let cancelled = Job.Failure(code: .cancelled, message: "Cancelled by request.")
        #expect(Set(try jsonObject(cancelled).keys) == ["code", "message"])
        #expect(try roundTrip(cancelled) == cancelled)
    }

    @Test("done follows the state", arguments: JobState.allCases)
    func done(state: JobState) throws {
        let job = Job(id: Fixtures.jobID, postID: Fixtures.postID, state: state, runAt: Fixtures.created, createdAt: Fixtures.created)
        #expect(job.done == state.isDone)
        #expect(try jsonObject(job)["done"] as? Bool == state.isDone)
    }

    @Test(
        "progress counts uploads; percent rounds down; a job without media is 100% only once succeeded",
        arguments: [
            ([], JobState.succeeded, Job.Progress(total: 0, uploaded: 0, failed: 0, percent: 100)),
            ([], .queued, Job.Progress(total: 0, uploaded: 0, failed: 0, percent: 0)),
            ([], .running, Job.Progress(total: 0, uploaded: 0, failed: 0, percent: 0)),
            ([], .failed, Job.Progress(total: 0, uploaded: 0, failed: 0, percent: 0)),
            ([], .cancelled, Job.Progress(total: 0, uploaded: 0, failed: 0, percent: 0)),
            ([.pending, .pending], .queued, Job.Progress(total: 2, uploaded: 0, failed: 0, percent: 0)),
            ([.uploaded, .uploading, .pending], .running, Job.Progress(total: 3, uploaded: 1, failed: 0, percent: 33)),
            ([.uploaded, .uploaded, .pending], .running, Job.Progress(total: 3, uploaded: 2, failed: 0, percent: 66)),
            ([.uploaded, .failed, .cancelled], .failed, Job.Progress(total: 3, uploaded: 1, failed: 1, percent: 33)),
            ([.uploaded, .uploaded, .uploaded], .succeeded, Job.Progress(total: 3, uploaded: 3, failed: 0, percent: 100)),
            ([.cancelled, .cancelled], .cancelled, Job.Progress(total: 2, uploaded: 0, failed: 0, percent: 0)),
        ] as [([UploadState], JobState, Job.Progress)]
    )
    func progress(states: [UploadState], jobState: JobState, expected: Job.Progress) throws {
        let uploads = states.enumerated().map { Job.Upload(mediaID: MediaID("m\($0.offset)"), state: $0.element) }
        let job = Job(
            id: Fixtures.jobID, postID: Fixtures.postID, state: jobState, runAt: Fixtures.created, uploads: uploads,
            createdAt: Fixtures.created)
        #expect(job.progress == expected)
        let json = try #require(try jsonObject(job)["progress"] as? [String: Int])
        #expect(
            json == [
                "total": expected.total, "uploaded": expected.uploaded, "failed": expected.failed, "percent": expected.percent,
                "bytes_total": 0, "bytes_uploaded": 0,
            ])
    }

    @Test(
        "with sizes, percent counts bytes, rounded down, and reaches 100 only once every medium is uploaded",
        arguments: [
            // (state, size, bytes_sent) per upload → (bytes_total, bytes_uploaded, percent)
            ([(UploadState.pending, 1000, 0), (.pending, 3000, 0)], JobState.queued, (4000, 0, 0)),
            ([(.uploading, 1000, 500), (.pending, 3000, 0)], .running, (4000, 500, 12)),
            ([(.uploaded, 1000, 1000), (.uploading, 3000, 1500)], .running, (4000, 2500, 62)),
            // Every byte taken, the store's answer not yet in: 99, never 100.
            ([(.uploaded, 1000, 1000), (.uploading, 3000, 3000)], .running, (4000, 4000, 99)),
            // An uploaded medium counts its size whatever bytes_sent says; bytes_sent never counts beyond the size.
            ([(.uploaded, 1000, 0), (.uploading, 3000, 9000)], .running, (4000, 4000, 99)),
            ([(.uploaded, 1000, 1000), (.uploaded, 3000, 3000)], .succeeded, (4000, 4000, 100)),
            ([(.uploaded, 1000, 1000), (.failed, 3000, 200)], .failed, (4000, 1200, 30)),
        ] as [([(UploadState, Int, Int)], JobState, (Int, Int, Int))]
    )
    func byteProgress(uploads: [(UploadState, Int, Int)], jobState: JobState, expected: (total: Int, uploaded: Int, percent: Int)) throws {
        let job = Job(
            id: Fixtures.jobID, postID: Fixtures.postID, state: jobState, runAt: Fixtures.created,
            uploads: uploads.enumerated().map { index, upload in
                Job.Upload(mediaID: MediaID("m\(index)"), state: upload.0, size: upload.1, bytesSent: upload.2)
            },
            createdAt: Fixtures.created)
        let progress = try #require(try jsonObject(job)["progress"] as? [String: Int])
        #expect(progress["bytes_total"] == expected.total)
        #expect(progress["bytes_uploaded"] == expected.uploaded)
        #expect(progress["percent"] == expected.percent)
        let written = try #require(try JSONSerialization.jsonObject(with: Data(job.json)) as? [String: Any])
        #expect(written["progress"] as? [String: Int] == progress)
        let sent = try #require(written["uploads"] as? [[String: Any]]).map { ($0["size"] as? Int, $0["bytes_sent"] as? Int) }
        #expect(sent.map(\.0) == uploads.map(\.1) && sent.map(\.1) == uploads.map(\.2))
    }

    @Test("decoding a job ignores the derived done and progress")
    func derivedFieldsIgnored() throws {
        let job = Job(id: Fixtures.jobID, postID: Fixtures.postID, state: .succeeded, runAt: Fixtures.created, createdAt: Fixtures.created)
        var json = try jsonObject(job)
        json["done"] = false
        json["progress"] = ["total": 9, "uploaded": 9, "failed": 9, "percent": 9]
        let decoded = try JSONDecoder().decode(Job.self, from: JSONSerialization.data(withJSONObject: json))
        #expect(decoded == job)
        #expect(decoded.done)
        #expect(decoded.progress.percent == 100)
    }

    @Test("the create answer is {post, job}")
    func postAndJob() throws {
        let answer = PostAndJob(
            post: Post(id: Fixtures.postID, text: "Hi", state: .queued, media: [], jobID: Fixtures.jobID, createdAt: Fixtures.created),
            job: Job(id: Fixtures.jobID, postID: Fixtures.postID, state: .queued, runAt: Fixtures.created, createdAt: Fixtures.created))
        let json = try jsonObject(answer)
        #expect(Set(json.keys) == ["post", "job"])
        #expect(Set(try #require(json["post"] as? [String: Any]).keys) == APIKeys.post)
        #expect(Set(try #require(json["job"] as? [String: Any]).keys) == APIKeys.job)
        #expect(try roundTrip(answer) == answer)
    }

    @Test("a page has data and next_cursor, null on the last page")
    func page() throws {
        let last = Page(data: [Fixtures.stagedMedia], nextCursor: nil)
        let lastJSON = try jsonObject(last)
        #expect(Set(lastJSON.keys) == APIKeys.page)
        #expect(lastJSON["next_cursor"] is NSNull)
        #expect(try roundTrip(last) == last)

        let more = Page(data: [Fixtures.stagedMedia], nextCursor: Fixtures.stagedMedia.cursor)
        let moreJSON = try jsonObject(more)
        #expect(moreJSON["next_cursor"] as? String == Fixtures.stagedMedia.cursor.encoded)
        #expect(try #require(moreJSON["data"] as? [[String: Any]]).count == 1)
        #expect(try roundTrip(more) == more)
    }

    @Test("the queue object has its six keys")
    func queue() throws {
        let status = QueueStatus(paused: true, replicas: 2, workers: 8, running: 2, queued: 5, scheduled: 1)
        let json = try jsonObject(status)
        #expect(Set(json.keys) == APIKeys.queue)
        #expect(json["paused"] as? Bool == true)
        #expect(json["workers"] as? Int == 8)
        #expect(json["replicas"] as? Int == 2)
        #expect(try roundTrip(status) == status)
    }
}

@Suite("Key names")
struct KeyNameTests {
    @Test func aNameIsOneToAHundredCodePointsWithoutControlCharacters() {
        #expect(APIKey.isValidName("ci-publisher"))
        #expect(APIKey.isValidName(String(repeating: "é", count: 100)))
        #expect(!APIKey.isValidName(""))
        #expect(!APIKey.isValidName("tab\there"))
        #expect(!APIKey.isValidName("c1 \u{85} control"))
        // 60 letters with a combining accent each: 60 characters a reader sees, 120 code points. JSON Schema's
        // maxLength (openapi.yaml says 100) counts code points, and so does the server.
        #expect(!APIKey.isValidName(String(repeating: "e\u{301}", count: 60)))
    }
}
