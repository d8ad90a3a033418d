import NIOPosix
import Platform
import Synchronization

/// Makes directory entries durable for everyone who asks at about the same time with one `fsync` of the directory.
///
/// ``FileMediaStore`` renames every object into the same directory and syncs it so the rename survives a crash: four
/// `fsync`s a post of four media, queued on the blocking-I/O pool's few threads. A rename is durable once a sync of its
/// directory has *started* after it, so a caller who arrives while a sync runs waits for the next one, and that one
/// covers everyone who arrived meanwhile. The syncs run on NIO's blocking-I/O pool, one after another per directory.
final class DirectorySync: Sendable {
    /// Syncs one directory: `fsync` of the directory opened read-only, by default.
    typealias Sync = @Sendable (_ path: String) -> Result<Void, MediaStoreError>

    private struct Directory {
        /// Callers whose entries the next sync covers.
        var waiting: [CheckedContinuation<Void, any Error>] = []
    }

    /// The directories with a sync under way (present while one runs), and who waits for the next.
    private let directories = Mutex<[String: Directory]>([:])
    private let sync: Sync

    init(sync: @escaping Sync = DirectorySync.fsyncDirectory) {
        self.sync = sync
    }

    /// Returns once a sync of `path` that started after this call has completed; throws its error.
    ///
    /// Not cancellable: the entry is already in place, and the caller needs to know whether it is durable.
    func sync(_ path: String) async throws {
        try await withCheckedThrowingContinuation { continuation in
            let start = directories.withLock { directories in
                let idle = directories[path] == nil
                directories[path, default: Directory()].waiting.append(continuation)
                return idle
            }
            if start {
                NIOThreadPool.singleton.submit { state in self.rounds(of: path, active: state == .active) }
            }
        }
    }

    /// How many callers wait for the next sync of `path` (for tests).
    func waiting(for path: String) -> Int {
        directories.withLock { $0[path]?.waiting.count ?? 0 }
    }

    /// Syncs `path` for those who wait, again while others arrived meanwhile, on one thread of the pool.
    private func rounds(of path: String, active: Bool) {
        while true {
            let waiting = directories.withLock { directories -> [CheckedContinuation<Void, any Error>] in
                let waiting = directories[path]?.waiting ?? []
                // No one left: the directory is idle again, and the next caller starts a sync of its own.
                directories[path] = waiting.isEmpty ? nil : Directory()
                return waiting
            }
            guard !waiting.isEmpty else { return }
            let result: Result<Void, any Error> =
                active ? sync(path).mapError { $0 } : .failure(MediaStoreError.transient("The blocking-I/O pool is shutting down."))
            for continuation in waiting { continuation.resume(with: result) }
        }
    }

    /// `fsync(2)` of the directory at `path`.
    @Sendable static func fsyncDirectory(_ path: String) -> Result<Void, MediaStoreError> {
        let directory = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard directory >= 0 else { return .failure(FileMediaStore.errnoError(errno, "Cannot open the directory '\(path)'")) }
        defer { close(directory) }
        guard fsync(directory) == 0 else { return .failure(FileMediaStore.errnoError(errno, "Cannot sync the directory '\(path)'")) }
        return .success(())
    }
}
