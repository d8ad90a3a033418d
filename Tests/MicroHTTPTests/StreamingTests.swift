import Foundation
import HTTPTypes
import MicroHTTP
import Synchronization
import Testing

@Suite("Streamed bodies on 127.0.0.1", .serialized, .timeLimit(.minutes(2)))
struct StreamingTests {
    @Test func aRequestBodyMayBeReadByAnotherTask() async throws {
        var router = Router()
        router.post("/count") { request in
            // `RequestBody` is `Sendable`: one consumer, in whichever task, is the supported use.
            let body = request.body
            let count = try await Task.detached { try await body.collect(upTo: 1 << 20).count }.value
            return .text("\(count)")
        }
        try await withLiveServer(router) { port, _ in
            let answer = try await rawExchange(
                port: port,
                "POST /count HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
            )
            #expect(answer.hasPrefix("HTTP/1.1 200"), "\(answer)")
            #expect(answer.hasSuffix("11"))
        }
        // A body of fixed bytes holds no connection: it may be read again.
        let bytes = RequestBody(bytes: [1, 2, 3])
        #expect(try await bytes.collect(upTo: 10) == [1, 2, 3])
        #expect(try await bytes.collect(upTo: 10) == [1, 2, 3])
    }

    /// A second iterator on a streamed body is a programming error that traps (a precondition failure cannot be
    /// caught in-process: this runs in a child process, as an exit test, and expects it to die).
    @Test func aSecondIteratorOnAStreamedBodyTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            var router = Router()
            router.post("/twice") { request in
                _ = request.body.makeAsyncIterator()
                _ = request.body.makeAsyncIterator()
                return .text("read twice")
            }
            try await withLiveServer(router) { port, _ in
                _ = try await rawExchange(
                    port: port, "POST /twice HTTP/1.1\r\nHost: localhost\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi")
            }
        }
        let message = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
        #expect(message.contains("a request body from the connection has one consumer"), "\(message)")
    }

    @Test func aStreamedResponseWaitsForASlowClientAndKeepsItsOrder() async throws {
        let chunkSize = 256 << 10
        let chunks = 64  // 16 MiB
        let progress = Progress()
        var router = Router()
        router.get("/stream") { _ in
            Response(
                headerFields: [.contentType: "application/octet-stream"],
                body: .stream { writer in
                    for index in 0..<chunks {
                        try await writer.write([UInt8](repeating: UInt8(truncatingIfNeeded: index), count: chunkSize))
                        progress.wrote((index + 1) * chunkSize)
                    }
                })
        }
        try await withLiveServer(router) { port, _ in
            // HTTP/1.0: the body comes unframed, and ends when the server closes.
            let (head, body) = try await slowRawRead(port: port, "GET /stream HTTP/1.0\r\n\r\n") { progress.received($0) }
            #expect(head.hasPrefix("HTTP/1.0 200") || head.hasPrefix("HTTP/1.1 200"), "\(head)")
            #expect(body.count == chunks * chunkSize)
            let outOfOrder = body.withUnsafeBufferPointer { bytes in
                bytes.indices.first { bytes[$0] != UInt8(truncatingIfNeeded: $0 / chunkSize) }
            }
            #expect(outOfOrder == nil, "byte \(outOfOrder ?? -1) is out of order")
        }
        // Unbuffered, the writer would have run ~16 MiB ahead of the slow client; it may be ahead only by the
        // sink's high-water mark (256 KiB), one chunk, and what the kernel's socket buffers hold.
        let ahead = progress.maxAhead
        #expect(ahead < 10 << 20, "the writer ran \(ahead >> 10) KiB ahead of the client")
    }

    @Test func aClientThatGoesAwayMakesTheWriterThrow() async throws {
        let (outcomes, outcome) = AsyncStream.makeStream(of: String.self)
        let clientGone = Gate(expected: 2)  // the producer and the test
        var router = Router()
        router.get("/events") { _ in
            Response(
                headerFields: [.contentType: "text/event-stream"],
                body: .stream { writer in
                    try await writer.write("data: first\n\n")
                    await clientGone.arriveAndWait()
                    let event = "data: \(String(repeating: "e", count: 1000))\n\n"
                    // The connection is suspended while the producer has nothing to send: libmicrohttpd sees the
                    // client gone when a write wakes it and its send fails (or the connection table looks, within a second); a
                    // write after that throws.
                    for index in 0..<100_000 {
                        do {
                            try await writer.write(event)
                        } catch {
                            outcome.yield("threw after \(index) writes")
                            outcome.finish()
                            throw error
                        }
                    }
                    outcome.yield("never threw")
                    outcome.finish()
                })
        }
        try await withLiveServer(router) { port, _ in
            let seen = try await rawReadUntil(port: port, "GET /events HTTP/1.1\r\nHost: localhost\r\n\r\n", marker: "data: first")
            #expect(seen.contains("data: first"))
            await clientGone.arriveAndWait()
            let result = await outcomes.first { _ in true }
            #expect(result?.hasPrefix("threw") == true, "\(result ?? "no outcome")")
        }
    }

    /// A client that hangs up on an idle stream (nothing to send: the connection is suspended, and libmicrohttpd
    /// does not watch it) is noticed by the connection table's check, and the producer is cancelled: the stream's
    /// slot is not held until its next write.
    @Test func aClientThatHangsUpOnAnIdleStreamEndsItsProducer() async throws {
        let (outcomes, outcome) = AsyncStream.makeStream(of: String.self)
        var router = Router()
        router.get("/idle") { _ in
            Response(
                headerFields: [.contentType: "text/event-stream"],
                body: .stream { writer in
                    try await writer.write("data: first\n\n")
                    // Nothing more to say for an hour: only the client's hang-up ends this.
                    do {
                        try await Task.sleep(for: .seconds(3600))
                        outcome.yield("slept an hour")
                    } catch {
                        outcome.yield("cancelled")
                    }
                    outcome.finish()
                })
        }
        try await withLiveServer(router) { port, _ in
            let seen = try await rawReadUntil(port: port, "GET /idle HTTP/1.1\r\nHost: localhost\r\n\r\n", marker: "data: first")
            #expect(seen.contains("data: first"))
            // The socket is closed now. Bounded, so that a miss fails with a message rather than the suite's limit.
            let result = await withTaskGroup(of: String?.self) { group in
                group.addTask { await outcomes.first { _ in true } }
                group.addTask {
                    try? await Task.sleep(for: .seconds(20))
                    return nil
                }
                defer { group.cancelAll() }
                return await group.next() ?? nil
            }
            #expect(result == "cancelled", "\(result ?? "still running 20 s after the client left")")
        }
    }
}

/// How far a producer got, and how far its client read.
final class Progress: Sendable {
    private struct State {
        var received = 0
        var maxAhead = 0
    }
    private let state = Mutex(State())

    func received(_ count: Int) { state.withLock { $0.received = count } }

    func wrote(_ count: Int) {
        state.withLock { $0.maxAhead = max($0.maxAhead, count - $0.received) }
    }

    var maxAhead: Int { state.withLock { $0.maxAhead } }
}
