import CMicroHTTPD
import HTTPTypes
import Logging
import Metrics
import Platform
import Synchronization
import Telemetry

/// A running libmicrohttpd daemon and the state its C threads share with Swift tasks.
final class Daemon: Sendable {
    private struct Live {
        var exchanges: [ObjectIdentifier: Exchange] = [:]
        var drained: [CheckedContinuation<Void, Never>] = []
    }

    let router: Router
    let configuration: ServerConfiguration
    let logger: Logger
    /// The open connections: head deadlines, and room made when the limit is reached.
    let connections: ConnectionTable
    private let live = Mutex(Live())
    /// Read by every response (`Connection: close` once set): an atomic, not the lock the C thread takes.
    private let draining = Atomic(false)
    /// Metric handles by method, route and status: made once, not per request.
    private let meters = Mutex(MeterTable())
    /// The `MHD_Daemon`'s address, 0 until started and again once `shutdown` took it (so only one shutdown stops it).
    ///
    /// Set after `MHD_start_daemon` returns, so it cannot be a `let`; an atomic of the bits, as `OpaquePointer`
    /// is not `Sendable`. The C callbacks never read it.
    private let handle = Atomic<UInt>(0)
    private let boundPort = Atomic(0)
    /// The PEM texts handed to libmicrohttpd for TLS (C strings it reads in place), freed with the daemon.
    private let tlsMemory: [UInt]

    /// The port the daemon is bound to, once started.
    var port: Int { boundPort.load(ordering: .acquiring) }

    private init(router: Router, configuration: ServerConfiguration, logger: Logger) {
        self.router = router
        self.configuration = configuration
        self.logger = logger
        connections = ConnectionTable(limit: configuration.connectionLimit, headTimeout: .seconds(configuration.connectionTimeout))
        let pems: [String] = configuration.tls.map { [$0.privateKey, $0.certificateChain] } ?? []
        tlsMemory = pems.map { UInt(bitPattern: strdup($0)) }
    }

    deinit {
        for pointer in tlsMemory { free(UnsafeMutableRawPointer(bitPattern: pointer)) }
    }

    /// Binds and starts the polling thread(s).
    static func start(router: Router, configuration: ServerConfiguration, logger: Logger) throws -> Daemon {
        let daemon = Daemon(router: router, configuration: configuration, logger: logger)
        var address = try SocketAddress(host: configuration.host, port: configuration.port)
        var flags = MHD_USE_EPOLL_INTERNAL_THREAD.rawValue | MHD_ALLOW_SUSPEND_RESUME.rawValue | MHD_USE_ERROR_LOG.rawValue
        if address.isIPv6 { flags |= MHD_USE_IPv6.rawValue }
        var options: [MHD_OptionItem] = [
            // Above the table's limit: libmicrohttpd stops accepting at its own, leaving new clients in the backlog
            // behind idle connections, where the table makes room instead (see ConnectionTable).
            MHD_OptionItem(option: MHD_OPTION.CONNECTION_LIMIT, value: configuration.acceptLimit, ptr_value: nil),
            MHD_OptionItem(option: MHD_OPTION.PER_IP_CONNECTION_LIMIT, value: configuration.perIPConnectionLimit, ptr_value: nil),
            MHD_OptionItem(option: MHD_OPTION.CONNECTION_TIMEOUT, value: configuration.connectionTimeout, ptr_value: nil),
            MHD_OptionItem(option: MHD_OPTION.CONNECTION_MEMORY_LIMIT, value: configuration.connectionMemoryLimit, ptr_value: nil),
            // Strict parsing: HTTP/1.1 without Host, and malformed header lines, are refused by libmicrohttpd itself.
            MHD_OptionItem(option: MHD_OPTION.STRICT_FOR_CLIENT, value: 1, ptr_value: nil),
            MHD_OptionItem(option: MHD_OPTION.LISTENING_ADDRESS_REUSE, value: 1, ptr_value: nil),
        ]
        if configuration.threads > 1 {
            options.append(MHD_OptionItem(option: MHD_OPTION.THREAD_POOL_SIZE, value: configuration.threads, ptr_value: nil))
        }
        if configuration.tls != nil {
            guard herald_tls_supported() else { throw ServerError.tlsUnavailable }
            flags |= MHD_USE_TLS.rawValue
            let key = UnsafeMutableRawPointer(bitPattern: daemon.tlsMemory[0])
            let certificate = UnsafeMutableRawPointer(bitPattern: daemon.tlsMemory[1])
            options.append(MHD_OptionItem(option: MHD_OPTION.HTTPS_MEM_KEY, value: 0, ptr_value: key))
            options.append(MHD_OptionItem(option: MHD_OPTION.HTTPS_MEM_CERT, value: 0, ptr_value: certificate))
        }
        options.append(MHD_OptionItem(option: MHD_OPTION.END, value: 0, ptr_value: nil))
        let context = Unmanaged.passUnretained(daemon).toOpaque()
        let handle = address.withSockaddr { sockaddr in
            herald_start_daemon(
                flags, sockaddr, Daemon.access, Daemon.completed, Daemon.connectionChanged, Daemon.inspectTarget, Daemon.log, context,
                &options)
        }
        guard let handle else {
            let tls = configuration.tls == nil ? "" : " with TLS (is the certificate and key pair valid? libmicrohttpd logged why)"
            throw ServerError.daemonStartFailed("\(configuration.host):\(configuration.port)\(tls)")
        }
        daemon.boundPort.store(Int(herald_daemon_port(handle)), ordering: .releasing)
        daemon.handle.store(UInt(bitPattern: handle), ordering: .releasing)
        return daemon
    }

    /// True once shutdown began: answers carry `Connection: close`.
    var isDraining: Bool { draining.load(ordering: .relaxed) }

    /// Builds the libmicrohttpd response for an answer to request `requestID`: `Connection: close` when asked for or once
    /// draining.
    func prepare(_ response: Response, stream sink: StreamSink? = nil, requestID: String, close: Bool = false) -> PreparedResponse? {
        PreparedResponse.make(response, stream: sink, requestID: requestID, close: close || isDraining)
    }

    /// Stops accepting, lets requests in flight finish (cancelling their handlers if `cancel` turns true), stops.
    func shutdown() async {
        guard let handle = OpaquePointer(bitPattern: handle.exchange(0, ordering: .acquiringAndReleasing)) else { return }
        // Draining first: an answer stamped once a client can see the listener closed must carry `Connection: close`.
        draining.store(true, ordering: .relaxed)
        let listener = MHD_quiesce_daemon(handle)
        if listener >= 0 { close(listener) }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let done = live.withLock { live -> Bool in
                    if live.exchanges.isEmpty { return true }
                    live.drained.append(continuation)
                    return false
                }
                if done { continuation.resume() }
            }
        } onCancel: {
            for exchange in live.withLock({ Array($0.exchanges.values) }) { exchange.cancel() }
        }
        // No connection is suspended now (only exchanges suspend, and all have completed): stopping is safe.
        MHD_stop_daemon(handle)
    }

    /// An exchange's connection is done with: log it, count it, and let a waiting shutdown go on.
    func finished(_ exchange: Exchange, status: Int?, bytes: Int?, termination: MHD_RequestTerminationCode) {
        let drained = live.withLock { live -> [CheckedContinuation<Void, Never>] in
            live.exchanges[ObjectIdentifier(exchange)] = nil
            guard live.exchanges.isEmpty else { return [] }
            defer { live.drained = [] }
            return live.drained
        }
        record(
            method: exchange.request.method,
            path: exchange.request.path,
            route: exchange.route.template,
            status: status,
            bytes: bytes,
            started: exchange.started,
            requestID: exchange.request.id,
            client: exchange.request.remoteAddress,
            logger: logger,
            termination: termination,
            trace: exchange.request.trace
        )
        for continuation in drained { continuation.resume() }
    }

    /// One log line and the metrics for one request.
    private func record(
        method: HTTPRequest.Method,
        path: Substring,
        route: String,
        status: Int?,
        bytes: Int?,
        started: MonotonicInstant,
        requestID: String,
        client: String?,
        logger: Logger,
        termination: MHD_RequestTerminationCode,
        trace: RequestTrace?
    ) {
        let nanoseconds = started.nanoseconds(to: .now)
        trace?.end(status: status)
        let key = MeterKey(method: method.label, route: route, status: status)
        meters.withLock { meters in
            // Counted under the lock, where the handles lie: each copy out of the table counted their references.
            // A server answers the same route with the same status run after run: compared, not hashed.
            if meters.last?.key != key {
                let meter: Meters
                if let known = meters.all[key] {
                    meter = known
                } else {
                    meter = Meters(
                        requests: Counter(
                            label: "http_requests_total",
                            dimensions: [("method", key.method), ("route", route), ("status", Self.statusLabel(status))]),
                        duration: Timer(label: "http_request_duration_seconds", dimensions: [("method", key.method), ("route", route)]))
                    meters.all[key] = meter
                }
                meters.last = (key, meter)
            }
            meters.last?.meters.count(nanoseconds: nanoseconds)
        }
        guard logger.logLevel <= .info else { return }
        let micros = nanoseconds / 1_000
        if let accessLog = configuration.accessLog {
            accessLog.record(
                AccessLog.Entry(
                    method: method.rawValue, path: path, status: status, bytes: bytes, microseconds: Int(micros), requestID: requestID,
                    client: client, termination: termination == .REQUEST_TERMINATED_COMPLETED_OK ? nil : Int(termination.rawValue),
                    trace: trace?.traceparent))
            return
        }
        // One literal with every member: added one by one, the dictionary grows and rehashes on the way.
        var metadata: Logger.Metadata = [
            "method": "\(method.rawValue)", "path": "\(path)", "status": "\(Self.statusLabel(status))",
            "bytes": "\(bytes.map(String.init) ?? "-")", "duration_us": "\(micros)", "request_id": "\(requestID)",
            "client": "\(client ?? "-")",
        ]
        if termination != .REQUEST_TERMINATED_COMPLETED_OK { metadata["termination"] = "\(termination.rawValue)" }
        if let traceparent = trace?.traceparent { metadata.merge(traceparent.metadata) { $1 } }
        logger.info("request", metadata: metadata)
    }

    /// A request's status as its metrics and log line name it: `aborted` when none was sent.
    private static func statusLabel(_ status: Int?) -> String { status.map(String.init) ?? "aborted" }

    private struct MeterKey: Hashable {
        var method: String
        var route: String
        var status: Int?

        /// Lengths and the status, not the text: a few routes share a hash, and the lookup every request makes is cheap
        /// (hashing both strings cost more than the rest of recording the request).
        func hash(into hasher: inout Hasher) {
            hasher.combine(method.utf8.count)
            hasher.combine(route.utf8.count)
            hasher.combine(status)
        }
    }

    private struct MeterTable {
        var all: [MeterKey: Meters] = [:]
        /// The last request's.
        var last: (key: MeterKey, meters: Meters)?
    }

    private struct Meters: Sendable {
        let requests: Counter
        let duration: Timer

        /// One request that took `nanoseconds`.
        func count(nanoseconds: Int) {
            requests.increment()
            duration.recordNanoseconds(Int64(nanoseconds))
        }
    }

    // MARK: The first call of a request

    /// Reads the head, applies the protections, routes, and starts the exchange, or answers at once.
    private func begin(
        connection pointer: OpaquePointer, url: String, method rawMethod: String, isHTTP11: Bool, target: TargetProblem?,
        slot: UnsafeMutablePointer<UnsafeMutableRawPointer?>
    ) -> MHD_Result {
        // The request's duration, in the log and the metrics, counts from here: the handler's work included.
        let started = MonotonicInstant.now
        let knownPeer = connections.requestStarted(pointer)
        var head = Head()
        // Room for a usual head at once: grown from empty, the fields' array was reallocated four times a request.
        head.fields.reserveCapacity(8)
        withUnsafeMutablePointer(to: &head) { headPointer in
            _ = MHD_get_connection_values_n(pointer, .HEADER_KIND, Daemon.collectHeader, headPointer)
            _ = MHD_get_connection_values_n(pointer, .GET_ARGUMENT_KIND, Daemon.collectArgument, headPointer)
        }
        // Formatted once a connection (as it opened), not per request: the access log and `Request.remoteAddress` (for
        // auth) both need it. Behind a trusted proxy, the client it forwarded for.
        let peer = knownPeer ?? herald_client_address(pointer).flatMap(SocketAddress.describe)
        let client = peer.map { configuration.trustedProxies.client(peer: $0, forwardedFor: head.forwardedFor) }
        let requestID = RequestID.accept(head.requestID) ?? RequestID.generate()
        let trace = configuration.tracer.map {
            RequestTrace.start(tracer: $0, method: rawMethod, path: url, fields: head.fields, client: client, secure: configuration.tls != nil)
        }
        let connection = Connection(pointer: pointer)
        let method: HTTPRequest.Method
        switch Self.check(
            head, method: rawMethod, urlSize: url.utf8.count, target: target, isHTTP11: isHTTP11, maxHeaderSize: configuration.maxHeaderSize)
        {
        case .success(let checked): method = checked
        case .failure(let refusal):
            return answerAtOnce(
                refusal, connection: connection, close: true, method: HTTPRequest.Method(rawMethod) ?? .get, path: Substring(url), route: "-",
                requestID: requestID, client: client, started: started, logger: logger, trace: trace)
        }
        let transferEncoding = head.transferEncoding
        let contentLength = head.contentLength
        let declaredLength = contentLength.flatMap { Int($0) }
        let hasBody = transferEncoding != nil || (declaredLength ?? 0) > 0
        var request = Request(
            method: method, path: url, fields: head.fields, id: requestID, query: head.query, remoteAddress: client, logger: logger,
            trace: trace)
        let route: Router.Route
        let limit: Int
        switch router.dispatch(&request, declaredLength: declaredLength, defaultBodyLimit: configuration.maxBodySize) {
        case .answer(let error, let label):
            return refuse(error, route: label, request: request, hasBody: hasBody, connection: connection, started: started, slot: slot)
        case .route(let found, let bodyLimit):
            (route, limit) = (found, bodyLimit)
            trace?.routed(method: method, template: found.template)
        }
        if !hasBody, let response = Router.runImmediately(route, request) {
            // Queued on the next call: one queued during this first call makes libmicrohttpd close the connection.
            let held = HeldAnswer(response: response, request: request, route: route.template, started: started)
            slot.pointee = Unmanaged.passRetained(held).toOpaque()
            return .YES
        }
        let multipart = hasBody && (head.contentType?.lowercased().hasPrefix("multipart/form-data") ?? false)
        let exchange = Exchange(
            server: self,
            connection: connection,
            route: route,
            request: request,
            bodyLimit: limit,
            declaredLength: declaredLength,
            started: started,
            multipart: multipart ? MultipartParser.make(for: pointer) : nil
        )
        live.withLock { $0.exchanges[ObjectIdentifier(exchange)] = exchange }
        slot.pointee = Unmanaged.passRetained(exchange).toOpaque()
        exchange.start(hasBody: hasBody)
        return .YES
    }

    /// The head's method, or what the protections refuse in the head (the connection is then closed). Apart from `begin`,
    /// so that the refusals' code does not sit between the lines every request runs.
    @inline(never)
    private static func check(
        _ head: Head, method rawMethod: String, urlSize: Int, target: TargetProblem?, isHTTP11: Bool, maxHeaderSize: Int
    ) -> Result<HTTPRequest.Method, HTTPError> {
        // Checked first: heads past the budget are refused before their fields are looked at.
        if head.size + urlSize > maxHeaderSize { return .failure(HTTPError.headerTooLarge(limit: maxHeaderSize)) }
        guard let method = HTTPRequest.Method(rawMethod) else { return .failure(HTTPError(.badRequest, detail: "malformed method")) }
        if let target { return .failure(HTTPError(.badRequest, detail: target.detail)) }
        if let problem = head.problem { return .failure(HTTPError(.badRequest, detail: problem)) }
        if head.transferEncoding != nil, head.contentLength != nil {
            return .failure(HTTPError(.badRequest, detail: "Transfer-Encoding and Content-Length together are refused"))
        }
        if let transferEncoding = head.transferEncoding, head.transferEncodings > 1 || transferEncoding.lowercased() != "chunked" {
            return .failure(HTTPError(.badRequest, detail: "only the chunked transfer-coding is accepted"))
        }
        if head.contentLengths > 1 { return .failure(HTTPError(.badRequest, detail: "more than one Content-Length")) }
        if head.hosts > 1 || (isHTTP11 && head.hosts == 0) {
            return .failure(HTTPError(.badRequest, detail: "HTTP/1.1 requests need exactly one Host header"))
        }
        return .success(method)
    }

    /// An answer without a handler (the gate's refusal, 404, 405, 413): held and answered on the next call when there is
    /// no body, keeping the connection; with a body, answered at once and the connection closed, so the body is never
    /// read.
    private func refuse(
        _ error: HTTPError, route: String, request: Request, hasBody: Bool, connection: Connection, started: MonotonicInstant,
        slot: UnsafeMutablePointer<UnsafeMutableRawPointer?>
    ) -> MHD_Result {
        guard !hasBody else {
            return answerAtOnce(
                error, connection: connection, close: true, method: request.method, path: request.path, route: route, requestID: request.id,
                client: request.remoteAddress, started: started, logger: logger, trace: request.trace)
        }
        slot.pointee = Unmanaged.passRetained(HeldAnswer(response: error.response, request: request, route: route, started: started)).toOpaque()
        return .YES
    }

    /// Answers from libmicrohttpd's thread without running a handler (protections, 404, 405, 413).
    private func answerAtOnce(
        _ error: HTTPError,
        connection: Connection,
        close: Bool,
        method: HTTPRequest.Method,
        path: Substring,
        route: String,
        requestID: String,
        client: String?,
        started: MonotonicInstant,
        logger: Logger,
        trace: RequestTrace?
    ) -> MHD_Result {
        queueAtOnce(
            error.response, connection: connection, close: close, method: method, path: path,
            route: route, requestID: requestID, client: client, started: started, logger: logger, trace: trace)
    }

    /// Queues what an immediate handler answered, from libmicrohttpd's thread: no exchange, no task.
    private func answerImmediately(_ answer: HeldAnswer, connection: Connection) -> MHD_Result {
        var response = answer.response
        if case .stream = response.body.storage {
            Request.logger(logger, requestID: answer.requestID, trace: answer.trace)
                .error("an immediate handler returned a streamed body", metadata: ["route": "\(answer.route)"])
            response = HTTPError(.internalServerError, detail: "internal error; request id \(answer.requestID)").response
        }
        return queueAtOnce(
            // The daemon's logger: `record` adds the request id itself.
            response, connection: connection, close: false, method: answer.method, path: answer.path, route: answer.route,
            requestID: answer.requestID, client: answer.client, started: answer.started, logger: logger, trace: answer.trace)
    }

    /// Queues a buffered response from libmicrohttpd's thread, with no exchange, and records it.
    private func queueAtOnce(
        _ response: Response,
        connection: Connection,
        close: Bool,
        method: HTTPRequest.Method,
        path: Substring,
        route: String,
        requestID: String,
        client: String?,
        started: MonotonicInstant,
        logger: Logger,
        trace: RequestTrace?
    ) -> MHD_Result {
        guard let prepared = prepare(response, requestID: requestID, close: close) else { return .NO }
        defer { prepared.release() }
        let queued = connection.queue(prepared.pointer, status: prepared.status)
        record(
            method: method,
            path: path,
            route: route,
            status: prepared.status,
            bytes: prepared.bodySize,
            started: started,
            requestID: requestID,
            client: client,
            logger: logger,
            termination: .REQUEST_TERMINATED_COMPLETED_OK,
            trace: trace
        )
        return queued ? .YES : .NO
    }

    /// An immediate handler's answer between libmicrohttpd's first call for a request and the next one, with what the
    /// log line and the metrics need of its request (not the whole request: fewer references to count).
    private final class HeldAnswer {
        let response: Response
        let method: HTTPRequest.Method
        let path: Substring
        let requestID: String
        let client: String?
        let trace: RequestTrace?
        let route: String
        let started: MonotonicInstant

        /// `request` borrowed: its fields are copied out one by one, not the whole request first.
        init(response: Response, request: borrowing Request, route: String, started: MonotonicInstant) {
            self.response = response
            method = request.method
            path = request.path
            requestID = request.id
            client = request.remoteAddress
            trace = request.trace
            self.route = route
            self.started = started
        }
    }

    // MARK: C callbacks (static members of a nonisolated type: they run on libmicrohttpd's threads)

    /// What the first call gathers from the connection.
    private struct Head {
        var fields = RequestFields()
        var query: [(name: String, value: String?)] = []
        var problem: String?
        /// Bytes of header names and values and of query arguments, for the header budget.
        var size = 0
        // The fields the protections and routing need, noted as they pass (saves looking through `fields`).
        var hosts = 0
        var contentLength: String?
        var contentLengths = 0
        var transferEncoding: String?
        var transferEncodings = 0
        var contentType: String?
        var requestID: String?
        var forwardedFor: [String] = []
    }

    private static let collectHeader: MHD_KeyValueIteratorN = { context, _, key, keySize, value, valueSize in
        let head = context!.assumingMemoryBound(to: Head.self)
        head.pointee.size += keySize + valueSize
        let nameBytes = UnsafeRawBufferPointer(start: key, count: keySize)
        let text = value.map { String(decoding: UnsafeRawBufferPointer(start: $0, count: valueSize), as: UTF8.self) } ?? ""
        if let (name, known) = CommonFieldNames.find(nameBytes) {
            head.pointee.fields.append(name, text)
            switch known {
            case .host: head.pointee.hosts += 1
            case .contentLength:
                head.pointee.contentLengths += 1
                if head.pointee.contentLength == nil { head.pointee.contentLength = text }
            case .transferEncoding:
                head.pointee.transferEncodings += 1
                if head.pointee.transferEncoding == nil { head.pointee.transferEncoding = text }
            case .contentType: head.pointee.contentType = text
            case .requestID: head.pointee.requestID = text
            case .forwardedFor: head.pointee.forwardedFor.append(text)
            default: break
            }
        } else if let name = HTTPField.Name(String(decoding: nameBytes, as: UTF8.self)) {
            head.pointee.fields.append(name, text)
        } else {
            head.pointee.problem = "malformed header field name"
        }
        return .YES
    }

    private static let collectArgument: MHD_KeyValueIteratorN = { context, _, key, keySize, value, valueSize in
        let head = context!.assumingMemoryBound(to: Head.self)
        head.pointee.size += keySize + valueSize
        let name = String(decoding: UnsafeRawBufferPointer(start: key, count: keySize), as: UTF8.self)
        let text = value.map { String(decoding: UnsafeRawBufferPointer(start: $0, count: valueSize), as: UTF8.self) }
        head.pointee.query.append((name, text))
        return .YES
    }

    private static let access: MHD_AccessHandlerCallback = { context, connection, url, method, version, data, size, slot in
        guard let context, let connection, let slot, let size else { return .NO }
        let daemon = Unmanaged<Daemon>.fromOpaque(context).takeUnretainedValue()
        // The first call finds the slot empty, or holding what `inspectTarget` found wrong with the path.
        let target = slot.pointee.flatMap(TargetProblem.init(marker:))
        guard let held = slot.pointee, target == nil else {
            slot.pointee = nil
            return daemon.begin(
                connection: connection,
                url: url.map { String(cString: $0) } ?? "/",
                method: method.map { String(cString: $0) } ?? "",
                isHTTP11: version.map { strcmp($0, "HTTP/1.1") == 0 } ?? false,
                target: target,
                slot: slot
            )
        }
        guard let exchange = Unmanaged<AnyObject>.fromOpaque(held).takeUnretainedValue() as? Exchange else {
            slot.pointee = nil
            let answer = Unmanaged<HeldAnswer>.fromOpaque(held).takeRetainedValue()
            return daemon.answerImmediately(answer, connection: Connection(pointer: connection))
        }
        if size.pointee > 0 {
            let accepted = exchange.receive(UnsafeRawBufferPointer(start: data, count: size.pointee))
            size.pointee = 0
            return accepted ? .YES : .NO
        }
        return exchange.requestCompleted() ? .YES : .NO
    }

    private static let completed: MHD_RequestCompletedCallback = { context, connection, slot, termination in
        guard let context else { return }
        if let connection { Unmanaged<Daemon>.fromOpaque(context).takeUnretainedValue().connections.requestEnded(connection) }
        guard let slot, let held = slot.pointee else { return }
        slot.pointee = nil
        // A request that ended before its first access call may hold `inspectTarget`'s marker: nothing to release.
        guard TargetProblem(marker: held) == nil else { return }
        // A held answer the connection closed before sending is just released.
        (Unmanaged<AnyObject>.fromOpaque(held).takeRetainedValue() as? Exchange)?.connectionClosed(termination)
    }

    /// A connection opened or closed: kept in the connection table.
    private static let connectionChanged: MHD_NotifyConnectionCallback = { context, connection, _, change in
        guard let context, let connection else { return }
        let table = Unmanaged<Daemon>.fromOpaque(context).takeUnretainedValue().connections
        switch change {
        case .CONNECTION_NOTIFY_STARTED:
            table.opened(
                connection, descriptor: herald_connection_socket(connection), peer: herald_client_address(connection).flatMap(SocketAddress.describe))
        case .CONNECTION_NOTIFY_CLOSED: table.closed(connection)
        default: break
        }
    }

    /// Checks the raw request target before libmicrohttpd decodes it (see ``TargetProblem``).
    private static let inspectTarget: herald_uri_callback = { _, uri, _ in
        guard let uri else { return nil }
        return TargetProblem.find(in: uri)?.marker
    }

    private static let log: MHD_LogCallback = { context, format, arguments in
        guard let context, let format, let arguments else { return }
        let daemon = Unmanaged<Daemon>.fromOpaque(context).takeUnretainedValue()
        var buffer = [CChar](repeating: 0, count: 512)
        _ = vsnprintf(&buffer, buffer.count, format, arguments)
        let message = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        // That one follows a stream's -2: a producer that failed (logged where it failed) or a client that left.
        let expected = message.hasPrefix("Closing connection (application error generating response)")
        daemon.logger.log(level: expected ? .debug : .warning, "libmicrohttpd: \(message.trimmingSuffix())")
    }
}

extension String {
    fileprivate func trimmingSuffix() -> Substring {
        self[..<(self.lastIndex { !$0.isWhitespace }.map { self.index(after: $0) } ?? startIndex)]
    }
}
