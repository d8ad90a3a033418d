import CMicroHTTPD
import HTTPTypes
import Synchronization

/// Carries a streamed response body from the producing task to libmicrohttpd's content reader callback.
///
/// When the reader finds no data it suspends the connection (returning 0 would make libmicrohttpd spin);
/// a write resumes it. A writer waits while more than `highWater` bytes are unsent.
final class StreamSink: ResponseBodySink, Sendable {
    private struct State {
        var chunks: [[UInt8]] = []
        var head = 0
        var offset = 0
        var buffered = 0
        var finished = false
        var failed = false
        var closed = false
        var suspended = false
        /// The client hung up while the connection was parked: the next read ends the response with an error.
        var clientLeft = false
        var connection: Connection?
        /// Watches the socket while the connection is parked (libmicrohttpd does not).
        var table: ConnectionTable?
        var writer: CheckedContinuation<Void, any Error>?
    }

    private let state = Mutex(State())
    private let highWater: Int

    init(highWater: Int) {
        self.highWater = highWater
    }

    /// The connection the response was queued on: the reader suspends and the writer resumes it; `table` watches
    /// it for the client's hang-up while it is suspended.
    func attach(_ connection: Connection, watchedBy table: ConnectionTable) {
        state.withLock { state in
            state.connection = connection
            state.table = table
        }
    }

    func write(_ bytes: [UInt8]) async throws {
        let mustWait = try state.withLock { state -> Bool in
            guard !state.closed else { throw HTTPError(.badRequest, detail: "the client closed the connection") }
            state.chunks.append(bytes)
            state.buffered += bytes.count
            wakeReader(&state)
            return state.buffered > highWater
        }
        guard mustWait else { return }
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            let resumeNow = state.withLock { state -> Bool in
                if state.closed || state.buffered <= highWater { return true }
                state.writer = continuation
                return false
            }
            if resumeNow { continuation.resume() }
        }
        if state.withLock({ $0.closed }) { throw HTTPError(.badRequest, detail: "the client closed the connection") }
    }

    /// The producer is done; `failed` ends the stream with an error so the client sees it was cut short.
    func finish(failed: Bool) {
        state.withLock { state in
            state.finished = true
            state.failed = failed
            wakeReader(&state)
        }
    }

    /// The connection table saw the client hang up while the connection was parked: writers stop, and the
    /// connection is resumed for libmicrohttpd to end the response and close it.
    func clientLeft() {
        let writer = state.withLock { state -> CheckedContinuation<Void, any Error>? in
            state.closed = true
            state.clientLeft = true
            wakeReader(&state)
            defer { state.writer = nil }
            return state.writer
        }
        writer?.resume()
    }

    /// The connection is gone: writers stop.
    func close() {
        let writer = state.withLock { state -> CheckedContinuation<Void, any Error>? in
            state.closed = true
            defer { state.writer = nil }
            return state.writer
        }
        writer?.resume()
    }

    private func wakeReader(_ state: inout State) {
        if state.suspended, let connection = state.connection {
            state.suspended = false
            // Before the resume: the table must not look at a socket libmicrohttpd may close.
            state.table?.streamBusy(connection.pointer)
            connection.resume()
        }
    }

    /// Called by libmicrohttpd on its thread for the next bytes to send.
    private func read(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        let (count, writer) = state.withLock { state -> (Int, CheckedContinuation<Void, any Error>?) in
            // -2 (MHD_CONTENT_READER_END_WITH_ERROR) closes the connection; -1 below ends the response.
            if state.clientLeft { return (-2, nil) }
            var written = 0
            while written < buffer.count, state.head < state.chunks.count {
                let chunk = state.chunks[state.head]
                let n = min(buffer.count - written, chunk.count - state.offset)
                chunk.withUnsafeBytes { source in
                    buffer.baseAddress!.advanced(by: written).copyMemory(from: source.baseAddress!.advanced(by: state.offset), byteCount: n)
                }
                written += n
                state.offset += n
                if state.offset == chunk.count {
                    state.chunks[state.head] = []
                    state.head += 1
                    state.offset = 0
                }
            }
            if state.head == state.chunks.count {
                state.chunks.removeAll(keepingCapacity: true)
                state.head = 0
            }
            state.buffered -= written
            var writer: CheckedContinuation<Void, any Error>?
            if state.buffered <= highWater {
                writer = state.writer
                state.writer = nil
            }
            if written > 0 { return (written, writer) }
            if state.finished { return (state.failed ? -2 : -1, writer) }
            // Nothing to send yet: park the connection until the next write.
            if let connection = state.connection {
                state.suspended = true
                connection.suspend()
                state.table?.streamIdle(connection.pointer, sink: self)
            }
            return (0, writer)
        }
        writer?.resume()
        return count
    }

    static let read: MHD_ContentReaderCallback = { context, _, buffer, max in
        guard let context, let buffer else { return -2 }
        let sink = Unmanaged<StreamSink>.fromOpaque(context).takeUnretainedValue()
        return sink.read(into: UnsafeMutableRawBufferPointer(start: buffer, count: max))
    }

    static let free: MHD_ContentReaderFreeCallback = { context in
        guard let context else { return }
        Unmanaged<StreamSink>.fromOpaque(context).release()
    }
}
