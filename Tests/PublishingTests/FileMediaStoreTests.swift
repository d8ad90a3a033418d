import HeraldTestSupport
import NIOFileSystem
import Platform
import Publishing
import Testing

@Suite("FileMediaStore")
struct FileMediaStoreTests {
    // MARK: - put, url, exists, delete

    @Test("put copies the bytes exactly and returns the file:// URL of the object")
    func putCopiesBytesExactly() async throws {
        try await withTemporaryDirectory { dir in
            // Several MiB and not a multiple of the chunk size, so the last chunk is a short one.
            let bytes = randomBytes(count: (3 << 20) + 12_345)
            let staged = dir + "/staged-1"
            try await write(bytes, to: staged)
            // Copied (not linked), so the bytes go chunk by chunk.
            let store = FileMediaStore(root: dir + "/objects", chunkSize: 64 << 10, linksWhenPossible: false)
            let object = MediaObject(
                mediaID: "m1", fileExtension: "jpg", stagedFile: staged, size: bytes.count,
                sha256: "", contentType: "image/jpeg"
            )
            #expect(object.key == "media/m1.jpg")
            #expect(try await store.exists(key: object.key) == false)

            let reported = BytesLog()
            let url = try await store.put(object, progress: reported.record)

            // A count after each chunk, growing to the size.
            #expect(reported.counts == Array(stride(from: 64 << 10, to: bytes.count, by: 64 << 10)) + [bytes.count])
            #expect(url == "file://\(dir)/objects/media/m1.jpg")
            #expect(url == store.url(for: object.key))
            let copied = try await read(dir + "/objects/media/m1.jpg")
            #expect(copied.count == bytes.count)
            #expect(copied == bytes)
            #expect(try await store.exists(key: object.key))
            // Only the object: no temporary file left beside it.
            #expect(try await names(in: dir + "/objects/media") == ["m1.jpg"])
            // The staged file is left alone.
            #expect(try await read(staged) == bytes)
        }
    }

    @Test("on one filesystem put links the staged file (same inode, no bytes copied); otherwise it copies", arguments: [true, false])
    func linksOrCopies(links: Bool) async throws {
        try await withTemporaryDirectory { dir in
            let bytes = randomBytes(count: 100_000)
            let staged = dir + "/staged-1"
            try await write(bytes, to: staged)
            let store = FileMediaStore(root: dir + "/objects", linksWhenPossible: links)
            let object = MediaObject(
                mediaID: "m1", fileExtension: "png", stagedFile: staged, size: bytes.count, sha256: "", contentType: "image/png")
            let reported = BytesLog()
            _ = try await store.put(object, progress: reported.record)
            // A link takes every byte at once; so does a copy of a file smaller than a chunk.
            #expect(reported.counts == [bytes.count])
            var stagedInfo = stat()
            var objectInfo = stat()
            #expect(stat(staged, &stagedInfo) == 0)
            #expect(stat(dir + "/objects/media/m1.png", &objectInfo) == 0)
            #expect((stagedInfo.st_ino == objectInfo.st_ino) == links)
            #expect(objectInfo.st_nlink == (links ? 2 : 1))
            #expect(objectInfo.st_mode & 0o777 == 0o644)
            // Removing the staged file (what a publish does after its commit) leaves the object whole.
            #expect(unlink(staged) == 0)
            #expect(try await read(dir + "/objects/media/m1.png") == bytes)
            #expect(try await names(in: dir + "/objects/media") == ["m1.png"])
        }
    }

    @Test("write stages a body as an object (listed, then linked into place by copy); a body that fails part way leaves nothing")
    func writeListCopy() async throws {
        try await withTemporaryDirectory { dir in
            let store = FileMediaStore(root: dir + "/objects", chunkSize: 64 << 10)
            let bytes = randomBytes(count: 300_000)
            let written = try await store.write(chunked(bytes, by: 50_000), key: "staging/m1.png", contentType: "image/png")
            #expect(written == bytes.count)
            #expect(try await read(dir + "/objects/staging/m1.png") == bytes)
            #expect(try await store.list(prefix: "staging/").map(\.key) == ["staging/m1.png"])
            #expect(try await store.list(prefix: "media/").isEmpty)

            let object = MediaObject(mediaID: "m1", fileExtension: "png", stagedFile: "", size: bytes.count, sha256: "", contentType: "image/png")
            let reported = BytesLog()
            #expect(try await store.copy(object, fromStaged: "staging/m1.png", progress: reported.record) == store.url(for: "media/m1.png"))
            #expect(reported.counts == [bytes.count])
            var staged = stat()
            var published = stat()
            #expect(stat(dir + "/objects/staging/m1.png", &staged) == 0 && stat(dir + "/objects/media/m1.png", &published) == 0)
            #expect(staged.st_ino == published.st_ino, "linked, not copied")

            // A body refused after two chunks: its error comes out as it was, and no object nor temporary file stays.
            struct Refused: Error {}
            let failing = AsyncThrowingStream<[UInt8], any Error> { continuation in
                continuation.yield(Array(bytes[0..<100_000]))
                continuation.yield(Array(bytes[100_000..<200_000]))
                continuation.finish(throwing: Refused())
            }
            await #expect(throws: Refused.self) { try await store.write(failing, key: "staging/m2.png", contentType: "image/png") }
            #expect(try await names(in: dir + "/objects/staging") == ["m1.png"])
            await #expect(throws: MediaStoreError.stagedFileMissing(dir + "/objects/staging/m2.png")) {
                try await store.copy(object, fromStaged: "staging/m2.png", progress: { _ in })
            }
        }
    }

    @Test("a relative root gives absolute file:// URLs")
    func relativeRootIsMadeAbsolute() async throws {
        let store = FileMediaStore(root: "./data//objects/")
        let cwd = try await FileSystem.shared.currentWorkingDirectory.string
        #expect(store.root == cwd + "/data/objects")
        #expect(store.url(for: "media/a.png") == "file://\(cwd)/data/objects/media/a.png")
        let spaced = FileMediaStore(root: "/srv/my objects")
        #expect(spaced.url(for: "media/a.png") == "file:///srv/my%20objects/media/a.png")
    }

    @Test("with a public base URL, put returns BASE/key", arguments: ["https://cdn.example.com/herald", "https://cdn.example.com/herald/"])
    func putWithPublicBaseURL(base: String) async throws {
        try await withTemporaryDirectory { dir in
            let bytes = randomBytes(count: 1000)
            let staged = dir + "/staged"
            try await write(bytes, to: staged)
            let store = FileMediaStore(root: dir + "/objects", publicBaseURL: base)
            let object = MediaObject(
                mediaID: "m2", fileExtension: "png", stagedFile: staged, size: bytes.count,
                sha256: "", contentType: "image/png"
            )

            let url = try await store.put(object)

            #expect(url == "https://cdn.example.com/herald/media/m2.png")
            #expect(store.url(for: "media/x.gif") == "https://cdn.example.com/herald/media/x.gif")
            // The object is still stored under the root.
            #expect(try await read(dir + "/objects/media/m2.png") == bytes)
        }
    }

    @Test("a second put of the same key overwrites the object")
    func rePutOverwrites() async throws {
        try await withTemporaryDirectory { dir in
            let store = FileMediaStore(root: dir + "/objects", chunkSize: 4096)
            let first = randomBytes(count: 50_000)
            let second = randomBytes(count: 20_000)
            try await write(first, to: dir + "/first")
            try await write(second, to: dir + "/second")
            let key = MediaObject.key(mediaID: "m3", fileExtension: "gif")

            let url1 = try await store.put(
                MediaObject(key: key, stagedFile: dir + "/first", size: first.count, sha256: "", contentType: "image/gif")
            )
            // The same put again (a resumed job) succeeds and changes nothing.
            let url2 = try await store.put(
                MediaObject(key: key, stagedFile: dir + "/first", size: first.count, sha256: "", contentType: "image/gif")
            )
            #expect(url1 == url2)
            #expect(try await read(dir + "/objects/" + key) == first)

            // Other bytes under the same key replace the object.
            let url3 = try await store.put(
                MediaObject(key: key, stagedFile: dir + "/second", size: second.count, sha256: "", contentType: "image/gif")
            )
            #expect(url3 == url1)
            #expect(try await read(dir + "/objects/" + key) == second)
            #expect(try await names(in: dir + "/objects/media") == ["m3.gif"])
        }
    }

    @Test("delete removes the object; deleting again, or a key never stored, succeeds")
    func deleteIsIdempotent() async throws {
        try await withTemporaryDirectory { dir in
            let bytes = randomBytes(count: 10_000)
            try await write(bytes, to: dir + "/staged")
            let store = FileMediaStore(root: dir + "/objects")
            let object = MediaObject(
                mediaID: "m4", fileExtension: "webp", stagedFile: dir + "/staged", size: bytes.count,
                sha256: "", contentType: "image/webp"
            )
            _ = try await store.put(object)
            #expect(try await store.exists(key: object.key))

            try await store.delete(key: object.key)

            #expect(try await store.exists(key: object.key) == false)
            #expect(try await FileSystem.shared.info(forFileAt: FilePath(dir + "/objects/media/m4.webp"), infoAboutSymbolicLink: true) == nil)
            try await store.delete(key: object.key)
            try await store.delete(key: "media/never-stored.jpg")
            // Deleting from a store whose root was never created succeeds too.
            try await FileMediaStore(root: dir + "/nowhere").delete(key: "media/x.jpg")
        }
    }

    @Test("delete completes even when the calling task is already cancelled (it is the cleanup path)")
    func deleteRunsInACancelledTask() async throws {
        try await withTemporaryDirectory { dir in
            let bytes = randomBytes(count: 1000)
            try await write(bytes, to: dir + "/staged")
            let store = FileMediaStore(root: dir + "/objects")
            let object = MediaObject(
                mediaID: "m5", fileExtension: "jpg", stagedFile: dir + "/staged", size: bytes.count,
                sha256: "", contentType: "image/jpeg"
            )
            _ = try await store.put(object)

            let (gate, open) = AsyncStream<Never>.makeStream()
            let deletion = Task {
                for await _ in gate {}  // ends when the gate opens (or at once if cancelled)
                #expect(Task.isCancelled)
                try await store.delete(key: object.key)
            }
            deletion.cancel()
            open.finish()
            try await deletion.value

            #expect(try await store.exists(key: object.key) == false)
        }
    }

    /// Why `delete` and the clean-up of `put` shield themselves: NIOFileSystem does no work at all
    /// for a task that is already cancelled. If this starts failing, NIO changed that behaviour.
    @Test("NIOFileSystem refuses to work for a cancelled task")
    func nioFileSystemRefusesCancelledTasks() async throws {
        let (gate, open) = AsyncStream<Never>.makeStream()
        let lookup = Task {
            for await _ in gate {}
            return try await FileSystem.shared.info(forFileAt: "/", infoAboutSymbolicLink: false)
        }
        lookup.cancel()
        open.finish()
        await #expect(throws: CancellationError.self) {
            _ = try await lookup.value
        }
    }

    // MARK: - Cancellation

    @Test("cancelling a put stops the copy early and leaves neither the object nor a partial file")
    func cancellingAPutStopsTheCopy() async throws {
        try await withTemporaryDirectory { dir in
            // A 256 MiB sparse staged file: instant to make, and its holes read as zeros.
            let total: Int64 = 256 << 20
            let staged = dir + "/big.mp4"
            try await FileSystem.shared.withFileHandle(forWritingAt: FilePath(staged)) { handle in
                try await handle.resize(to: .bytes(total))
            }
            // Copying, as across filesystems: a link would be done before it could be cancelled.
            let store = FileMediaStore(root: dir + "/objects", chunkSize: 16 << 10, linksWhenPossible: false)
            let object = MediaObject(
                mediaID: "big", fileExtension: "mp4", stagedFile: staged, size: Int(total),
                sha256: "", contentType: "video/mp4"
            )
            let mediaDirectory = dir + "/objects/media"

            let upload = Task { try await store.put(object) }

            // Wait (bounded) until the first chunk has landed in the temporary file.
            var partial: String?
            for _ in 0..<20_000 {
                if let name = try await names(in: mediaDirectory).first(where: { $0.contains(".partial-") }),
                    try await size(of: mediaDirectory + "/" + name) ?? 0 > 0
                {
                    partial = name
                    break
                }
                try await Task.sleep(for: .milliseconds(1))
            }
            let partialName = try #require(partial, "the copy never started (or finished before it was seen)")
            #expect(partialName.hasPrefix(".big.mp4.partial-"))
            // A hard link keeps the temporary file's bytes countable after the store removes its name.
            let captured = dir + "/captured"
            #expect(link(mediaDirectory + "/" + partialName, captured) == 0, "link: errno \(errno)")
            let writtenAtCancel = try #require(try await size(of: captured))

            upload.cancel()
            let result = await upload.result

            #expect(throws: CancellationError.self) { try result.get() }
            let writtenInAll = try #require(try await size(of: captured))
            #expect(writtenAtCancel > 0)
            #expect(writtenInAll >= writtenAtCancel)
            #expect(
                writtenInAll < total / 2,
                "the copy went on after the cancel: \(writtenInAll) of \(total) bytes written (\(writtenAtCancel) when cancelled)"
            )
            // Neither the object nor the temporary file is left.
            #expect(try await names(in: mediaDirectory) == [])
            #expect(try await store.exists(key: object.key) == false)
        }
    }

    @Test("a put in an already cancelled task throws CancellationError and creates nothing")
    func putInACancelledTask() async throws {
        try await withTemporaryDirectory { dir in
            let bytes = randomBytes(count: 1000)
            try await write(bytes, to: dir + "/staged")
            let store = FileMediaStore(root: dir + "/objects")
            let object = MediaObject(
                mediaID: "m6", fileExtension: "jpg", stagedFile: dir + "/staged", size: bytes.count,
                sha256: "", contentType: "image/jpeg"
            )
            let (gate, open) = AsyncStream<Never>.makeStream()
            let upload = Task {
                for await _ in gate {}
                return try await store.put(object)
            }
            upload.cancel()
            open.finish()

            await #expect(throws: CancellationError.self) { _ = try await upload.value }
            #expect(try await FileSystem.shared.info(forFileAt: FilePath(dir + "/objects"), infoAboutSymbolicLink: true) == nil)
        }
    }

    // MARK: - Failures

    @Test("a missing staged file is a permanent error")
    func missingStagedFile() async throws {
        try await withTemporaryDirectory { dir in
            let store = FileMediaStore(root: dir + "/objects")
            let object = MediaObject(
                mediaID: "m7", fileExtension: "jpg", stagedFile: dir + "/no-such-file", size: 10,
                sha256: "", contentType: "image/jpeg"
            )

            let error = await #expect(throws: MediaStoreError.self) { _ = try await store.put(object) }

            #expect(error?.isTransient == false)
            #expect(error?.errorCode == .stagedFileMissing)
            #expect(error?.message.contains(dir + "/no-such-file") == true)
            let stored = try await store.exists(key: object.key)
            #expect(stored == false)
        }
    }

    @Test("a staged file whose size is not the recorded one is a permanent error and leaves no object", arguments: [-1, 1])
    func sizeMismatch(difference: Int) async throws {
        try await withTemporaryDirectory { dir in
            let bytes = randomBytes(count: 100_000)
            try await write(bytes, to: dir + "/staged")
            let store = FileMediaStore(root: dir + "/objects", chunkSize: 8192)
            let object = MediaObject(
                mediaID: "m8", fileExtension: "png", stagedFile: dir + "/staged", size: bytes.count + difference,
                sha256: "", contentType: "image/png"
            )

            let error = await #expect(throws: MediaStoreError.self) { _ = try await store.put(object) }

            #expect(error?.isTransient == false)
            #expect(error?.errorCode == .sizeMismatch)
            #expect(error?.message.contains("\(bytes.count)") == true)
            #expect(try await store.exists(key: object.key) == false)
            #expect(try await names(in: dir + "/objects/media") == [])
        }
    }

    @Test(
        "keys that would leave the store's namespace are refused",
        arguments: ["", "/etc/passwd", "../outside", "media/../../x", "media//x", "media/.hidden", "media/"])
    func invalidKeys(key: String) async throws {
        try await withTemporaryDirectory { dir in
            try await write([1, 2, 3], to: dir + "/staged")
            let store = FileMediaStore(root: dir + "/objects")
            let object = MediaObject(key: key, stagedFile: dir + "/staged", size: 3, sha256: "", contentType: "image/png")

            let error = await #expect(throws: MediaStoreError.self) { _ = try await store.put(object) }
            #expect(error?.errorCode == .invalidKey)
            #expect(error?.isTransient == false)
            await #expect(throws: MediaStoreError.self) { try await store.delete(key: key) }
            await #expect(throws: MediaStoreError.self) { _ = try await store.exists(key: key) }
            #expect(try await names(in: dir) == ["staged"])
        }
    }

    // MARK: - MediaObject and MediaStoreError

    @Test("media keys are media/<id>.<ext>")
    func mediaKeys() {
        #expect(MediaObject.key(mediaID: "0193a1b2", fileExtension: "jpg") == "media/0193a1b2.jpg")
        #expect(MediaObject.key(mediaID: "0193a1b2", fileExtension: ".mp4") == "media/0193a1b2.mp4")
        #expect(MediaObject.key(mediaID: "0193a1b2", fileExtension: "") == "media/0193a1b2")
        let object = MediaObject(
            mediaID: "id", fileExtension: "webm", stagedFile: "/s", size: 1, sha256: "ab", contentType: "video/webm"
        )
        #expect(object.key == "media/id.webm")
    }

    @Test("errors say whether retrying can help, and why they happened")
    func errorClassification() {
        #expect(MediaStoreError.transient("connection reset").isTransient)
        #expect(MediaStoreError.timedOut(after: .seconds(60)).isTransient)
        #expect(MediaStoreError.timedOut(after: .seconds(60)).errorCode == .timedOut)
        #expect(MediaStoreError.permanent("AccessDenied", statusCode: 403).isTransient == false)
        #expect(MediaStoreError.permanent("AccessDenied", statusCode: 403).statusCode == 403)
        #expect(MediaStoreError.stagedFileMissing("/x").isTransient == false)
        #expect(MediaStoreError.sizeMismatch(key: "k", expected: 1, actual: 2).isTransient == false)
        #expect(MediaStoreError.checksumMismatch(key: "k", expected: "a", actual: "b").isTransient == false)

        for status in [429, 500, 502, 503, 504] {
            #expect(MediaStoreError.httpStatus(status, "SlowDown").isTransient, "status \(status)")
        }
        for status in [400, 401, 403, 404, 409, 413] {
            #expect(MediaStoreError.httpStatus(status, "AccessDenied").isTransient == false, "status \(status)")
        }
        let slowDown = MediaStoreError.httpStatus(503, "SlowDown: Please reduce your request rate.")
        #expect(slowDown.statusCode == 503)
        #expect(slowDown.message.contains("SlowDown"))
        #expect(String(describing: slowDown).contains("transient"))
        #expect(MediaStoreError.transient("x") != MediaStoreError.permanent("x"))
    }
}

// MARK: - Helpers

/// Runs `body` with a new empty directory, removed afterwards whatever happens.
private func withTemporaryDirectory(_ body: (String) async throws -> Void) async throws {
    let base = try await FileSystem.shared.temporaryDirectory.string
    let directory = try await FileSystem.shared.createTemporaryDirectory(
        template: FilePath(base + "/FileMediaStoreTests-XXXXXXXX")
    )
    do {
        try await body(directory.string)
    } catch {
        _ = try? await FileSystem.shared.removeItem(at: directory, strategy: .platformDefault, recursively: true)
        throw error
    }
    try await FileSystem.shared.removeItem(at: directory, strategy: .platformDefault, recursively: true)
}

private func randomBytes(count: Int) -> [UInt8] {
    var generator = SystemRandomNumberGenerator()
    var bytes = [UInt8](repeating: 0, count: count)
    bytes.withUnsafeMutableBytes { buffer in
        var offset = 0
        while offset < buffer.count {
            let word = generator.next()
            withUnsafeBytes(of: word) { wordBytes in
                let n = min(wordBytes.count, buffer.count - offset)
                buffer.baseAddress!.advanced(by: offset).copyMemory(from: wordBytes.baseAddress!, byteCount: n)
                offset += n
            }
        }
    }
    return bytes
}

private func write(_ bytes: [UInt8], to path: String) async throws {
    try await bytes.write(toFileAt: FilePath(path))
}

private func read(_ path: String) async throws -> [UInt8] {
    try await [UInt8](contentsOf: FilePath(path), maximumSizeAllowed: .mebibytes(64))
}

/// The size of the file at `path`, or `nil` if there is none.
private func size(of path: String) async throws -> Int64? {
    try await FileSystem.shared.info(forFileAt: FilePath(path), infoAboutSymbolicLink: true)?.size
}

/// The sorted names in `directory` (hidden ones included), or none if it does not exist.
private func names(in directory: String) async throws -> [String] {
    guard try await FileSystem.shared.info(forFileAt: FilePath(directory), infoAboutSymbolicLink: false) != nil else {
        return []
    }
    return try await FileSystem.shared.withDirectoryHandle(atPath: FilePath(directory)) { handle in
        var names: [String] = []
        for try await entry in handle.listContents() {
            names.append(entry.name.string)
        }
        return names.sorted()
    }
}

/// `bytes` as a body arrives: chunks of `size` bytes.
func chunked(_ bytes: [UInt8], by size: Int) -> AsyncStream<[UInt8]> {
    AsyncStream { continuation in
        for start in stride(from: 0, to: bytes.count, by: size) { continuation.yield(Array(bytes[start..<min(start + size, bytes.count)])) }
        continuation.finish()
    }
}
