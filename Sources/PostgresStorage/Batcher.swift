import Synchronization

/// Runs its callers' items together, a batch at a time: a caller that finds no batch running runs one of what waits
/// (its own item first), and the items that came meanwhile go in the next, which one of their callers runs. Group
/// commit, done by Herald: PostgreSQL pays a statement's fixed cost (its plan, its executor's start, its commit)
/// once for a batch, not once for each item.
///
/// No caller waits for more than the batch running when it came and its own: a caller whose batch ran hands the turn
/// on to the first waiting caller (no thread or task of its own drains the queue).
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
        var running = false
    }

    private let state = Mutex(State())
    private let limit: Int

    /// At most `limit` items a batch.
    init(limit: Int) {
        self.limit = max(limit, 1)
    }

    /// How many items wait for a batch (the running one's not counted).
    var waitingCount: Int { state.withLock { $0.waiting.count } }

    /// `item`'s output, once a batch holding it has run: by `run` (this caller's, if the turn is its own), which
    /// returns one result for each item it is given, in order.
    func submit(_ item: Item, run: ([Item]) async -> [Result<Output, any Error>]) async throws -> Output {
        let entry = Entry(item)
        let runsNow = state.withLock { state in
            state.waiting.append(entry)
            defer { state.running = true }
            return !state.running
        }
        if !runsNow, case .done(let result) = try await entry.turn.value { return try result.get() }
        // This caller's turn: its entry is the first waiting (it was alone, or was handed the turn as the first).
        let batch = state.withLock { state in
            let batch = Array(state.waiting.prefix(limit))
            state.waiting.removeFirst(batch.count)
            return batch
        }
        var outputs = await run(batch.map(\.item))
        if outputs.count != batch.count {
            outputs = batch.map { _ in .failure(BatchMiscounted(items: batch.count, outputs: outputs.count)) }
        }
        let next = state.withLock { state in
            if state.waiting.isEmpty { state.running = false }
            return state.waiting.first
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
