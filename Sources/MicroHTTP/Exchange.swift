import CMicroHTTPD
import HTTPTypes
import Logging
import Synchronization

/// One request on one connection, from its head to the completed callback.
///
/// libmicrohttpd's thread feeds it body bytes; the handler runs in a task. Every libmicrohttpd call on the
/// connection is made under `state`'s lock, and the connection is suspended whenever its thread has nothing to do:
/// while the body consumer is behind, and after the request is read until the response is ready.
final class Exchange: BodySource, Sendable {
    private struct State {
        var chunks: [[UInt8]] = []
        var head = 0
        var buffered = 0
        var received = 0
        /// The body is complete (`nil` error) or failed.
        var bodyEnd: BodyEnd?
        var waiter: CheckedContinuation<[UInt8]?, any Error>?
        /// libmicrohttpd has made its final call: the whole request is read.
        var requestComplete = false
        /// We suspended the connection and owe it a resume.
        var suspended = false
        /// The handler answered before the body was read; further body bytes are dropped.
        var discarding = false
        var pending: PreparedResponse?
        var sink: StreamSink?
        /// The completed callback ran: the connection pointer is dead.
        var closed = false
        var task: Task<Void, Never>?
        var status: Int?
        var bytesSent: Int?
    }

    private enum BodyEnd {
        case finished
        case failed(any Error)
    }

    let connection: Connection
    let route: Router.Route
    let request: Request
    let bodyLimit: Int
    let declaredLength: Int?
    let started: ContinuousClock.Instant
    private let server: Daemon
    private let parser: MultipartParser?
    private let state = Mutex(State())

    init(
        server: Daemon,
        connection: Connection,
        route: Router.Route,
        request: Request,
        bodyLimit: Int,
        declaredLength: Int?,
        started: ContinuousClock.Instant,
        multipart: MultipartParser?
    ) {
        self.server = server
        self.connection = connection
        self.route = route
        self.request = request
        self.bodyLimit = bodyLimit
        self.declaredLength = declaredLength
        self.started = started
        self.parser = multipart
    }

    // MARK: Called on libmicrohttpd's thread

    /// Starts the handler at once; libmicrohttpd's final call (or the body) follows.
    ///
    /// The handler runs inline on libmicrohttpd's thread until its first suspension (`Task.immediate`): one that
    /// never suspends has its answer ready for the final call, with no thread hop and no suspend/resume at all.
    /// The answer is queued only at the final call: one queued at the first call makes libmicrohttpd close the
    /// connection after it (it treats it as an early refusal), which would end keep-alive.
    func start(hasBody: Bool) {
        if !hasBody { state.withLock { $0.bodyEnd = .finished } }
        // Not under the lock: the handler may run to completion right here, and delivering takes the lock.
        let task = Task.immediate { await self.run() }
        let cancelled = state.withLock { state -> Bool in
            state.task = task
            return state.closed
        }
        if cancelled { task.cancel() }
    }

    /// Takes body bytes from libmicrohttpd. `false` tells it to close the connection (the body is over its limit).
    func receive(_ bytes: UnsafeRawBufferPointer) -> Bool {
        let (waiter, chunk, overLimit) = state.withLock { state -> (CheckedContinuation<[UInt8]?, any Error>?, [UInt8]?, Bool) in
            state.received += bytes.count
            if state.received > bodyLimit {
                let waiter = state.waiter
                state.waiter = nil
                state.bodyEnd = .failed(HTTPError.bodyTooLarge(limit: bodyLimit))
                state.chunks.removeAll()
                state.head = 0
                return (waiter, nil, true)
            }
            if state.discarding { return (nil, nil, false) }
            let chunk = Array(bytes)
            if let waiter = state.waiter {
                state.waiter = nil
                return (waiter, chunk, false)
            }
            state.chunks.append(chunk)
            state.buffered += chunk.count
            if state.buffered >= server.configuration.bodyBufferSize, !state.suspended {
                state.suspended = true
                connection.suspend()
            }
            return (nil, nil, false)
        }
        if overLimit {
            waiter?.resume(throwing: HTTPError.bodyTooLarge(limit: bodyLimit))
            return false
        }
        waiter?.resume(returning: chunk)
        return true
    }

    /// libmicrohttpd's final call: the request is read. Queues the answer if it is ready, else parks the connection.
    func requestCompleted() -> Bool {
        let (waiter, queued) = state.withLock { state -> (CheckedContinuation<[UInt8]?, any Error>?, Bool) in
            state.requestComplete = true
            if state.bodyEnd == nil { state.bodyEnd = .finished }
            let waiter = state.waiter
            state.waiter = nil
            if let pending = state.pending {
                state.pending = nil
                let queued = connection.queue(pending.pointer, status: pending.status)
                pending.release()
                return (waiter, queued)
            }
            state.suspended = true
            connection.suspend()
            return (waiter, true)
        }
        waiter?.resume(returning: nil)
        return queued
    }

    /// The completed callback: the connection is finished with (sent, aborted, or timed out).
    func connectionClosed(_ termination: MHD_RequestTerminationCode) {
        let (waiter, sink, task, status, bytes) = state.withLock { state in
            state.closed = true
            state.pending?.release()
            state.pending = nil
            let waiter = state.waiter
            state.waiter = nil
            if state.bodyEnd == nil { state.bodyEnd = .failed(CancellationError()) }
            return (waiter, state.sink, state.task, state.status, state.bytesSent)
        }
        waiter?.resume(throwing: CancellationError())
        sink?.close()
        // A client that goes away mid-request cancels its handler.
        if termination != .REQUEST_TERMINATED_COMPLETED_OK { task?.cancel() }
        server.finished(self, status: status, bytes: bytes, termination: termination)
    }

    // MARK: Called from the handler's task

    /// Cancels the handler (server shutting down hard).
    func cancel() {
        state.withLock { $0.task }?.cancel()
    }

    func nextChunk() async throws -> [UInt8]? {
        let lowWater = server.configuration.bodyBufferSize / 2
        if case .ready(let chunk) = try state.withLock({ try Self.take(&$0, connection: connection, lowWater: lowWater) }) {
            return chunk
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<[UInt8]?, any Error>) in
                let ready: Result<[UInt8]?, any Error>? = state.withLock { state in
                    do {
                        if case .ready(let chunk) = try Self.take(&state, connection: connection, lowWater: lowWater) {
                            return .success(chunk)
                        }
                    } catch {
                        return .failure(error)
                    }
                    if Task.isCancelled { return .failure(CancellationError()) }
                    state.waiter = continuation
                    return nil
                }
                if let ready { continuation.resume(with: ready) }
            }
        } onCancel: {
            let waiter = state.withLock { state in
                defer { state.waiter = nil }
                return state.waiter
            }
            waiter?.resume(throwing: CancellationError())
        }
    }

    func multipartParser() -> MultipartParser? { parser }

    /// What the body consumer finds in the buffer.
    private enum Take {
        /// A chunk, or `nil` at the end of the body.
        case ready([UInt8]?)
        /// Nothing yet: wait for libmicrohttpd.
        case empty
    }

    /// Takes the next buffered chunk, resuming a connection suspended for backpressure once below `lowWater`.
    private static func take(_ state: inout State, connection: Connection, lowWater: Int) throws -> Take {
        if state.head < state.chunks.count {
            let chunk = state.chunks[state.head]
            state.chunks[state.head] = []
            state.head += 1
            if state.head == state.chunks.count {
                state.chunks.removeAll(keepingCapacity: true)
                state.head = 0
            }
            state.buffered -= chunk.count
            if state.suspended, !state.requestComplete, state.buffered <= lowWater {
                state.suspended = false
                connection.resume()
            }
            return .ready(chunk)
        }
        switch state.bodyEnd {
        case .finished: return .ready(nil)
        case .failed(let error): throw error
        case nil: return .empty
        }
    }

    private func run() async {
        var request = request
        request.body = RequestBody(source: self, declaredLength: declaredLength)
        var response = await Router.run(route, request)
        response.headerFields[.requestID] = request.id
        if server.isDraining { response.headerFields[.connection] = "close" }
        var sink: StreamSink?
        var produce: (@Sendable (ResponseBodyWriter) async throws -> Void)?
        if case .stream(let producer) = response.body.storage {
            sink = StreamSink(highWater: server.configuration.bodyBufferSize)
            produce = producer
        }
        guard let prepared = PreparedResponse.make(response, stream: sink) else {
            request.logger.error("libmicrohttpd could not create a response")
            deliver(PreparedResponse.make(HTTPError(.internalServerError).response, stream: nil))
            return
        }
        deliver(prepared, sink: sink)
        guard let sink, let produce else { return }
        do {
            try await produce(ResponseBodyWriter(sink: sink))
            sink.finish(failed: false)
        } catch {
            request.logger.warning("streamed response ended early", metadata: ["error": "\(error)"])
            sink.finish(failed: true)
        }
    }

    /// Queues the answer now if the request is read (the connection is parked), else keeps it for the final call.
    private func deliver(_ prepared: PreparedResponse?, sink: StreamSink? = nil) {
        guard let prepared else { return }
        let waiter = state.withLock { state -> CheckedContinuation<[UInt8]?, any Error>? in
            guard !state.closed else {
                prepared.release()
                return nil
            }
            state.status = prepared.status
            state.bytesSent = prepared.bodySize
            state.sink = sink
            sink?.attach(connection)
            if state.requestComplete {
                if !connection.queue(prepared.pointer, status: prepared.status) {
                    request.logger.error("libmicrohttpd refused the response")
                }
                prepared.release()
                state.suspended = false
                connection.resume()
                return nil
            }
            // Answered before the body was read: drop what is buffered and what is still to come.
            state.pending = prepared
            state.discarding = true
            state.chunks.removeAll()
            state.head = 0
            state.buffered = 0
            let waiter = state.waiter
            state.waiter = nil
            if state.suspended {
                state.suspended = false
                connection.resume()
            }
            return waiter
        }
        waiter?.resume(throwing: CancellationError())
    }
}
