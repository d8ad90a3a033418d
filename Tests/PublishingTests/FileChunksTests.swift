import FileReading
import Foundation
import NIOCore
import Synchronization
import Testing

/// `FileChunks`: the one reader of a file as a request body (the S3 store's uploads and the client's).
@Suite("A file read as chunks")
struct FileChunksTests {
    struct Refused: Error, Equatable {
        let cause: FileReadError
    }

    @Test("the whole file in chunks of the size asked, the bytes before each read reported")
    func chunks() async throws {
        let staged = try StagedFile(size: 100_000)
        defer { try? FileManager.default.removeItem(atPath: staged.directory) }
        let file = try ReadableFile(path: staged.path)
        #expect(file.size == 100_000)
        let heard = Mutex<[Int]>([])
        let chunks = FileChunks(file: file, chunkSize: 32_768, progress: { bytes in heard.withLock { $0.append(bytes) } }) { Refused(cause: $0) }
        var read = Data()
        var sizes: [Int] = []
        for try await chunk in chunks {
            sizes.append(chunk.readableBytes)
            read.append(contentsOf: chunk.readableBytesView)
        }
        #expect(sizes == [32_768, 32_768, 32_768, 1_696])
        #expect(read == (try Data(contentsOf: URL(fileURLWithPath: staged.path))))
        #expect(heard.withLock { $0 } == [32_768, 65_536, 98_304, 100_000])
    }

    @Test("a file cut short after it was opened fails with the caller's error, naming where it ended")
    func shortened() async throws {
        let staged = try StagedFile(size: 100_000)
        defer { try? FileManager.default.removeItem(atPath: staged.directory) }
        let file = try ReadableFile(path: staged.path)
        #expect(truncate(staged.path, 40_000) == 0)
        var read = 0
        await #expect(throws: Refused(cause: .shortened(at: 40_000))) {
            for try await chunk in FileChunks(file: file, chunkSize: 32_768, progress: { _ in }, failure: { Refused(cause: $0) }) {
                read += chunk.readableBytes
            }
        }
        // The second read is short (40,000 - 32,768 bytes) but not empty; the next, at 40,000, finds the end.
        #expect(read == 40_000)
    }

    @Test("a missing path, and a directory, are refused at opening")
    func refusedAtOpening() throws {
        let staged = try StagedFile(size: 1)
        defer { try? FileManager.default.removeItem(atPath: staged.directory) }
        #expect(throws: FileReadError.cannotOpen(errno: ENOENT)) { try ReadableFile(path: staged.directory + "/missing") }
        #expect(throws: FileReadError.notARegularFile) { try ReadableFile(path: staged.directory) }
    }

    @Test("a cancelled reader reads no further")
    func cancelled() async throws {
        let staged = try StagedFile(size: 100_000)
        defer { try? FileManager.default.removeItem(atPath: staged.directory) }
        let chunks = FileChunks(file: try ReadableFile(path: staged.path), chunkSize: 32_768, progress: { _ in }) { Refused(cause: $0) }
        let reader = Task {
            var iterator = chunks.makeAsyncIterator()
            withUnsafeCurrentTask { $0?.cancel() }
            return try await iterator.next()
        }
        await #expect(throws: CancellationError.self) { try await reader.value }
    }
}
