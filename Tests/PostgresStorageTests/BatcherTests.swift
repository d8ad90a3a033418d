import Synchronization
import Testing

@testable import PostgresStorage

@Suite("Batcher (group commit)", .timeLimit(.minutes(1)))
struct BatcherTests {
    /// The batches a run saw, and a gate that holds the first batch until the test opens it.
    final class Runs: Sendable {
        let batches = Mutex<[[Int]]>([])
        let firstStarted = AsyncStream<Void>.makeStream()
        let release = AsyncStream<Void>.makeStream()

        func run(_ items: [Int]) async -> [Result<Int, any Error>] {
            let isFirst = batches.withLock { batches in
                batches.append(items)
                return batches.count == 1
            }
            if isFirst {
                firstStarted.continuation.yield()
                for await _ in release.stream { break }
            }
            return items.map { .success($0 * 10) }
        }
    }

    @Test func itemsThatComeWhileABatchRunsGoTogetherInTheNextEachGetsItsOwnOutput() async throws {
        let batcher = Batcher<Int, Int>(limit: 4, concurrency: 1)
        let runs = Runs()
        try await withThrowingTaskGroup(of: (Int, Int).self) { group in
            group.addTask { (0, try await batcher.submit(0, run: runs.run)) }
            for await _ in runs.firstStarted.stream { break }
            // Six more while the first batch is held: they wait, and go in batches of at most four.
            for item in 1...6 { group.addTask { (item, try await batcher.submit(item, run: runs.run)) } }
            try await waitUntil { batcher.waitingCount == 6 }
            runs.release.continuation.yield()
            var outputs: [Int: Int] = [:]
            for try await (item, output) in group { outputs[item] = output }
            #expect(outputs == Dictionary(uniqueKeysWithValues: (0...6).map { ($0, $0 * 10) }))
        }
        let batches = runs.batches.withLock { $0 }
        #expect(batches.first == [0])
        #expect(batches.dropFirst().map(\.count) == [4, 2], "\(batches)")
        #expect(Set(batches.dropFirst().flatMap { $0 }) == Set(1...6))
    }

    @Test func twoBatchesRunAtOnceAndTheItemsThatComeMeanwhileWaitForEither() async throws {
        let batcher = Batcher<Int, Int>(limit: 4, concurrency: 2)
        let batches = Mutex<[[Int]]>([])
        let (started, start) = AsyncStream.makeStream(of: Void.self)
        let latch = StartGate()  // the batches wait until the test opens it
        let run: @Sendable ([Int]) async -> [Result<Int, any Error>] = { items in
            batches.withLock { $0.append(items) }
            start.yield()
            await latch.wait()
            return items.map { .success($0 * 10) }
        }
        try await withThrowingTaskGroup(of: (Int, Int).self) { group in
            var starts = started.makeAsyncIterator()
            for item in 0...1 {
                group.addTask { (item, try await batcher.submit(item, run: run)) }
                await starts.next()  // each runs at once, the first still held
            }
            for item in 2...3 { group.addTask { (item, try await batcher.submit(item, run: run)) } }
            try await waitUntil { batcher.waitingCount == 2 }
            #expect(batches.withLock { $0.count } == 2, "no third batch while two run")
            latch.open()
            var outputs: [Int: Int] = [:]
            for try await (item, output) in group { outputs[item] = output }
            #expect(outputs == [0: 0, 1: 10, 2: 20, 3: 30])
        }
        let all = batches.withLock { $0 }
        // Each of the first two to end hands its turn on: 2 and 3 go together or apart, as the hand-offs fall.
        #expect(Set(all.prefix(2)) == [[0], [1]], "\(all)")
        #expect(all.dropFirst(2).flatMap { $0 }.sorted() == [2, 3], "\(all)")
    }

    @Test func aRunThatMiscountsFailsEveryItemOfItsBatchAndTheNextBatchRuns() async throws {
        let batcher = Batcher<Int, Int>(limit: 8)
        await #expect(throws: BatchMiscounted.self) { try await batcher.submit(1) { _ in [] } }
        #expect(try await batcher.submit(2) { items in items.map { .success($0 + 1) } } == 3)
    }

    @Test func aFailedRunFailsItsItemsWithItsError() async throws {
        struct Refused: Error {}
        let batcher = Batcher<Int, Int>(limit: 8)
        await #expect(throws: Refused.self) { try await batcher.submit(1) { items in items.map { _ in .failure(Refused()) } } }
    }

    /// Polls `condition` (a count only the batcher's lock knows; no event tells it) until true, for at most 10 s.
    private func waitUntil(_ condition: () -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(10)
        while !condition() {
            try #require(ContinuousClock.now < deadline, "the condition never held")
            try await Task.sleep(for: .milliseconds(1))
        }
    }
}
