import Synchronization

/// Runs its callers' items together, in batches: a caller that finds fewer than `concurrency` batches running runs
/// its item at once, and the items that come while they run go in the next batch, which one of their callers runs.
/// Group commit, done by Herald: PostgreSQL pays a statement's fixed cost (its plan, its executor's start, its
/// commit's WAL flush) once for a batch, not once for each item. One batch at a time makes the largest batches and
/// cost the least (two at once measured slower on two cores: Benchmarks/notes.md).
///
/// A caller whose batch ran hands the turn on to the first waiting caller (no thread or task of its own drains the
/// queue), so items wait in order, for no more than the batches running when they came.
final class Batcher<Item: Sendable, Output: Sendable>: Sendable {
    /// What a waiting caller is told: its item's output, or that its turn to run a batch has come.
    private enum Turn: Sendable {
        case done(Result<Output, any Error>)
        case run
    }

    /// A caller's item and the turn it waits for.
    private final class Entry: Sendable {
        let item: Item
        let turn = Outcome<Turn>()
        init(_ item: Item) { self.item = item }
    }

    private struct State {
        var waiting: [Entry] = []
        var running = 0
    }

    private let state = Mutex(State())
    private let limit: Int
    private let concurrency: Int

    /// At most `limit` items a batch, and `concurrency` batches at once.
    init(limit: Int, concurrency: Int = 1) {
        self.limit = max(limit, 1)
        self.concurrency = max(concurrency, 1)
    }

    /// How many items wait for a batch (the running one's not counted).
    var waitingCount: Int { state.withLock { $0.waiting.count } }

    /// `item`'s output, once a batch holding it has run: by `run` (this caller's, if the turn is its own), which
    /// returns one result for each item it is given, in order.
    func submit(_ item: Item, run: ([Item]) async -> [Result<Output, any Error>]) async throws -> Output {
        let entry = Entry(item)
        // Items wait only while every batch runs: one that finds room finds none waiting, and runs alone.
        let runsNow = state.withLock { state in
            state.waiting.append(entry)
            guard state.running < concurrency else { return false }
            state.running += 1
            return true
        }
        if !runsNow, case .done(let result) = try await entry.turn.value { return try result.get() }
        // This caller's turn: its own item first (still waiting if it ran at once; taken out when handed the turn).
        let batch = state.withLock { state in
            state.waiting.removeAll { $0 === entry }
            let more = state.waiting.prefix(limit - 1)
            state.waiting.removeFirst(more.count)
            return [entry] + more
        }
        var outputs = await run(batch.map(\.item))
        if outputs.count != batch.count {
            outputs = batch.map { _ in .failure(BatchMiscounted(items: batch.count, outputs: outputs.count)) }
        }
        let next = state.withLock { state -> Entry? in
            guard !state.waiting.isEmpty else {
                state.running -= 1
                return nil
            }
            return state.waiting.removeFirst()
        }
        _ = next?.turn.settle(.success(.run))
        var own: Result<Output, any Error> = .failure(BatchMiscounted(items: batch.count, outputs: 0))
        for (other, output) in zip(batch, outputs) {
            if other === entry { own = output } else { _ = other.turn.settle(.success(.done(output))) }
        }
        return try own.get()
    }
}

/// A batch's run gave not one output for each item (a bug): every item of it fails.
struct BatchMiscounted: Error, CustomStringConvertible {
    let items: Int
    let outputs: Int
    var description: String { "a batch of \(items) items gave \(outputs) outputs" }
}
