import Dispatch
import Foundation
import Synchronization
import Testing

@testable import Publishing

@Suite("DirectorySync: one fsync for the renames that arrive together")
struct DirectorySyncTests {
    @Test("callers who arrive while a sync runs wait for the next one, and share it")
    func latecomersShareTheNextSync() async throws {
        let syncs = ScriptedSyncs(blockingFirst: true)
        let directory = DirectorySync(sync: syncs.sync)
        try await whileFirstSyncHeld(of: "/objects", by: directory, syncs) { group in
            // Whoever comes now needs another sync, started after them.
            for _ in 0..<3 { group.addTask { try await directory.sync("/objects") } }
            try await waitUntil { directory.waiting(for: "/objects") == 3 }
        }
        #expect(syncs.calls == ["/objects", "/objects"])
        #expect(directory.waiting(for: "/objects") == 0)

        // Idle again: the next caller gets a sync of its own.
        try await directory.sync("/objects")
        #expect(syncs.calls.count == 3)
    }

    @Test("a failed sync fails everyone who waited for it; the next caller's sync is a new one")
    func aFailureReachesEveryWaiter() async throws {
        let syncs = ScriptedSyncs(blockingFirst: false, failing: [1])
        let directory = DirectorySync(sync: syncs.sync)
        await #expect(throws: MediaStoreError.self) { try await directory.sync("/objects") }
        try await directory.sync("/objects")
        #expect(syncs.calls.count == 2)
    }

    @Test("different directories do not wait for each other")
    func directoriesAreIndependent() async throws {
        let syncs = ScriptedSyncs(blockingFirst: true)
        let directory = DirectorySync(sync: syncs.sync)
        try await whileFirstSyncHeld(of: "/a", by: directory, syncs) { _ in
            // "/a" is held; "/b" completes meanwhile.
            try await directory.sync("/b")
            #expect(syncs.calls == ["/a", "/b"])
        }
    }

    @Test("the real sync: fsync of the directory, and an error naming a missing one")
    func realDirectories() async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("herald-sync-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let directory = DirectorySync()
        try await directory.sync(path)
        let error = try await #require(throws: MediaStoreError.self) { try await directory.sync(path + "/missing") }
        #expect("\(error)".contains("missing"))
    }
}

/// A stand-in for `fsync`: records each call, can hold the first until released, and fails the calls it is told to.
private final class ScriptedSyncs: Sendable {
    private let state = Mutex<(calls: [String], held: Bool)>(([], false))
    private let blockingFirst: Bool
    private let failing: Set<Int>
    private let gate = DispatchSemaphore(value: 0)
    private let starts: AsyncStream<String>
    private let startsContinuation: AsyncStream<String>.Continuation

    init(blockingFirst: Bool, failing: Set<Int> = []) {
        self.blockingFirst = blockingFirst
        self.failing = failing
        (starts, startsContinuation) = AsyncStream.makeStream()
    }

    var calls: [String] { state.withLock { $0.calls } }

    /// The directory of the first sync, once it has started.
    func started() async -> String? {
        var iterator = starts.makeAsyncIterator()
        return await iterator.next()
    }

    /// Lets the held first sync return.
    func release() { gate.signal() }

    var sync: DirectorySync.Sync {
        { path in
            let number = self.state.withLock { state in
                state.calls.append(path)
                return state.calls.count
            }
            if number == 1 { self.startsContinuation.yield(path) }
            if number == 1 && self.blockingFirst { self.gate.wait() }
            return self.failing.contains(number) ? .failure(MediaStoreError.transient("sync \(number) failed")) : .success(())
        }
    }
}

/// Starts a sync of `path` and waits until its (first, held) `fsync` is under way; runs `body` meanwhile, with the
/// group to add callers to; then lets the held sync return and waits for everyone.
private func whileFirstSyncHeld(
    of path: String, by directory: DirectorySync, _ syncs: ScriptedSyncs,
    _ body: (inout ThrowingTaskGroup<Void, any Error>) async throws -> Void
) async throws {
    try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await directory.sync(path) }
        #expect(await syncs.started() == path)
        do {
            try await body(&group)
        } catch {
            syncs.release()  // else the group would wait for the held sync forever
            throw error
        }
        syncs.release()
        try await group.waitForAll()
    }
}

/// Waits, yielding, until `condition` holds; fails after ten seconds.
private func waitUntil(_ condition: () -> Bool) async throws {
    let deadline = ContinuousClock.now + .seconds(10)
    while !condition() {
        guard ContinuousClock.now < deadline else {
            Issue.record("the condition did not hold within 10 s")
            return
        }
        await Task.yield()
    }
}
