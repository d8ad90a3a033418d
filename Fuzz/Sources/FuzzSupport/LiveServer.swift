import Dispatch
import Logging
import MicroHTTP
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A MicroHTTP server on 127.0.0.1 for the whole run, and one blocking keep-alive client of it.
///
/// For the parsing only libmicrohttpd's callbacks reach (header fields, query arguments, multipart bodies). libFuzzer
/// runs the target on one thread, so one request is in flight at a time: a handler may read what the target expects
/// of this input, and trap. A trap on a server thread still ends the run, and libFuzzer saves the input.
public final class LiveServer: @unchecked Sendable {
    // @unchecked Sendable: `socket` is used by libFuzzer's one thread only.

    /// What came back for one request.
    public enum Outcome {
        /// A complete response (after any `100 Continue`).
        case answered(Answer)
        /// The server closed the connection without a byte of response.
        case closed
        /// The server closed in the middle of a response, or sent something that is not HTTP/1.1.
        case malformed([UInt8])
        /// Nothing complete within ``timeout``.
        case timedOut
    }

    /// A parsed response.
    public struct Answer {
        public var status: Int
        /// Field names lowercased, in the order sent.
        public var fields: [(name: String, value: String)]
        public var body: [UInt8]

        /// The first value of field `name` (lowercase).
        public func field(_ name: String) -> String? { fields.first { $0.name == name }?.value }
    }

    /// Seconds to wait for a response before giving up on it.
    public static let timeout = 10

    public let port: Int
    private var socket: Int32 = -1

    /// Starts `router` on a free port and waits until it listens.
    public init(router: Router, configuration: ServerConfiguration = ServerConfiguration()) {
        var configuration = configuration
        configuration.host = "127.0.0.1"
        configuration.port = 0
        var logger = Logger(label: "fuzz")
        logger.logLevel = .critical
        final class Port: @unchecked Sendable { var value = 0 }  // written before the semaphore's signal, read after its wait
        let bound = Port()
        let listening = DispatchSemaphore(value: 0)
        let server = Server(router: router, configuration: configuration, logger: logger) { port in
            bound.value = port
            listening.signal()
        }
        // Not in a ServiceGroup: `run` waits for a graceful shutdown that never comes, and the process just exits.
        Task.detached { try await server.run() }
        listening.wait()
        port = bound.value
    }

    /// Sends `request` (a whole HTTP/1.1 request) and reads one response, on the kept connection when it is open.
    ///
    /// A kept connection the server had closed is replaced and the request sent again; a new one that closes is the answer.
    public func exchange(_ request: [UInt8]) -> Outcome {
        let reused = socket >= 0
        if !reused { socket = Self.connect(port: port) }
        var outcome = sendAndRead(request)
        if reused, case .closed = outcome {
            disconnect()
            socket = Self.connect(port: port)
            outcome = sendAndRead(request)
        }
        switch outcome {
        case .answered(let answer) where answer.field("connection")?.lowercased() != "close": break
        default: disconnect()
        }
        return outcome
    }

    private func sendAndRead(_ request: [UInt8]) -> Outcome {
        var sent = 0
        while sent < request.count {
            let count = request[sent...].withUnsafeBytes { send(socket, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            // A failed send leaves the reading to tell what happened: the server may have answered and closed early.
            guard count > 0 else { break }
            sent += count
        }
        return readResponse()
    }

    private func readResponse() -> Outcome {
        var reader = Reader(socket: socket)
        while true {
            guard let head = reader.head() else { return reader.failure }
            let lines = head.split(separator: "\r\n", omittingEmptySubsequences: false)
            let statusLine = lines[0].split(separator: " ", maxSplits: 2)
            guard statusLine.count >= 2, statusLine[0].hasPrefix("HTTP/1."), let status = Int(statusLine[1]) else {
                return .malformed(reader.received)
            }
            var fields: [(name: String, value: String)] = []
            for line in lines.dropFirst() where !line.isEmpty {
                guard let colon = line.firstIndex(of: ":") else { return .malformed(reader.received) }
                fields.append((line[..<colon].lowercased(), String(line[line.index(after: colon)...].drop { $0 == " " || $0 == "\t" })))
            }
            if (100..<200).contains(status) { continue }
            var answer = Answer(status: status, fields: fields, body: [])
            let length = answer.field("content-length")
            if status == 204 || status == 304 {
                return .answered(answer)
            } else if answer.field("transfer-encoding")?.lowercased() == "chunked" {
                guard let body = reader.chunkedBody() else { return reader.failure }
                answer.body = body
            } else if let length {
                guard let count = Int(length), let body = reader.bytes(count) else { return reader.failure }
                answer.body = body
            } else {
                answer.body = reader.untilClosed()
            }
            return .answered(answer)
        }
    }

    private func disconnect() {
        guard socket >= 0 else { return }
        // Reset rather than close: no TIME_WAIT left behind for each of the run's many connections.
        var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
        setsockopt(socket, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
        close(socket)
        socket = -1
    }

    private static func connect(port: Int) -> Int32 {
        let fd = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        precondition(fd >= 0, "socket: \(errno)")
        var limit = timeval(tv_sec: timeout, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        var noDelay: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &noDelay, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        precondition(result == 0, "connect to 127.0.0.1:\(port): \(errno)")
        return fd
    }

    /// Buffered reads from the socket, remembering why the last one failed.
    private struct Reader {
        let socket: Int32
        private(set) var received: [UInt8] = []
        private var position = 0
        private(set) var failure = Outcome.closed

        init(socket: Int32) { self.socket = socket }

        /// Reads more; false at the end of the stream or on a timeout (``failure`` says which).
        private mutating func fill() -> Bool {
            var buffer = [UInt8](repeating: 0, count: 16 << 10)
            let count = recv(socket, &buffer, buffer.count, 0)
            if count > 0 {
                received += buffer[..<count]
                return true
            }
            failure = count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? .timedOut : (received.isEmpty ? .closed : .malformed(received))
            return false
        }

        /// The next head, without its blank line; decoded leniently.
        mutating func head() -> String? {
            while true {
                if let end = received[position...].firstRange(of: Array("\r\n\r\n".utf8)) {
                    defer { position = end.upperBound }
                    return String(decoding: received[position..<end.lowerBound], as: UTF8.self)
                }
                guard fill() else { return nil }
            }
        }

        mutating func bytes(_ count: Int) -> [UInt8]? {
            while received.count - position < count {
                guard fill() else { return nil }
            }
            defer { position += count }
            return Array(received[position..<position + count])
        }

        mutating func line() -> String? {
            while true {
                if let end = received[position...].firstRange(of: Array("\r\n".utf8)) {
                    defer { position = end.upperBound }
                    return String(decoding: received[position..<end.lowerBound], as: UTF8.self)
                }
                guard fill() else { return nil }
            }
        }

        mutating func chunkedBody() -> [UInt8]? {
            var body: [UInt8] = []
            while true {
                guard let sizeLine = line(), let size = Int(sizeLine.prefix { $0 != ";" }, radix: 16) else { return nil }
                if size == 0 {
                    // Trailer fields, if any, up to the blank line.
                    while true {
                        guard let trailer = line() else { return nil }
                        if trailer.isEmpty { return body }
                    }
                }
                guard let chunk = bytes(size), bytes(2) == Array("\r\n".utf8) else { return nil }
                body += chunk
            }
        }

        mutating func untilClosed() -> [UInt8] {
            while fill() {}
            defer { position = received.count }
            return Array(received[position...])
        }
    }
}

/// A value the target and a handler share: what the target expects of the request in flight, or what the handler saw.
public final class Shared<Value: Sendable>: Sendable {
    private let state: Mutex<Value>

    public init(_ value: Value) { state = Mutex(value) }

    public var value: Value {
        get { state.withLock { $0 } }
        set { state.withLock { $0 = newValue } }
    }
}
