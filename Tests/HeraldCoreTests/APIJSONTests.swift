import Foundation
import HeraldCore
import Testing

/// The API objects written by `JSONWriter` (``JSONWritable``): members in `openapi.yaml`'s order, byte for byte, read back
/// by the client's decoder as the same values.
@Suite("API objects written in their documented order")
struct APIJSONTests {
    static let sha256AB = String(repeating: "ab", count: 32)
    static let sha2560F = String(repeating: "0f", count: 32)
    static let stagedJSON =
        #"{"id":"01a202c0-f64b-7d41-9e6f-0a1b2c3d4e5f","content_type":"image/png","size":1234,"sha256":"\#(sha256AB)","#
        + #""description":null,"state":"staged","url":null,"post_id":null,"created_at":"2026-11-22T10:15:30.123Z"}"#
    static let publishedJSON =
        #"{"id":"01a202c0-f64b-7d41-9e6f-0a1b2c3d4e5f","content_type":"video/quicktime","size":99,"sha256":"\#(sha2560F)","#
        + #""description":"A cat","state":"uploaded","url":"https://cdn.example/objects/x.mov","#
        + #""post_id":"01a202c0-f64b-7d41-9e6f-0a1b2c3d4e60","created_at":"2026-11-22T10:15:30.123Z"}"#

    static let post = Post(
        id: Fixtures.postID, text: "Hello \"world\"\n\t\u{1} é 🚀 </a>", state: .published,
        media: [Fixtures.stagedMedia, Fixtures.publishedMedia], jobID: Fixtures.jobID, priority: .high,
        scheduledAt: Fixtures.created, createdAt: Fixtures.created, publishedAt: Fixtures.later)
    static let postJSON =
        #"{"id":"01a202c0-f64b-7d41-9e6f-0a1b2c3d4e60","text":"Hello \"world\"\n\t\u0001 é 🚀 </a>","state":"published","#
        + #""media":[\#(stagedJSON),\#(publishedJSON)],"job_id":"01a202c0-f64b-7d41-9e6f-0a1b2c3d4e61","priority":"high","#
        + #""scheduled_at":"2026-11-22T10:15:30.123Z","created_at":"2026-11-22T10:15:30.123Z","#
        + #""published_at":"2026-11-22T10:16:00.000Z"}"#

    static let queuedPost = Post(
        id: Fixtures.postID, text: "", state: .queued, media: [], jobID: Fixtures.jobID, createdAt: Fixtures.created)
    static let queuedPostJSON =
        #"{"id":"01a202c0-f64b-7d41-9e6f-0a1b2c3d4e60","text":"","state":"queued","media":[],"#
        + #""job_id":"01a202c0-f64b-7d41-9e6f-0a1b2c3d4e61","priority":"normal","scheduled_at":null,"#
        + #""created_at":"2026-11-22T10:15:30.123Z","published_at":null}"#

    static let job = Job(
        id: Fixtures.jobID, postID: Fixtures.postID, state: .queued, runAt: Fixtures.created,
        uploads: [Job.Upload(mediaID: Fixtures.mediaID)], createdAt: Fixtures.created)

    /// The client's reading of the written text.
    static func decoded<Value: Decodable>(_ written: [UInt8], as type: Value.Type = Value.self) throws -> Value {
        try JSONDecoder().decode(Value.self, from: Data(written))
    }

    static func text(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }

    @Test("media: exact bytes, nulls included, read back")
    func media() throws {
        #expect(Self.text(Fixtures.stagedMedia.json) == Self.stagedJSON)
        #expect(Self.text(Fixtures.publishedMedia.json) == Self.publishedJSON)
        #expect(try Self.decoded(Fixtures.stagedMedia.json) == Fixtures.stagedMedia)
        #expect(try Self.decoded(Fixtures.publishedMedia.json) == Fixtures.publishedMedia)
    }

    @Test("a post with its media: exact bytes, text escaped, read back")
    func postWithMedia() throws {
        #expect(Self.text(Self.post.json) == Self.postJSON)
        #expect(try Self.decoded(Self.post.json) == Self.post)
        #expect(Self.text(Self.queuedPost.json) == Self.queuedPostJSON)
        #expect(try Self.decoded(Self.queuedPost.json) == Self.queuedPost)
    }

    @Test("a page with a next_cursor, and the last page with null")
    func pages() throws {
        let cursor = Cursor(createdAt: Fixtures.created, id: Fixtures.postID.rawValue)
        let page = Page(data: [Self.post, Self.queuedPost], nextCursor: cursor)
        #expect(Self.text(page.json) == #"{"data":[\#(Self.postJSON),\#(Self.queuedPostJSON)],"next_cursor":"\#(cursor.encoded)"}"#)
        #expect(try Self.decoded(page.json) == page)

        let last = Page(data: [Self.queuedPost], nextCursor: nil)
        #expect(Self.text(last.json) == #"{"data":[\#(Self.queuedPostJSON)],"next_cursor":null}"#)
        #expect(try Self.decoded(last.json) == last)

        let empty = Page<Post>(data: [], nextCursor: nil)
        #expect(Self.text(empty.json) == #"{"data":[],"next_cursor":null}"#)
    }

    @Test("a page of jobs holds each job as Job.json writes it")
    func pageOfJobs() throws {
        let page = Page(data: [Self.job, Self.job], nextCursor: nil)
        let jobJSON = Self.text(Self.job.json)
        #expect(Self.text(page.json) == #"{"data":[\#(jobJSON),\#(jobJSON)],"next_cursor":null}"#)
        #expect(try Self.decoded(page.json) == page)
    }

    @Test("{post, job}: the post first, then the job")
    func postAndJob() throws {
        let value = PostAndJob(post: Self.queuedPost, job: Self.job)
        #expect(Self.text(value.json) == #"{"post":\#(Self.queuedPostJSON),"job":\#(Self.text(Self.job.json))}"#)
        #expect(try Self.decoded(value.json) == value)
    }

    @Test("the queue object")
    func queue() throws {
        let status = QueueStatus(paused: true, replicas: 1, workers: 8, running: 2, queued: 15, scheduled: 0)
        #expect(Self.text(status.json) == #"{"paused":true,"replicas":1,"workers":8,"running":2,"queued":15,"scheduled":0}"#)
        #expect(try Self.decoded(status.json) == status)
    }

    @Test("webhooks, a new one with its secret, deliveries and the event body: exact bytes")
    func webhooks() throws {
        let webhook = Webhook(
            id: WebhookID("01a202c0-f64b-7d41-9e6f-0a1b2c3d4e70"), url: "https://hooks.example/herald?x=1", events: [.jobFailed, .jobSucceeded],
            createdAt: Fixtures.created)
        #expect(
            Self.text(webhook.json)
                == #"{"id":"01a202c0-f64b-7d41-9e6f-0a1b2c3d4e70","url":"https://hooks.example/herald?x=1","#
                + #""events":["job.failed","job.succeeded"],"disabled":false,"created_at":"2026-11-22T10:15:30.123Z"}"#)
        let created = CreatedWebhook(webhook: webhook, secret: "whsec_c2VjcmV0")
        #expect(
            Self.text(created.json)
                == #"{"id":"01a202c0-f64b-7d41-9e6f-0a1b2c3d4e70","url":"https://hooks.example/herald?x=1","#
                + #""events":["job.failed","job.succeeded"],"secret":"whsec_c2VjcmV0","disabled":false,"#
                + #""created_at":"2026-11-22T10:15:30.123Z"}"#)
        let pending = WebhookDelivery(
            id: DeliveryID("01a202c0-f64b-7d41-9e6f-0a1b2c3d4e71"), eventID: "e1", type: .jobCancelled, createdAt: Fixtures.created)
        #expect(
            Self.text(pending.json)
                == #"{"id":"01a202c0-f64b-7d41-9e6f-0a1b2c3d4e71","event_id":"e1","type":"job.cancelled","attempts":0,"#
                + #""status":"pending","last_status_code":null,"last_error":null,"next_attempt_at":null,"delivered_at":null,"#
                + #""created_at":"2026-11-22T10:15:30.123Z"}"#)
        let delivered = WebhookDelivery(
            id: DeliveryID("01a202c0-f64b-7d41-9e6f-0a1b2c3d4e72"), eventID: "e2", type: .jobSucceeded, attempts: 3, status: .delivered,
            lastStatusCode: 204, lastError: "HTTP 500", nextAttemptAt: nil, deliveredAt: Fixtures.later, createdAt: Fixtures.created)
        #expect(
            Self.text(delivered.json)
                == #"{"id":"01a202c0-f64b-7d41-9e6f-0a1b2c3d4e72","event_id":"e2","type":"job.succeeded","attempts":3,"#
                + #""status":"delivered","last_status_code":204,"last_error":"HTTP 500","next_attempt_at":null,"#
                + #""delivered_at":"2026-11-22T10:16:00.000Z","created_at":"2026-11-22T10:15:30.123Z"}"#)
        let event = WebhookEvent(type: .jobSucceeded, timestamp: Fixtures.later, job: Self.job, post: Self.queuedPost)
        #expect(
            Self.text(event.json)
                == #"{"type":"job.succeeded","timestamp":"2026-11-22T10:16:00.000Z","data":{"job":\#(Self.text(Self.job.json)),"#
                + #""post":\#(Self.queuedPostJSON)}}"#)
    }
}
