import Foundation
public import HeraldCore
public import Publishing
import Synchronization

/// A `MediaStore` whose every key can be told how to behave, and that records what happened.
public final class TestStore: MediaStore {
    public enum Behaviour: Sendable {
        case succeed(after: Duration)
        case failOnce(after: Duration)
        case failTransiently
        case failPermanently
        case hang
        /// Hangs until cancelled, then counts as a body already sent whole: ``landCancelled()`` completes it later.
        case landsWhenCancelled
        /// Waits until `count` uploads are in flight at once (for ever if they never are), then succeeds after `latency`.
        case succeedTogether(count: Int, after: Duration)
        /// Takes its bytes in eight even steps over `duration`, telling each step's progress: a slow network.
        case paced(over: Duration)
        /// Tells half its bytes taken, then hangs until cancelled.
        case halfThenHang
        /// Takes bytes when the test says (``take(_:)``) and succeeds at ``finish()``.
        case stepped
    }

    private struct State {
        var behaviours: [String: Behaviour] = [:]
        /// Behaviours by what is uploaded, asked in order when its media id has none of its own.
        var rules: [(matches: @Sendable (MediaObject) -> Bool, behaviour: Behaviour)] = []
        var defaultBehaviour: Behaviour = .succeed(after: .zero)
        var calls: [String: Int] = [:]
        var inFlight = 0
        var maxInFlight = 0
        var stored: Set<String> = []
        var deleted: [String] = []
        var sawCancellation: Set<String> = []
        var waiters: [(count: Int, continuation: CheckedContinuation<Void, Never>)] = []
        var landing: Set<String> = []
        var failingDeletes = 0
        var deletesHeld = false
        var heldDeletes: [CheckedContinuation<Void, Never>] = []
        var deleteWaiters: [CheckedContinuation<Void, Never>] = []
    }
    private let state = Mutex(State())
    /// What the test said to a ``Behaviour/stepped`` upload: bytes taken, or nil for done.
    private let steps = AsyncStream.makeStream(of: Int?.self)

    public init(default behaviour: Behaviour = .succeed(after: .zero)) {
        state.withLock { $0.defaultBehaviour = behaviour }
    }

    public func behave(_ behaviour: Behaviour, forMediaID mediaID: MediaID) {
        state.withLock { $0.behaviours[mediaID.rawValue] = behaviour }
    }

    /// Uploads that `matches` (and whose media id has no behaviour of its own) behave so; earlier rules win.
    public func behave(_ behaviour: Behaviour, when matches: @escaping @Sendable (MediaObject) -> Bool) {
        state.withLock { $0.rules.append((matches, behaviour)) }
    }

    /// The upload told ``Behaviour/stepped`` has taken `bytes` bytes.
    public func take(_ bytes: Int) { steps.continuation.yield(bytes) }

    /// The upload told ``Behaviour/stepped`` is complete.
    public func finish() { steps.continuation.yield(nil) }

    public var maxInFlight: Int { state.withLock { $0.maxInFlight } }
    public var inFlight: Int { state.withLock { $0.inFlight } }
    public var stored: Set<String> { state.withLock { $0.stored } }
    public var deleted: [String] { state.withLock { $0.deleted } }
    /// The media whose upload saw its cancellation.
    public var sawCancellation: Set<MediaID> { state.withLock { Set($0.sawCancellation.map(MediaID.init(rawValue:))) } }
    public func calls(_ mediaID: MediaID) -> Int { state.withLock { $0.calls[mediaID.rawValue] ?? 0 } }

    /// Returns once `count` uploads are in flight at the same time.
    public func waitUntilInFlight(_ count: Int) async {
        await withCheckedContinuation { continuation in
            let now = state.withLock { state -> Bool in
                if state.inFlight >= count { return true }
                state.waiters.append((count, continuation))
                return false
            }
            if now { continuation.resume() }
        }
    }

    private static func mediaID(of key: String) -> String {
        String(key.dropFirst("media/".count).prefix { $0 != "." })
    }

    public func put(_ object: MediaObject, progress: @escaping BytesTaken) async throws -> String {
        let mediaID = Self.mediaID(of: object.key)
        let (behaviour, call, ready) = state.withLock { state in
            state.calls[mediaID, default: 0] += 1
            state.inFlight += 1
            state.maxInFlight = max(state.maxInFlight, state.inFlight)
            let ready = state.waiters.filter { $0.count <= state.inFlight }
            state.waiters.removeAll { $0.count <= state.inFlight }
            let behaviour = state.behaviours[mediaID] ?? state.rules.first { $0.matches(object) }?.behaviour ?? state.defaultBehaviour
            return (behaviour, state.calls[mediaID]!, ready.map(\.continuation))
        }
        for waiter in ready { waiter.resume() }
        defer { state.withLock { $0.inFlight -= 1 } }
        do {
            switch behaviour {
            case .succeed(let latency):
                if latency > .zero { try await Task.sleep(for: latency) }
            case .failOnce(let latency):
                if latency > .zero { try await Task.sleep(for: latency) }
                if call == 1 { throw MediaStoreError.transient("503 once", statusCode: 503) }
            case .failTransiently:
                throw MediaStoreError.transient("503 always", statusCode: 503)
            case .failPermanently:
                throw MediaStoreError.permanent("403 SignatureDoesNotMatch", statusCode: 403)
            case .hang, .landsWhenCancelled:
                try await Task.sleep(for: .seconds(3600))
            case .succeedTogether(let count, let latency):
                await waitUntilInFlight(count)
                try await Task.sleep(for: latency)
            case .paced(let duration):
                for step in 1...8 {
                    try await Task.sleep(for: duration / 8)
                    progress(object.size * step / 8)
                }
            case .halfThenHang:
                progress(object.size / 2)
                try await Task.sleep(for: .seconds(3600))
            case .stepped:
                var said = steps.stream.makeAsyncIterator()
                while let step = await said.next() {
                    guard let bytes = step else { break }
                    progress(bytes)
                }
                try Task.checkCancellation()
            }
        } catch is CancellationError {
            state.withLock { state in
                state.sawCancellation.insert(mediaID)
                if case .landsWhenCancelled = behaviour { state.landing.insert(object.key) }
            }
            throw CancellationError()
        }
        state.withLock { _ = $0.stored.insert(object.key) }
        return "test://\(object.key)"
    }

    /// The store completes the PUTs it had whole when they were cancelled, as S3 does with a body it received.
    public func landCancelled() {
        state.withLock { state in
            state.stored.formUnion(state.landing)
            state.landing = []
        }
    }

    /// The next `count` deletes fail (transiently).
    public func failDeletes(_ count: Int) { state.withLock { $0.failingDeletes = count } }

    /// Deletes wait inside the store until ``releaseDeletes()``.
    public func holdDeletes() { state.withLock { $0.deletesHeld = true } }

    public func releaseDeletes() {
        let held = state.withLock { state in
            state.deletesHeld = false
            defer { state.heldDeletes = [] }
            return state.heldDeletes
        }
        for continuation in held { continuation.resume() }
    }

    /// Returns once a delete is waiting inside the store (``holdDeletes()``).
    public func waitUntilDeleteHeld() async {
        await withCheckedContinuation { continuation in
            let now = state.withLock { state -> Bool in
                if !state.heldDeletes.isEmpty { return true }
                state.deleteWaiters.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }

    public func delete(key: String) async throws {
        let fail = state.withLock { state -> Bool in
            guard state.failingDeletes > 0 else { return false }
            state.failingDeletes -= 1
            return true
        }
        if fail { throw MediaStoreError.transient("503 on delete", statusCode: 503) }
        await withCheckedContinuation { continuation in
            let (go, waiters) = state.withLock { state -> (Bool, [CheckedContinuation<Void, Never>]) in
                guard state.deletesHeld else { return (true, []) }
                state.heldDeletes.append(continuation)
                defer { state.deleteWaiters = [] }
                return (false, state.deleteWaiters)
            }
            for waiter in waiters { waiter.resume() }
            if go { continuation.resume() }
        }
        state.withLock { state in
            state.stored.remove(key)
            state.deleted.append(key)
        }
    }

    /// Keeps the bytes in memory: staged media of a PostgreSQL Herald land here.
    public func write<Chunks: AsyncSequence>(_ chunks: Chunks, key: String, contentType: String) async throws -> Int
    where Chunks.Element == [UInt8] {
        var bytes: [UInt8] = []
        for try await chunk in chunks { bytes += chunk }
        state.withLock { _ = $0.stored.insert(key) }
        return bytes.count
    }

    /// Behaves as ``put(_:progress:)`` does for the object. The staged key is not looked for: replicas in one test
    /// have a store each, standing for one shared store.
    public func copy(_ object: MediaObject, fromStaged stagedKey: String, progress: @escaping BytesTaken) async throws -> String {
        try await put(object, progress: progress)
    }

    public func list(prefix: String) async throws -> [StoredEntry] {
        state.withLock { $0.stored.filter { $0.hasPrefix(prefix) }.sorted().map { StoredEntry(key: $0, modified: 0) } }
    }

    public func url(for key: String) -> String { "test://\(key)" }

    public func exists(key: String) async throws -> Bool { state.withLock { $0.stored.contains(key) } }
}

/// The byte counts a store reported for one upload, in order.
public final class BytesLog: Sendable {
    private let values = Mutex<[Int]>([])

    public init() {}

    public var counts: [Int] { values.withLock { $0 } }

    /// A ``BytesTaken`` that records.
    public var record: BytesTaken { { count in self.values.withLock { $0.append(count) } } }
}
