import Foundation
import HeraldTestSupport
import NIOHTTP1
import Publishing
import Synchronization
import Testing

@Suite("Cancelling a running job over HTTP", .serialized, .timeLimit(.minutes(1)))
struct RunningCancelTests {
    @Test func cancelReachesEveryUploadAndTheJobEndsCancelled() async throws {
        let store = TestStore(default: .hang)
        try await withHerald(store: store) { base, _, _ in
            var ids: [String] = []
            for _ in 0..<3 {
                let media = try await send(.POST, "\(base)/v1/media", contentType: "image/png", body: pngBytes)
                ids.append(try #require(media.json["id"] as? String))
            }
            let body = try JSONSerialization.data(withJSONObject: ["text": "hi", "media_ids": ids])
            let created = try await send(.POST, "\(base)/v1/posts", contentType: "application/json", body: Array(body))
            #expect(created.status == .accepted)
            let jobID = try #require((created.json["job"] as? [String: Any])?["id"] as? String)
            await store.waitUntilInFlight(3)

            let clock = ContinuousClock()
            let started = clock.now
            let cancel = try await send(.POST, "\(base)/v1/jobs/\(jobID)/cancel")
            #expect(cancel.status == .accepted)
            #expect(cancel.json["cancel_requested"] as? Bool == true)
            let done = try await send(.GET, "\(base)/v1/jobs/\(jobID)?wait=10")
            let elapsed = clock.now - started
            #expect(done.json["state"] as? String == "cancelled")
            #expect(done.headers["Retry-After"].isEmpty)
            #expect(store.sawCancellation.count == 3, "every upload saw the cancellation")
            #expect(store.deleted.count == 3, "every object key of the job was deleted")
            let postID = try #require((created.json["post"] as? [String: Any])?["id"] as? String)
            let post = try await send(.GET, "\(base)/v1/posts/\(postID)")
            #expect(post.json["state"] as? String == "cancelled")
            let again = try await send(.DELETE, "\(base)/v1/jobs/\(jobID)")
            #expect(again.status == .ok)
            print("cancel request to job cancelled (3 hanging uploads, over HTTP): \(elapsed)")
        }
    }
}
