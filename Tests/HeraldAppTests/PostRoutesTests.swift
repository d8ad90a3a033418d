import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import Testing

@testable import HeraldApp

/// An answer: its status, headers, and JSON object (empty when the body is not one).
typealias Answer = (status: HTTPResponseStatus, headers: HTTPHeaders, json: [String: Any])

/// A request with any headers; the answer's JSON object (empty when the body is not one).
func exchange(
    _ method: HTTPMethod,
    _ url: String,
    contentType: String? = nil,
    headers: [(String, String)] = [],
    body: [UInt8]? = nil
) async throws -> Answer {
    var request = HTTPClientRequest(url: url)
    request.method = method
    if let contentType { request.headers.add(name: "Content-Type", value: contentType) }
    for (name, value) in headers { request.headers.add(name: name, value: value) }
    request.authorize()
    if let body { request.body = .bytes(ByteBuffer(bytes: body)) }
    let response = try await HTTPClient.shared.execute(request, timeout: .seconds(60))
    let bytes = try await response.body.collect(upTo: 4 << 20)
    let json = bytes.readableBytes == 0 ? [:] : (try JSONSerialization.jsonObject(with: Data(bytes.readableBytesView)) as? [String: Any] ?? [:])
    return (response.status, response.headers, json)
}

/// `POST /v1/posts` with a JSON object body.
func createPost(_ base: String, _ fields: [String: Any], key: String? = nil) async throws -> Answer {
    let body = Array(try JSONSerialization.data(withJSONObject: fields))
    return try await exchange(
        .POST, "\(base)/v1/posts", contentType: "application/json", headers: key.map { [("Idempotency-Key", $0)] } ?? [], body: body)
}

/// Uploads media and returns its id.
func uploadMedia(_ base: String, _ bytes: [UInt8] = pngBytes, type: String = "image/png") async throws -> String {
    let created = try await send(.POST, "\(base)/v1/media", contentType: type, body: bytes)
    #expect(created.status == .created)
    return try #require(created.json["id"] as? String)
}

/// The `post` and `job` objects of a 202 answer.
func postAndJob(_ json: [String: Any]) throws -> (post: [String: Any], job: [String: Any]) {
    (try #require(json["post"] as? [String: Any]), try #require(json["job"] as? [String: Any]))
}

/// The pointers of a 422's `errors`.
func pointers(_ json: [String: Any]) -> [String] {
    (json["errors"] as? [[String: Any]] ?? []).compactMap { $0["pointer"] as? String }
}

let formType = "multipart/form-data; boundary=HeraldBoundary"
let unknownID = "0190f5e2-3c4d-7a1b-8c2d-1234567890ab"

@Suite("Post endpoints", .serialized, .timeLimit(.minutes(2)))
struct PostRoutesTests {
    @Test func createsAPostWithItsMediaInOrderThenPublishesIt() async throws {
        try await withHerald { base, _, _ in
            #expect(try await exchange(.POST, "\(base)/v1/queue/pause").status == .ok)
            let first = try await uploadMedia(base)
            let second = try await uploadMedia(base, jpegBytes, type: "image/jpeg")
            let created = try await createPost(base, ["text": "Harbour at dusk", "media_ids": [second, first]])
            #expect(created.status == .accepted)
            let (post, job) = try postAndJob(created.json)
            let jobID = try #require(job["id"] as? String)
            let postID = try #require(post["id"] as? String)
            #expect(created.headers["Location"] == ["/v1/jobs/\(jobID)"])
            #expect(created.headers["Content-Type"] == ["application/json"])
            #expect(post["state"] as? String == "queued")
            #expect(post["job_id"] as? String == jobID)
            #expect(post["priority"] as? String == "normal")
            #expect(post["scheduled_at"] is NSNull)
            #expect((post["media"] as? [[String: Any]])?.compactMap { $0["id"] as? String } == [second, first])
            #expect((post["media"] as? [[String: Any]])?.allSatisfy { $0["post_id"] as? String == postID } == true)
            #expect(job["state"] as? String == "queued")
            #expect(job["done"] as? Bool == false)
            #expect(job["post_id"] as? String == postID)
            #expect((job["uploads"] as? [[String: Any]])?.compactMap { $0["media_id"] as? String } == [second, first])

            let fetched = try await exchange(.GET, "\(base)/v1/posts/\(postID)")
            #expect(fetched.status == .ok)
            #expect(fetched.json["id"] as? String == postID)
            #expect(fetched.json["text"] as? String == "Harbour at dusk")

            // Media attached to this post cannot be used by another.
            let again = try await createPost(base, ["text": "again", "media_ids": [first]])
            #expect(again.status == .unprocessableEntity)
            #expect(pointers(again.json) == ["/media_ids/0"])

            #expect(try await exchange(.POST, "\(base)/v1/queue/resume").status == .ok)
            let done = try await exchange(.GET, "\(base)/v1/jobs/\(jobID)?wait=30")
            #expect(done.json["state"] as? String == "succeeded")
            #expect(done.headers["Retry-After"].isEmpty)
            let published = try await exchange(.GET, "\(base)/v1/posts/\(postID)")
            #expect(published.json["state"] as? String == "published")
            #expect(published.json["published_at"] is String)
        }
    }

    @Test func aFutureScheduledAtSchedulesThePostAndItsJob() async throws {
        try await withHerald { base, _, _ in
            let created = try await createPost(base, ["text": "later", "scheduled_at": "2099-01-02T03:04:05+02:00", "priority": "high"])
            #expect(created.status == .accepted)
            let (post, job) = try postAndJob(created.json)
            #expect(post["state"] as? String == "scheduled")
            #expect(post["scheduled_at"] as? String == "2099-01-02T01:04:05.000Z")
            #expect(post["priority"] as? String == "high")
            #expect(job["state"] as? String == "scheduled")
            #expect(job["run_at"] as? String == "2099-01-02T01:04:05.000Z")
            #expect(job["priority"] as? String == "high")
        }
    }

    @Test func validationReportsEveryProblemAtOnce() async throws {
        try await withHerald(configure: { $0.maxMediaPerPost = 3 }) { base, _, _ in
            let attached = try await uploadMedia(base)
            #expect(try await createPost(base, ["text": "owner", "media_ids": [attached]]).status == .accepted)
            let free = try await uploadMedia(base)
            let answer = try await createPost(
                base,
                [
                    "text": String(repeating: "é", count: 5001),
                    "media_ids": [free, unknownID, free, attached, "not-an-id"],
                    "scheduled_at": "tomorrow",
                    "priority": "urgent",
                ]
            )
            #expect(answer.status == .unprocessableEntity)
            #expect(answer.headers["Content-Type"] == ["application/problem+json"])
            #expect(answer.json["status"] as? Int == 422)
            #expect(
                pointers(answer.json) == [
                    "/text", "/media_ids", "/media_ids/1", "/media_ids/2", "/media_ids/3", "/media_ids/4", "/scheduled_at", "/priority",
                ]
            )

            let empty = try await createPost(base, ["text": "  ", "media_ids": [String]()])
            #expect(empty.status == .unprocessableEntity)
            #expect(pointers(empty.json) == [""])

            // Only the repository finds these: still all reported.
            let unknown = try await createPost(base, ["media_ids": [unknownID, free, attached]])
            #expect(unknown.status == .unprocessableEntity)
            #expect(pointers(unknown.json) == ["/media_ids/0", "/media_ids/2"])
            // Nothing was attached by the refused requests.
            #expect(try await send(.GET, "\(base)/v1/media/\(free)").json["post_id"] is NSNull)
        }
    }

    @Test func malformedBodiesTypesAndSizesAreRefused() async throws {
        try await withHerald { base, _, _ in
            let json = "application/json"
            let cases: [(String, String?, [UInt8], HTTPResponseStatus)] = [
                ("not JSON", json, Array("text=hello".utf8), .badRequest),
                ("an empty body", json, [], .badRequest),
                ("a JSON array", json, Array("[]".utf8), .badRequest),
                ("text of the wrong type", json, Array(#"{"text": 5}"#.utf8), .badRequest),
                ("media_ids of the wrong type", json, Array(#"{"text": "a", "media_ids": "x"}"#.utf8), .badRequest),
                ("a media id of the wrong type", json, Array(#"{"text": "a", "media_ids": [1]}"#.utf8), .badRequest),
                ("plain text", "text/plain", Array("hello".utf8), .unsupportedMediaType),
                ("no content type", nil, Array(#"{"text": "a"}"#.utf8), .unsupportedMediaType),
                ("over 1 MiB", json, Array(#"{"text": ""#.utf8) + [UInt8](repeating: 0x61, count: 1 << 20) + Array(#""}"#.utf8), .payloadTooLarge),
            ]
            for (name, type, body, expected) in cases {
                let answer = try await exchange(.POST, "\(base)/v1/posts", contentType: type, body: body)
                #expect(answer.status == expected, "\(name)")
                #expect(answer.headers["Content-Type"] == ["application/problem+json"], "\(name)")
            }
            let charset = try await exchange(
                .POST, "\(base)/v1/posts", contentType: "Application/JSON; charset=utf-8", body: Array(#"{"text": "a"}"#.utf8))
            #expect(charset.status == .accepted)

            for key in [String(repeating: "k", count: 256), "", "\"\"", "caf\u{e9}", "two words"] {
                let answer = try await createPost(base, ["text": "keyed"], key: key)
                #expect(answer.status == .badRequest, "key \(key)")
            }
            #expect(try await createPost(base, ["text": "keyed"], key: String(repeating: "k", count: 255)).status == .accepted)
            #expect(try await exchange(.PUT, "\(base)/v1/posts").status == .methodNotAllowed)
        }
    }

    /// Foundation's decoder takes a trailing comma; RFC 8259 does not, and neither does Herald: nothing is published.
    @Test func jsonThatRFC8259RefusesIsA400AndPublishesNothing() async throws {
        try await withHerald { base, _, _ in
            for body in [#"{"text": "a",}"#, #"{"text": "a", "media_ids": [],}"#, #"{"text": "a" /* c */}"#, #"{"text": "a", "n": NaN}"#] {
                let answer = try await exchange(.POST, "\(base)/v1/posts", contentType: "application/json", body: Array(body.utf8))
                #expect(answer.status == .badRequest, "\(body)")
                #expect((answer.json["detail"] as? String)?.hasPrefix("the body is not valid JSON") == true, "\(body)")
            }
            let posts = try await send(.GET, "\(base)/v1/posts")
            #expect((posts.json["data"] as? [Any])?.isEmpty == true)
        }
    }

    @Test func idempotencyKeyReplaysTheSamePostAndRefusesAnotherPayload() async throws {
        try await withHerald { base, _, _ in
            let media = try await uploadMedia(base)
            let body = #"{"text": "once", "media_ids": ["\#(media)"], "scheduled_at": "2099-01-01T00:00:00Z"}"#
            let first = try await exchange(
                .POST, "\(base)/v1/posts", contentType: "application/json", headers: [("Idempotency-Key", "abc")], body: Array(body.utf8))
            #expect(first.status == .accepted)
            let (post, job) = try postAndJob(first.json)

            // Same key (quoted), same payload in another key order, spacing, and spelling of the same instant.
            let reordered = #"{ "scheduled_at":"2099-01-01T00:00:00.000Z","priority":"normal","media_ids":["\#(media)"],"text":"once"}"#
            let replay = try await exchange(
                .POST, "\(base)/v1/posts", contentType: "application/json", headers: [("Idempotency-Key", "\"abc\"")],
                body: Array(reordered.utf8))
            #expect(replay.status == .accepted)
            let (replayedPost, replayedJob) = try postAndJob(replay.json)
            #expect(replayedPost["id"] as? String == post["id"] as? String)
            #expect(replayedJob["id"] as? String == job["id"] as? String)
            #expect(replay.headers["Location"] == first.headers["Location"])

            let other = try await createPost(base, ["text": "twice", "media_ids": [media]], key: "abc")
            #expect(other.status == .unprocessableEntity)
            #expect(other.json["errors"] == nil)

            // A refused request does not bind its key.
            #expect(try await createPost(base, ["text": ""], key: "fresh").status == .unprocessableEntity)
            #expect(try await createPost(base, ["text": "now valid"], key: "fresh").status == .accepted)
            let posts = try await exchange(.GET, "\(base)/v1/posts")
            #expect((posts.json["data"] as? [Any])?.count == 2)
        }
    }

    @Test func aFormStagesEachMediaPartInOrder() async throws {
        try await withHerald { base, _, application in
            #expect(try await exchange(.POST, "\(base)/v1/queue/pause").status == .ok)
            let form = multipart([
                ("media", "b.jpg", "image/jpeg", jpegBytes),
                ("text", nil, nil, Array("from a form".utf8)),
                ("media", "a.png", "image/png", pngBytes),
                ("priority", nil, nil, Array("low".utf8)),
            ])
            let created = try await exchange(.POST, "\(base)/v1/posts", contentType: formType, headers: [("Idempotency-Key", "form-1")], body: form)
            #expect(created.status == .accepted)
            let (post, job) = try postAndJob(created.json)
            #expect(post["text"] as? String == "from a form")
            #expect(post["priority"] as? String == "low")
            let media = try #require(post["media"] as? [[String: Any]])
            #expect(media.compactMap { $0["content_type"] as? String } == ["image/jpeg", "image/png"])
            #expect(media.compactMap { $0["sha256"] as? String } == [sha256(jpegBytes), sha256(pngBytes)])
            #expect(media.allSatisfy { $0["state"] as? String == "staged" && $0["post_id"] as? String == post["id"] as? String })
            #expect(stagedFiles(application).count == 2)

            // The same form again: the same post, and no new staged file.
            let replay = try await exchange(.POST, "\(base)/v1/posts", contentType: formType, headers: [("Idempotency-Key", "form-1")], body: form)
            #expect(replay.status == .accepted)
            #expect(try postAndJob(replay.json).job["id"] as? String == job["id"] as? String)
            #expect(stagedFiles(application).count == 2)

            // Other bytes under the same key: 422, nothing kept.
            let other = multipart([("text", nil, nil, Array("from a form".utf8)), ("media", "a.png", "image/png", pngBytes)])
            let mismatch = try await exchange(.POST, "\(base)/v1/posts", contentType: formType, headers: [("Idempotency-Key", "form-1")], body: other)
            #expect(mismatch.status == .unprocessableEntity)
            #expect(stagedFiles(application).count == 2)
            let textOnly = try await exchange(
                .POST, "\(base)/v1/posts", contentType: formType, body: multipart([("text", nil, nil, Array("hi".utf8))]))
            #expect(textOnly.status == .accepted)
        }
    }

    @Test func badFormsAreRefusedAndKeepNothing() async throws {
        try await withHerald(configure: { $0.maxMediaPerPost = 2 }) { base, _, application in
            let text = ("text", String?.none, String?.none, Array("t".utf8))
            let cases: [(String, [(name: String, filename: String?, type: String?, body: [UInt8])], HTTPResponseStatus)] = [
                (
                    "bytes not of the declared type", [text, ("media", "a.png", "image/png", pngBytes), ("media", "b.png", "image/png", jpegBytes)],
                    .unsupportedMediaType
                ),
                ("a media part without a type", [text, ("media", "a.png", nil, pngBytes)], .unsupportedMediaType),
                ("an empty media part", [text, ("media", "a.png", "image/png", [])], .badRequest),
                ("an unknown part", [text, ("media", "a.png", "image/png", pngBytes), ("media_ids", nil, nil, Array("x".utf8))], .badRequest),
                ("text twice", [text, text], .badRequest),
            ]
            for (name, parts, expected) in cases {
                let answer = try await exchange(.POST, "\(base)/v1/posts", contentType: formType, body: multipart(parts))
                #expect(answer.status == expected, "\(name)")
                #expect(answer.headers["Content-Type"] == ["application/problem+json"], "\(name)")
            }
            let invalid = try await exchange(
                .POST, "\(base)/v1/posts", contentType: formType,
                body: multipart([
                    ("media", "a.png", "image/png", pngBytes), ("media", "b.png", "image/png", pngBytes), ("media", "c.png", "image/png", pngBytes),
                    ("scheduled_at", nil, nil, Array("soon".utf8)), ("priority", nil, nil, Array("top".utf8)),
                ]))
            #expect(invalid.status == .unprocessableEntity)
            #expect(pointers(invalid.json) == ["/media", "/scheduled_at", "/priority"])
            #expect(try await exchange(.POST, "\(base)/v1/posts", contentType: formType, body: multipart([text])).status == .accepted)
            #expect(stagedFiles(application).isEmpty)
            let posts = try await exchange(.GET, "\(base)/v1/posts")
            #expect((posts.json["data"] as? [Any])?.count == 1)
        }
    }

    @Test func unknownAndMalformedPostIdsAre404() async throws {
        try await withHerald { base, _, _ in
            for path in ["/v1/posts/\(unknownID)", "/v1/posts/not-an-id", "/v1/posts/\(unknownID.uppercased())"] {
                let answer = try await exchange(.GET, "\(base)\(path)")
                #expect(answer.status == .notFound, "\(path)")
                #expect(answer.headers["Content-Type"] == ["application/problem+json"])
            }
            #expect(try await exchange(.POST, "\(base)/v1/posts/\(unknownID)/publish").status == .notFound)
            #expect(try await exchange(.POST, "\(base)/v1/posts/nope/publish").status == .notFound)
        }
    }

    @Test func listsPageNewestFirstWithCursorsAndFilters() async throws {
        try await withHerald { base, _, _ in
            #expect(try await exchange(.POST, "\(base)/v1/queue/pause").status == .ok)
            var ids: [String] = []
            for index in 0..<3 {
                ids.append(try #require(try postAndJob(try await createPost(base, ["text": "post \(index)"]).json).post["id"] as? String))
            }
            let scheduled = try await createPost(base, ["text": "later", "scheduled_at": "2099-01-01T00:00:00Z"])
            let scheduledID = try #require(try postAndJob(scheduled.json).post["id"] as? String)

            let first = try await exchange(.GET, "\(base)/v1/posts?state=queued&limit=2")
            #expect(first.status == .ok)
            #expect((first.json["data"] as? [[String: Any]])?.compactMap { $0["id"] as? String } == [ids[2], ids[1]])
            let cursor = try #require(first.json["next_cursor"] as? String)
            let second = try await exchange(.GET, "\(base)/v1/posts?state=queued&limit=2&cursor=\(cursor)")
            #expect((second.json["data"] as? [[String: Any]])?.compactMap { $0["id"] as? String } == [ids[0]])
            #expect(second.json["next_cursor"] is NSNull)

            let all = try await exchange(.GET, "\(base)/v1/posts")
            #expect((all.json["data"] as? [[String: Any]])?.compactMap { $0["id"] as? String } == [scheduledID] + ids.reversed())
            let onlyScheduled = try await exchange(.GET, "\(base)/v1/posts?state=scheduled")
            #expect((onlyScheduled.json["data"] as? [[String: Any]])?.compactMap { $0["id"] as? String } == [scheduledID])

            for query in ["state=done", "state=", "limit=0", "limit=101", "limit=x", "limit=%2B5", "cursor=abc", "cursor="] {
                let answer = try await exchange(.GET, "\(base)/v1/posts?\(query)")
                #expect(answer.status == .badRequest, "\(query)")
                #expect(answer.headers["Content-Type"] == ["application/problem+json"], "\(query)")
            }
        }
    }

    @Test func republishingNeedsAFailedOrCancelledPost() async throws {
        try await withHerald { base, _, _ in
            #expect(try await exchange(.POST, "\(base)/v1/queue/pause").status == .ok)
            let (post, job) = try postAndJob(try await createPost(base, ["text": "retry me"]).json)
            let postID = try #require(post["id"] as? String)
            let jobID = try #require(job["id"] as? String)
            let active = try await exchange(.POST, "\(base)/v1/posts/\(postID)/publish")
            #expect(active.status == .conflict)
            #expect(active.headers["Content-Type"] == ["application/problem+json"])

            #expect(try await exchange(.POST, "\(base)/v1/jobs/\(jobID)/cancel").status == .accepted)
            let republished = try await exchange(.POST, "\(base)/v1/posts/\(postID)/publish")
            #expect(republished.status == .accepted)
            let (newPost, newJob) = try postAndJob(republished.json)
            let newJobID = try #require(newJob["id"] as? String)
            #expect(newJobID != jobID)
            #expect(republished.headers["Location"] == ["/v1/jobs/\(newJobID)"])
            #expect(newPost["job_id"] as? String == newJobID)
            #expect(newPost["state"] as? String == "queued")
            #expect(newJob["state"] as? String == "queued")
            #expect(try await exchange(.POST, "\(base)/v1/posts/\(postID)/publish").status == .conflict)

            #expect(try await exchange(.POST, "\(base)/v1/queue/resume").status == .ok)
            #expect(try await exchange(.GET, "\(base)/v1/jobs/\(newJobID)?wait=30").json["state"] as? String == "succeeded")
            let published = try await exchange(.POST, "\(base)/v1/posts/\(postID)/publish")
            #expect(published.status == .conflict)
        }
    }
}
