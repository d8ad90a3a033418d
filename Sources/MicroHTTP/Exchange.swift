import CMicroHTTPD
import HTTPTypes
import Logging
import Platform
import Synchronization
import Tracing

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
        /// The body passed its limit: the rest is read and dropped, and the answer is a 413 whatever the handler says.
        var overLimit = false
        /// An answer is queued: a later one from the handler is dropped.
        var answered = false
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
    /// Body bytes read (and dropped past `bodyLimit`) before the connection is closed without an answer.
    ///
    /// Past the limit the rest of the body is still read, so that the 413 can be queued at libmicrohttpd's final
    /// call (it refuses a response while the body is arriving), but only up to as much again, at most 8 MiB.
    let readLimit: Int
    let declaredLength: Int?
    let started: MonotonicInstant
    private let server: Daemon
    private let parser: MultipartParser?
    private let state = Mutex(State())
    /// An iterator was made for the body: its only consumer.
    private let claimed = Atomic(false)

    init(
        server: Daemon,
        connection: Connection,
        route: Router.Route,
        request: Request,
        bodyLimit: Int,
        declaredLength: Int?,
        started: MonotonicInstant,
        multipart: MultipartParser?
    ) {
        self.server = server
        self.connection = connection
        self.route = route
        self.request = request
        self.bodyLimit = bodyLimit
        self.readLimit = bodyLimit + min(8 << 20, bodyLimit)
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

    /// Takes body bytes from libmicrohttpd. `false` tells it to close the connection (far past the body's limit).
    func receive(_ bytes: UnsafeRawBufferPointer) -> Bool {
        // Copied before the lock is taken: the body's consumer, taking the lock meanwhile, does not wait for the copy.
        let bytes = Array(bytes)
        let (waiter, chunk, verdict) = state.withLock { state -> (CheckedContinuation<[UInt8]?, any Error>?, [UInt8]?, Verdict) in
            state.received += bytes.count
            if state.received > bodyLimit {
                guard state.received <= readLimit else { return (nil, nil, .close) }
                if state.overLimit { return (nil, nil, .dropped) }
                // Just past the limit: the consumer learns it from the body, and nothing more is kept.
                state.overLimit = true
                state.bodyEnd = .failed(HTTPError.bodyTooLarge(limit: bodyLimit))
                state.chunks.removeAll()
                state.head = 0
                state.buffered = 0
                if state.suspended {
                    // Nothing buffered is left for the consumer to take, which was what would resume the connection.
                    state.suspended = false
                    connection.resume()
                }
                let waiter = state.waiter
                state.waiter = nil
                return (waiter, nil, .overLimit)
            }
            if state.discarding { return (nil, nil, .dropped) }
            let chunk = bytes
            if let waiter = state.waiter {
                state.waiter = nil
                return (waiter, chunk, .delivered)
            }
            state.chunks.append(chunk)
            state.buffered += chunk.count
            if state.buffered >= server.configuration.bodyBufferSize, !state.suspended {
                state.suspended = true
                connection.suspend()
            }
            return (nil, nil, .delivered)
        }
        switch verdict {
        case .overLimit: waiter?.resume(throwing: HTTPError.bodyTooLarge(limit: bodyLimit))
        case .delivered: waiter?.resume(returning: chunk)
        case .dropped: break
        case .close: return false
        }
        return true
    }

    /// What became of body bytes from libmicrohttpd.
    private enum Verdict {
        /// Buffered, or handed to the waiting consumer.
        case delivered
        /// Read and dropped: the handler has answered, or the body is past its limit.
        case dropped
        /// These passed the body's limit: the consumer is told, and the answer will be a 413.
        case overLimit
        /// Past `readLimit`: close the connection without an answer.
        case close
    }

    /// libmicrohttpd's final call: the request is read. Queues the answer if it is ready, else parks the connection.
    func requestCompleted() -> Bool {
        let (waiter, queued, task) = state.withLock { state -> (CheckedContinuation<[UInt8]?, any Error>?, Bool, Task<Void, Never>?) in
            state.requestComplete = true
            if state.bodyEnd == nil { state.bodyEnd = .finished }
            let waiter = state.waiter
            state.waiter = nil
            if state.overLimit {
                // The 413 now, whatever the handler answered or will answer; its work is moot, so it is cancelled.
                state.pending?.release()
                state.pending = nil
                state.sink?.close()
                state.sink = nil
                state.answered = true
                guard let refusal = refusal() else { return (waiter, false, state.task) }
                state.status = refusal.status
                state.bytesSent = refusal.bodySize
                let queued = connection.queue(refusal.pointer, status: refusal.status)
                refusal.release()
                return (waiter, queued, state.task)
            }
            if let pending = state.pending {
                state.pending = nil
                let queued = connection.queue(pending.pointer, status: pending.status)
                pending.release()
                state.answered = true
                return (waiter, queued, nil)
            }
            state.suspended = true
            connection.suspend()
            return (waiter, true, nil)
        }
        waiter?.resume(returning: nil)
        task?.cancel()
        return queued
    }

    /// The 413 for a body past its limit, closing the connection: a client that sends too much is not kept.
    private func refusal() -> PreparedResponse? {
        server.prepare(HTTPError.bodyTooLarge(limit: bodyLimit).response, requestID: request.id, close: true)
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

    func claim() {
        let first = claimed.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged
        precondition(first, "a request body from the connection has one consumer: it was already being read")
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
                    // A second waiter would overwrite the first, whose task would then never resume.
                    precondition(state.waiter == nil, "a request body from the connection has one consumer: two tasks read it")
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
        // Traced, the handler runs within the request's span: what it starts (a job's link, a store's request) is its child.
        let response: Response
        if let trace = request.trace {
            response = await ServiceContext.withValue(trace.span.context) { [request, route] in await Router.run(route, request) }
        } else {
            response = await Router.run(route, request)
        }
        var sink: StreamSink?
        var produce: (@Sendable (ResponseBodyWriter) async throws -> Void)?
        if case .stream(let producer) = response.body.storage {
            sink = StreamSink(highWater: server.configuration.bodyBufferSize)
            produce = producer
        }
        guard let prepared = server.prepare(response, stream: sink, requestID: request.id) else {
            request.logger.error("libmicrohttpd could not create a response")
            deliver(server.prepare(HTTPError(.internalServerError).response, requestID: request.id))
            return
        }
        guard deliver(prepared, sink: sink), let sink, let produce else { return }
        do {
            try await produce(ResponseBodyWriter(sink: sink))
            sink.finish(failed: false)
        } catch {
            request.logger.warning("streamed response ended early", metadata: ["error": "\(error)"])
            sink.finish(failed: true)
        }
    }

    /// Queues the answer now if the request is read (the connection is parked), else keeps it for the final call.
    ///
    /// `false` when the answer is dropped (the connection is gone, or the body passed its limit and the answer is
    /// the 413): a stream's producer must then not run, and its sink is closed.
    @discardableResult
    private func deliver(_ prepared: PreparedResponse?, sink: StreamSink? = nil) -> Bool {
        guard let prepared else { return false }
        let (taken, waiter) = state.withLock { state -> (Bool, CheckedContinuation<[UInt8]?, any Error>?) in
            guard !state.closed, !state.answered, !state.overLimit else {
                prepared.release()
                sink?.close()
                return (false, nil)
            }
            state.status = prepared.status
            state.bytesSent = prepared.bodySize
            state.sink = sink
            sink?.attach(connection, watchedBy: server.connections)
            if state.requestComplete {
                if !connection.queue(prepared.pointer, status: prepared.status) {
                    request.logger.error("libmicrohttpd refused the response")
                }
                prepared.release()
                state.answered = true
                state.suspended = false
                connection.resume()
                return (true, nil)
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
            return (true, waiter)
        }
        waiter?.resume(throwing: CancellationError())
        return taken
    }
}
