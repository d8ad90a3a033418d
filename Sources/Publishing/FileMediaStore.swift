import NIOFileSystem
import NIOPosix
import Platform

// Both owners of `struct stat` imported: see FileReading/FileChunks.swift.
#if canImport(CNIOLinux)
    import CNIOLinux
#endif

/// The embedded media store: objects are files under a root directory (`file://<data-dir>/objects`).
///
/// All file I/O runs on NIO's blocking-I/O thread pool (NIOFileSystem, or system calls in one work item), so the
/// cooperative pool is never blocked.
///
/// ``put(_:)`` links the staged file (`link(2)`) to a temporary name in the object's directory
/// (`.<name>.partial-<random>`) when both are on one filesystem: no byte is read or written, and the staged file,
/// fsynced at ingest, is already durable. Otherwise (another filesystem, or ``linksWhenPossible`` off) it copies the
/// staged file in chunks of ``chunkSize`` bytes into that temporary file, checking for cancellation between chunks,
/// and syncs it. Either way it renames the temporary file over the final name (atomic: readers see the old object or
/// the new one, never a partial one), then syncs the directory so the rename survives a crash (``DirectorySync``:
/// one `fsync` for the renames that arrive together). On any error or cancellation the temporary file is removed.
/// The bytes copied so far are visible as the size of the temporary file.
///
/// A link, not a rename: the staged file stays until its post is published (a resumed or re-published job needs it),
/// and removing it then leaves the object, which owns the bytes from then on.
///
/// ``delete(key:)`` completes even when the calling task is already cancelled: it is the cleanup
/// step of a failed or cancelled job.
public struct FileMediaStore: MediaStore {
    /// The absolute path of the directory that holds the objects (created on the first ``put(_:)``).
    public let root: String
    /// The base of the URLs returned, without a trailing slash; `nil` for `file://` URLs.
    public let publicBaseURL: String?
    /// How many bytes ``put(_:)`` copies per read and write.
    public let chunkSize: Int
    /// Whether ``put(_:)`` links the staged file into place when it can, rather than copying it.
    public let linksWhenPossible: Bool

    private let fileSystem: FileSystem
    /// Syncs the objects' directories for the renames that arrive together.
    private let directorySync = DirectorySync()

    /// A store whose objects live under `root` (made absolute against the current directory).
    ///
    /// - Parameters:
    ///   - root: The directory of the objects; created, with its parents, on the first ``put(_:)``.
    ///   - publicBaseURL: When set (and not empty), object URLs are `publicBaseURL/KEY`;
    ///     otherwise `file://` URLs of the objects themselves.
    ///   - chunkSize: How many bytes to copy at once; cancellation is checked between chunks.
    ///   - linksWhenPossible: Link the staged file into place when it is on the same filesystem (`false`: always copy).
    public init(root: String, publicBaseURL: String? = nil, chunkSize: Int = 256 << 10, linksWhenPossible: Bool = true) {
        precondition(chunkSize > 0, "chunkSize must be positive")
        self.root = Self.absolutePath(root)
        if let publicBaseURL {
            let trimmed = String(publicBaseURL.reversed().drop(while: { $0 == "/" }).reversed())
            self.publicBaseURL = trimmed.isEmpty ? nil : trimmed
        } else {
            self.publicBaseURL = nil
        }
        self.chunkSize = chunkSize
        self.linksWhenPossible = linksWhenPossible
        self.fileSystem = .shared
    }

    // MARK: - MediaStore

    public func url(for key: String) -> String {
        let encodedKey = percentEncoded(key.drop(while: { $0 == "/" }), keeping: .path)
        if let publicBaseURL {
            return publicBaseURL + "/" + encodedKey
        }
        return "file://" + percentEncoded(self.root, keeping: .path) + "/" + encodedKey
    }

    public func put(_ object: MediaObject, progress: @escaping BytesTaken) async throws -> String {
        try Task.checkCancellation()
        let location = try self.location(of: object.key)
        guard object.size >= 0 else {
            throw MediaStoreError.permanent("Invalid size \(object.size) for '\(object.key)'.")
        }
        // The common case, a staged file on the same filesystem, in one trip to the blocking-I/O pool.
        if linksWhenPossible, try await Self.placeByLink(object, at: location, syncing: directorySync) {
            progress(object.size)
            return self.url(for: object.key)
        }
        // Otherwise a copy: another filesystem (the link just failed), or links are off.
        let fileSystem = self.fileSystem
        let partialName = ".\(location.name).partial-\(Self.randomSuffix())"
        let partialPath = location.directory + "/" + partialName

        // A missing staged file is a permanent failure, and nothing has been created yet.
        let source: ReadFileHandle
        do {
            source = try await fileSystem.openFile(forReadingAt: FilePath(object.stagedFile), options: OpenOptions.Read())
        } catch let error as FileSystemError where error.code == .notFound {
            throw MediaStoreError.stagedFileMissing(object.stagedFile)
        } catch {
            throw Self.storeError(error, "Cannot open the staged file '\(object.stagedFile)'")
        }

        var destination: WriteFileHandle?
        var directory: DirectoryFileHandle?
        do {
            let info = try await source.info()
            guard info.type == .regular else {
                throw MediaStoreError.permanent("The staged file '\(object.stagedFile)' is a \(info.type), not a regular file.")
            }
            guard info.size == Int64(object.size) else {
                throw MediaStoreError.sizeMismatch(key: object.key, expected: object.size, actual: Int(info.size))
            }

            try await fileSystem.createDirectory(
                at: FilePath(location.directory),
                withIntermediateDirectories: true,
                permissions: nil
            )
            let directoryHandle = try await fileSystem.openDirectory(
                atPath: FilePath(location.directory),
                options: OpenOptions.Directory()
            )
            directory = directoryHandle
            // Not "transactional": NIO would create an invisible O_TMPFILE instead, and the copy
            // would not be observable. Exclusive: the random name is ours alone.
            let partial = try await fileSystem.openFile(
                forWritingAt: FilePath(partialPath),
                options: OpenOptions.Write(
                    existingFile: .none,
                    newFile: OpenOptions.NewFile(permissions: nil, transactionalCreation: false)
                )
            )
            destination = partial

            let copied = try await self.copy(from: source, to: partial, atMost: Int64(object.size), progress: progress)
            guard copied == Int64(object.size) else {
                throw MediaStoreError.sizeMismatch(key: object.key, expected: object.size, actual: Int(copied))
            }

            try Task.checkCancellation()
            try await partial.synchronize()
            // Stays in `destination` until closed: a handle dropped while open is a fatal error in
            // NIOFileSystem, and a cancelled task's `close()` is refused, so the catch closes it again.
            try await partial.close()

            try Task.checkCancellation()
            let finalName = location.name
            try await directoryHandle.withUnsafeDescriptor { descriptor in
                // Replaces an existing object atomically (an idempotent re-run).
                guard renameat(descriptor.rawValue, partialName, descriptor.rawValue, finalName) == 0 else {
                    throw Self.errnoError(errno, "Cannot rename '\(partialPath)' to '\(location.path)'")
                }
            }
        } catch {
            // NIOFileSystem refuses new work from a cancelled task (the thread pool drops work items
            // submitted by it), so the cleanup runs in a task of its own, which is not cancelled.
            let (partial, directoryHandle) = (destination, directory)
            await Self.uncancellable {
                if let partial {
                    try? await partial.close(makeChangesVisible: false)
                }
                _ = try? await fileSystem.removeItem(at: FilePath(partialPath), strategy: .platformDefault, recursively: false)
                try? await directoryHandle?.close()
                try? await source.close()
            }
            throw Self.storeError(error, "Cannot store '\(object.key)' at '\(location.path)'")
        }

        // The object is in place: close what is open, then make the rename durable as `placeByLink` does (one
        // `fsync` with the other renames into the directory), even if cancelled meanwhile: DirectorySync's errors are
        // MediaStoreErrors, reported as they are.
        let directoryHandle = directory
        await Self.uncancellable {
            try? await directoryHandle?.close()
            try? await source.close()
        }
        try await directorySync.sync(location.directory)
        return self.url(for: object.key)
    }

    public func write<Chunks: AsyncSequence>(_ chunks: Chunks, key: String, contentType: String) async throws -> Int
    where Chunks.Element == [UInt8] {
        try Task.checkCancellation()
        let location = try self.location(of: key)
        // Untyped: a typed-throws closure returning Void crashes Swift 6.3.1's LifetimeDependenceDiagnostics pass.
        try await NIOThreadPool.singleton.runIfActive { () throws -> Void in try Self.makeDirectories(location.directory) }
        let size: Int
        do {
            let file = try WritableFile(creating: location.directory + "/.\(location.name).partial-\(Self.randomSuffix())", mode: 0o644)
            size = try await file.fill(with: chunks, batchSize: chunkSize, renamingTo: location.path)
        } catch let error as WritableFile.Failure {
            throw Self.errnoError(error.code, "Cannot \(error.operation)")
        }
        try await directorySync.sync(location.directory)
        return size
    }

    public func copy(_ object: MediaObject, fromStaged stagedKey: String, progress: @escaping BytesTaken) async throws -> String {
        var linked = object
        linked.stagedFile = try location(of: stagedKey).path
        return try await put(linked, progress: progress)
    }

    public func list(prefix: String) async throws -> [StoredEntry] {
        let folder = prefix.split(separator: "/", omittingEmptySubsequences: true).dropLast(prefix.hasSuffix("/") ? 0 : 1)
        let directory = ([root] + folder.map(String.init)).joined(separator: "/")
        let keyPrefix = folder.isEmpty ? "" : folder.joined(separator: "/") + "/"
        // A directory listing and a stat per file: blocking calls, in one work item on NIO's thread pool.
        return try await NIOThreadPool.singleton.runIfActive { () throws(MediaStoreError) -> [StoredEntry] in
            guard let stream = opendir(directory) else {
                if errno == ENOENT { return [] }
                throw Self.errnoError(errno, "Cannot list '\(directory)'")
            }
            defer { closedir(stream) }
            var entries: [StoredEntry] = []
            while let entry = readdir(stream) {
                let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix(while: { $0 != 0 }), as: UTF8.self) }
                // Dot names are this store's temporary files, never objects.
                guard !name.hasPrefix("."), (keyPrefix + name).hasPrefix(prefix) else { continue }
                var info = stat()
                guard lstat(directory + "/" + name, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { continue }
                entries.append(StoredEntry(key: keyPrefix + name, modified: Double(info.st_mtim.tv_sec)))
            }
            return entries
        }
    }

    public func delete(key: String) async throws {
        let path = try self.location(of: key).path
        let fileSystem = self.fileSystem
        // Deleting is how a failed or cancelled job cleans up: finish it even if the caller is cancelled.
        let result: Result<Void, any Error> = await Self.uncancellable {
            do {
                _ = try await fileSystem.removeItem(at: FilePath(path), strategy: .platformDefault, recursively: false)
                return .success(())
            } catch {
                return .failure(error)
            }
        }
        do {
            try result.get()
        } catch {
            throw Self.storeError(error, "Cannot delete '\(path)'", cancellable: false)
        }
    }

    public func exists(key: String) async throws -> Bool {
        let path = try self.location(of: key).path
        do {
            let info = try await self.fileSystem.info(forFileAt: FilePath(path), infoAboutSymbolicLink: false)
            return info?.type == .regular
        } catch {
            throw Self.storeError(error, "Cannot look up '\(path)'")
        }
    }

    // MARK: - Linking and copying

    /// Links the staged file into place as ``put(_:progress:)`` does (check, link to a temporary name, rename over the
    /// final name), every system call in one work item on NIO's blocking-I/O pool rather than a hop each: for small
    /// media the hops, not the bytes, were the cost; then syncs the directory, in one `fsync` with the other objects
    /// renamed into it meanwhile (``DirectorySync``). False, having changed nothing, when the file cannot be linked
    /// (another filesystem): the caller copies it instead.
    private static func placeByLink(_ object: MediaObject, at location: Location, syncing directorySync: DirectorySync) async throws -> Bool {
        try Task.checkCancellation()
        let partialName = ".\(location.name).partial-\(randomSuffix())"
        let placed = try await NIOThreadPool.singleton.runIfActive { () throws(MediaStoreError) -> Bool in
            var status = stat()
            guard stat(object.stagedFile, &status) == 0 else {
                if errno == ENOENT { throw .stagedFileMissing(object.stagedFile) }
                throw errnoError(errno, "Cannot read the staged file '\(object.stagedFile)'")
            }
            guard (status.st_mode & S_IFMT) == S_IFREG else {
                throw .permanent("The staged file '\(object.stagedFile)' is not a regular file.")
            }
            guard status.st_size == off_t(object.size) else {
                throw .sizeMismatch(key: object.key, expected: object.size, actual: Int(status.st_size))
            }
            try makeDirectories(location.directory)
            let directory = open(location.directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            guard directory >= 0 else { throw errnoError(errno, "Cannot open the directory '\(location.directory)'") }
            defer { close(directory) }
            guard linkat(AT_FDCWD, object.stagedFile, directory, partialName, 0) == 0 else { return false }
            _ = fchmodat(directory, partialName, 0o644, 0)
            guard renameat(directory, partialName, directory, location.name) == 0 else {
                let code = errno
                _ = unlinkat(directory, partialName, 0)
                throw errnoError(code, "Cannot rename '\(partialName)' to '\(location.path)'")
            }
            // A link renamed over a link to the same file does nothing and leaves the temporary name (POSIX): remove it.
            _ = unlinkat(directory, partialName, 0)
            return true
        }
        guard placed else { return false }
        // The rename made durable, with whoever else renamed into the directory meanwhile.
        try await directorySync.sync(location.directory)
        return true
    }

    /// `mkdir -p` with system calls, for ``placeByLink(_:at:syncing:)``'s one work item.
    private static func makeDirectories(_ path: String) throws(MediaStoreError) {
        if mkdir(path, 0o755) == 0 || errno == EEXIST { return }
        guard errno == ENOENT, let slash = path.lastIndex(of: "/"), slash != path.startIndex else {
            throw errnoError(errno, "Cannot create the directory '\(path)'")
        }
        try makeDirectories(String(path[..<slash]))
        guard mkdir(path, 0o755) == 0 || errno == EEXIST else { throw errnoError(errno, "Cannot create the directory '\(path)'") }
    }

    /// Copies `source` into `destination` chunk by chunk, telling `progress` after each; stops once more than `limit`
    /// bytes were copied (the staged file grew). Returns the number of bytes copied.
    private func copy(
        from source: ReadFileHandle, to destination: WriteFileHandle, atMost limit: Int64, progress: BytesTaken
    ) async throws -> Int64 {
        let chunkLength = ByteCount.bytes(Int64(self.chunkSize))
        var offset: Int64 = 0
        while offset <= limit {
            try Task.checkCancellation()
            let chunk = try await source.readChunk(fromAbsoluteOffset: offset, length: chunkLength)
            try Task.checkCancellation()
            // Writes the whole chunk; 0 bytes means the chunk was empty: the end of the file.
            let written = try await destination.write(contentsOf: chunk, toAbsoluteOffset: offset)
            if written == 0 {
                break
            }
            offset += written
            progress(Int(offset))
        }
        return offset
    }

    // MARK: - Paths

    private struct Location {
        /// The object's absolute path.
        var path: String
        /// The directory that holds it.
        var directory: String
        /// Its file name.
        var name: String
    }

    /// Where the object of `key` lives; throws for keys that are empty, absolute, contain `.` or
    /// `..` components, or a component starting with a dot (reserved for temporary files).
    private func location(of key: String) throws -> Location {
        guard !key.isEmpty else {
            throw MediaStoreError.invalidKey(key, reason: "it is empty")
        }
        guard !key.utf8.contains(0) else {
            throw MediaStoreError.invalidKey(key, reason: "it contains a NUL byte")
        }
        let components = key.split(separator: "/", omittingEmptySubsequences: false)
        for component in components {
            if component.isEmpty {
                throw MediaStoreError.invalidKey(key, reason: "it has an empty path component")
            }
            if component.hasPrefix(".") {
                throw MediaStoreError.invalidKey(key, reason: "a path component starts with a dot")
            }
        }
        let name = String(components[components.count - 1])
        let directory = ([self.root] + components.dropLast().map(String.init)).joined(separator: "/")
        return Location(path: directory + "/" + name, directory: directory, name: name)
    }

    /// `path` made absolute against the current directory, without `.` or empty components.
    private static func absolutePath(_ path: String) -> String {
        var full = path
        if !path.hasPrefix("/") {
            var buffer = [CChar](repeating: 0, count: 4097)
            if getcwd(&buffer, buffer.count) != nil {
                let cwd = String(decoding: buffer.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }, as: UTF8.self)
                full = cwd + "/" + path
            }
        }
        let components = full.split(separator: "/").filter { $0 != "." }
        return (full.hasPrefix("/") ? "/" : "") + components.joined(separator: "/")
    }

    private static func randomSuffix() -> String {
        let alphabet = Array("abcdefghijklmnopqrstuvwxyz0123456789")
        return String((0..<12).map { _ in alphabet.randomElement()! })
    }

    // MARK: - Errors and cancellation

    /// Runs `body` in a new task, which does not inherit the caller's cancellation, and waits for it.
    private static func uncancellable<R: Sendable>(_ body: @escaping @Sendable () async -> R) async -> R {
        await Task { await body() }.value
    }

    /// The error to throw for `error`: `CancellationError` when the task was cancelled (whatever
    /// failed as a consequence), a ``MediaStoreError`` as it is, anything else classified.
    private static func storeError(_ error: any Error, _ context: String, cancellable: Bool = true) -> any Error {
        if error is CancellationError || (cancellable && Task.isCancelled) {
            return CancellationError()
        }
        if let error = error as? MediaStoreError {
            return error
        }
        if let error = error as? FileSystemError {
            switch error.code {
            case .permissionDenied, .invalidArgument, .unsupported, .notEmpty:
                return MediaStoreError.permanent("\(context): \(error.code): \(error.message)")
            default:
                return MediaStoreError.transient("\(context): \(error.code): \(error.message)")
            }
        }
        return MediaStoreError.transient("\(context): \(error)")
    }

    /// A ``MediaStoreError`` for a failed system call that set `errno` to `code`.
    static func errnoError(_ code: Int32, _ context: String) -> MediaStoreError {
        let message = "\(context): \(String(cString: strerror(code))) (errno \(code))"
        switch code {
        case ENOSPC, EDQUOT, EFBIG:
            return .insufficientStorage(message)
        case EACCES, EPERM, EROFS, EISDIR, ENOTDIR, EINVAL, ENAMETOOLONG, ELOOP, EXDEV:
            return .permanent(message)
        default:
            return .transient(message)
        }
    }
}
