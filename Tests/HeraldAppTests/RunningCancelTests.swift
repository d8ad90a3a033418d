import Foundation
import NIOHTTP1
import Publishing
import Synchronization
import Testing

/// A store whose uploads never finish by themselves: they wait to be cancelled, and count that they were.
final class HangingStore: MediaStore {
    private struct State {
        var inFlight = 0
        var cancelled = 0
        var deleted: [String] = []
        var waiters: [(Int, CheckedContinuation<Void, Never>)] = []
    }
    private let state = Mutex(State())

    var cancelled: Int { state.withLock { $0.cancelled } }
    var deleted: [String] { state.withLock { $0.deleted } }

    func waitUntilInFlight(_ count: Int) async {
        await withCheckedContinuation { continuation in
            let now = state.withLock { state -> Bool in
                if state.inFlight >= count { return true }
                state.waiters.append((count, continuation))
                return false
            }
            if now { continuation.resume() }
        }
    }

    func put(_ object: MediaObject, progress: @escaping BytesTaken) async throws -> String {
        let ready = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.inFlight += 1
            let ready = state.waiters.filter { $0.0 <= state.inFlight }.map(\.1)
            state.waiters.removeAll { $0.0 <= state.inFlight }
            return ready
        }
        for waiter in ready { waiter.resume() }
        defer { state.withLock { $0.inFlight -= 1 } }
        do {
            try await Task.sleep(for: .seconds(3600))
        } catch {
            state.withLock { $0.cancelled += 1 }
            throw error
        }
        return "hang://\(object.key)"
    }

    func delete(key: String) async throws { state.withLock { $0.deleted.append(key) } }
    func url(for key: String) -> String { "hang://\(key)" }
    func exists(key: String) async throws -> Bool { false }
}

@Suite("Cancelling a running job over HTTP", .serialized, .timeLimit(.minutes(1)))
struct RunningCancelTests {
    @Test func cancelReachesEveryUploadAndTheJobEndsCancelled() async throws {
        let store = HangingStore()
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
            #expect(store.cancelled == 3, "every upload saw the cancellation")
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
