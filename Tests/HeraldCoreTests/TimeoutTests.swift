import HeraldCore
import Synchronization
import Testing

/// `withTimeout`: the one race of an operation against the clock (uploads, wake-ups, long-polls).
@Suite("An operation raced against the clock")
struct TimeoutTests {
    struct Failed: Error, Equatable {}

    @Test("an operation that finishes first gives its value")
    func finishesFirst() async throws {
        #expect(try await withTimeout(.seconds(60)) { 42 } == 42)
    }

    @Test("an operation that outlasts the timeout gives nil, and is cancelled before the call returns")
    func outlasted() async throws {
        let cancelled = Mutex(false)
        let result: Int? = try await withTimeout(.milliseconds(50)) {
            // Waits until cancelled: only the timeout can end it.
            await withTaskCancellationHandler {
                for await _ in AsyncStream<Int>(Int.self, { _ in }) {}
            } onCancel: {
                cancelled.withLock { $0 = true }
            }
            return 1
        }
        #expect(result == nil)
        #expect(cancelled.withLock { $0 })
    }

    @Test("an operation's error is thrown")
    func throwsTheError() async {
        await #expect(throws: Failed()) { try await withTimeout(.seconds(60)) { () async throws -> Int in throw Failed() } }
    }
}
