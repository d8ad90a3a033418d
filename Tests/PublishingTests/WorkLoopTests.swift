import HeraldCore
import Logging
import Publishing
import Synchronization
import Testing

@Suite("WorkLoop: the one mechanism under the runner, the dispatcher and the clean-up", .timeLimit(.minutes(1)))
struct WorkLoopTests {
    @Test("every due item is worked once, never more than `concurrency` at a time")
    func boundedAndComplete() async throws {
        let queue = ListQueue(items: Array(0..<20))
        let loop = WorkLoop(queue: queue, configuration: .init(concurrency: 3, idle: .seconds(60), shutdownGrace: .seconds(5)), logger: quiet)
        try await withRunning(loop) {
            await queue.waitUntilWorked(20)
        }
        #expect(queue.worked.sorted() == Array(0..<20))
        #expect(queue.mostAtOnce <= 3 && queue.mostAtOnce >= 2, "ran \(queue.mostAtOnce) at once")
    }

    @Test("the leases in hand are renewed in one call; one found lost stops its item's work (fencing), a stop request too; others go on")
    func leaseLossStopsTheWork() async throws {
        let queue = ListQueue(items: [1, 2, 3], holdUntilStopped: true)
        queue.renewals.withLock { $0 = [1: .lost, 2: .stopRequested] }
        let loop = WorkLoop(
            queue: queue, configuration: .init(concurrency: 3, idle: .seconds(60), heartbeat: .milliseconds(20), shutdownGrace: .seconds(5)),
            logger: quiet)
        try await withRunning(loop) {
            await queue.waitUntilStopped(2)
            #expect(queue.stops.withLock { $0 } == [1: .lostLease, 2: .stopRequested], "item 3 still runs")
            // Claimed together, renewed together: one call for the three, then one for the one left.
            #expect(queue.batches.withLock { $0.first } == [1, 2, 3])
            #expect(queue.batches.withLock { $0.dropFirst().allSatisfy { $0 == [3] } })
            loop.stop(3, .stopRequested)
            await queue.waitUntilStopped(3)
        }
    }

    @Test("shutdown stops claiming, gives the items in hand their grace, then stops them with .shutdown")
    func shutdownDrains() async throws {
        let queue = ListQueue(items: [1, 2], holdUntilStopped: true)
        let loop = WorkLoop(queue: queue, configuration: .init(concurrency: 1, idle: .seconds(60), shutdownGrace: .milliseconds(50)), logger: quiet)
        try await withRunning(loop) {
            await queue.waitUntilStarted(1)
            loop.stopClaiming()
            await queue.waitUntilStopped(1)
        }
        #expect(queue.stops.withLock { $0 } == [1: .shutdown])
        #expect(queue.started.withLock { $0 } == [1], "the second item was never claimed")
    }

    @Test("a claim that fails is tried again; a wake runs the loop before its idle timer")
    func failuresAndWakes() async throws {
        let queue = ListQueue(items: [1])
        queue.failingClaims.withLock { $0 = 1 }
        // An idle timer far longer than the test: only the error's short retry can bring the item in.
        let loop = WorkLoop(
            queue: queue, configuration: .init(concurrency: 1, idle: .seconds(600), shutdownGrace: .seconds(1), retryAfterError: .milliseconds(20)),
            logger: quiet)
        try await withRunning(loop) {
            await queue.waitUntilWorked(1)
            queue.add(2)
            loop.wake()
            await queue.waitUntilWorked(2)
        }
        #expect(queue.worked == [1, 2])
    }
}

private let quiet = Logger(label: "work-loop-tests", factory: { _ in SwiftLogNoOpLogHandler() })

/// Runs the loop while `body` runs, then stops it and waits for its end.
private func withRunning<Q: WorkQueue>(_ loop: WorkLoop<Q>, _ body: () async throws -> Void) async throws {
    try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { await loop.run() }
        defer { loop.stopClaiming() }
        try await body()
        loop.stopClaiming()
        try await group.waitForAll()
    }
}

/// A queue in memory: every item due at once; counts what runs at a time; can hold each item until it is stopped.
private final class ListQueue: WorkQueue {
    private struct State {
        var due: [Int]
        var running = 0
        var mostAtOnce = 0
        var worked: [Int] = []
        var waiters: [(condition: @Sendable (ListQueue.Snapshot) -> Bool, continuation: CheckedContinuation<Void, Never>)] = []
    }

    struct Snapshot {
        var worked: Int
        var started: Int
        var stopped: Int
    }

    private let state: Mutex<State>
    private let holdUntilStopped: Bool
    let renewals = Mutex<[Int: WorkLoop<ListQueue>.Renewal]>([:])
    /// The items of each renewal, in order.
    let batches = Mutex<[[Int]]>([])
    let stops = Mutex<[Int: WorkStop]>([:])
    let started = Mutex<[Int]>([])
    let failingClaims = Mutex(0)

    init(items: [Int], holdUntilStopped: Bool = false) {
        state = Mutex(State(due: items))
        self.holdUntilStopped = holdUntilStopped
    }

    var worked: [Int] { state.withLock { $0.worked } }
    var mostAtOnce: Int { state.withLock { $0.mostAtOnce } }

    func add(_ item: Int) { state.withLock { $0.due.append(item) } }

    func id(of item: Int) -> Int { item }

    func claim(upTo limit: Int, inHand: Set<Int>, now: Timestamp) async throws -> [Int] {
        let fail = failingClaims.withLock { failing -> Bool in
            defer { failing = max(0, failing - 1) }
            return failing > 0
        }
        if fail { throw Refused() }
        return state.withLock { state in
            let taken = Array(state.due.prefix(limit))
            state.due.removeFirst(taken.count)
            return taken
        }
    }

    func nextDue(inHand: Set<Int>) async throws -> Timestamp? {
        state.withLock { $0.due.isEmpty } ? nil : .now()
    }

    func renew(_ items: [Int]) async throws -> [Int: WorkLoop<ListQueue>.Renewal] {
        batches.withLock { $0.append(items.sorted()) }
        let set = renewals.withLock { $0 }
        return Dictionary(uniqueKeysWithValues: items.map { ($0, set[$0] ?? .held) })
    }

    func work(_ item: Int, control: WorkControl) async {
        started.withLock { $0.append(item) }
        state.withLock { state in
            state.running += 1
            state.mostAtOnce = max(state.mostAtOnce, state.running)
        }
        notify()
        if holdUntilStopped {
            // Held until the loop cancels the work (a stop does).
            while !Task.isCancelled { try? await Task.sleep(for: .seconds(60)) }
            if let reason = control.stopReason { stops.withLock { $0[item] = reason } }
        } else {
            // A little work, so that several overlap.
            try? await Task.sleep(for: .milliseconds(5))
        }
        state.withLock { state in
            state.running -= 1
            state.worked.append(item)
        }
        notify()
    }

    func waitUntilWorked(_ count: Int) async { await wait { $0.worked >= count } }
    func waitUntilStarted(_ count: Int) async { await wait { $0.started >= count } }
    func waitUntilStopped(_ count: Int) async { await wait { $0.stopped >= count } }

    private var snapshot: Snapshot {
        Snapshot(worked: state.withLock { $0.worked.count }, started: started.withLock { $0.count }, stopped: stops.withLock { $0.count })
    }

    private func wait(_ condition: @escaping @Sendable (Snapshot) -> Bool) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let snapshot = self.snapshot
            let now = state.withLock { state -> Bool in
                if condition(snapshot) { return true }
                state.waiters.append((condition, continuation))
                return false
            }
            if now { continuation.resume() }
            notify()
        }
    }

    private func notify() {
        let snapshot = self.snapshot
        let ready = state.withLock { state in
            let ready = state.waiters.filter { $0.condition(snapshot) }.map(\.continuation)
            state.waiters.removeAll { $0.condition(snapshot) }
            return ready
        }
        for continuation in ready { continuation.resume() }
    }

    private struct Refused: Error {}
}
