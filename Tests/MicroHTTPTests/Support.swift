import AsyncHTTPClient
import Foundation
import HeraldTestSupport
import Logging
import MicroHTTP
import NIOCore
import ServiceLifecycle
import Synchronization
import Testing

/// Runs `router` on 127.0.0.1 with a free port under a `ServiceGroup` while `body` runs, then shuts down gracefully.
///
/// `logs`, when given, receives the server's log records at info level and above (the access log included).
func withLiveServer<T: Sendable>(
    _ router: Router,
    configuration: ServerConfiguration = ServerConfiguration(),
    logs: CapturedLogs? = nil,
    _ body: @Sendable (_ port: Int, _ group: ServiceGroup) async throws -> T
) async throws -> T {
    var configuration = configuration
    configuration.host = "127.0.0.1"
    configuration.port = 0
    var logger = logs.map { logs in Logger(label: "MicroHTTPTests") { _ in logs } } ?? Logger(label: "MicroHTTPTests")
    logger.logLevel = logs == nil ? .warning : .info
    let (ports, portContinuation) = AsyncStream.makeStream(of: Int.self)
    let server = Server(router: router, configuration: configuration, logger: logger) { port in
        portContinuation.yield(port)
        portContinuation.finish()
    }
    let group = ServiceGroup(configuration: .init(services: [server], logger: logger))
    return try await whileRunning(group) {
        let port = try #require(await ports.first { _ in true })
        return try await body(port, group)
    }
}

/// One shared client for the live tests, with room for many connections to one host.
let httpClient: HTTPClient = {
    var configuration = HTTPClient.Configuration()
    configuration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = 64
    return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
}()

/// Sends `text` as-is over a new TCP connection and reads until the server closes or 5 s pass.
///
/// For requests no well-behaved client would send (smuggling attempts). Blocking I/O runs on a thread of its own.
func rawExchange(port: Int, _ text: String) async throws -> String {
    try await withCheckedThrowingContinuation { continuation in
        Thread.detachNewThread {
            continuation.resume(with: Result { try blockingExchange(port: port, Array(text.utf8)) })
        }
    }
}

struct SocketError: Error { let call: String }

private func blockingExchange(port: Int, _ bytes: [UInt8]) throws -> String {
    let fd = try connectedSocket(port: port)
    defer { close(fd) }
    _ = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    return readToEnd(fd)
}

/// What the server sends on `fd` until it closes (or a read times out), as text.
private func readToEnd(_ fd: Int32) -> String {
    var received: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 65536)
    while true {
        let n = recv(fd, &buffer, buffer.count, 0)
        if n <= 0 { break }
        received.append(contentsOf: buffer[0..<n])
    }
    return String(decoding: received, as: UTF8.self)
}

/// A blocking TCP socket connected to 127.0.0.1:`port`, reads timing out after 5 s; `receiveBuffer` sets `SO_RCVBUF`.
func connectedSocket(port: Int, receiveBuffer: Int32? = nil) throws -> Int32 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw SocketError(call: "socket") }
    var timeout = timeval(tv_sec: 5, tv_usec: 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    if var size = receiveBuffer {
        // Before connect, so the window the client announces stays small.
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
    }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = in_port_t(UInt16(port).bigEndian)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    let connected = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard connected == 0 else {
        close(fd)
        throw SocketError(call: "connect")
    }
    return fd
}

/// Sends `text`, reads until `marker` has arrived (or the server closes, or 5 s pass), then closes the connection.
func rawReadUntil(port: Int, _ text: String, marker: String) async throws -> String {
    try await onThread {
        let fd = try connectedSocket(port: port)
        defer { close(fd) }
        return try exchange(on: fd, text, until: marker)
    }
}

/// Sends `text` and reads the answer as a slow client would, until the server closes: the head, and the bytes after it.
///
/// The client announces a small receive window and pauses 2 ms after every 256 KiB it reads (the pauses make
/// it slow; nothing waits on them). `progress` is told the body bytes read so far.
func slowRawRead(port: Int, _ text: String, progress: @escaping @Sendable (Int) -> Void) async throws -> (head: String, body: [UInt8]) {
    try await onThread {
        let fd = try connectedSocket(port: port, receiveBuffer: 32 << 10)
        defer { close(fd) }
        // Not 5 s: on two cores shared with the suites beside it (and an exit test's 64 MiB upload) the producer's
        // task can wait longer than that for a thread; the test is about order and memory, not speed.
        var timeout = timeval(tv_sec: 60, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        _ = Array(text.utf8).withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        var received: [UInt8] = []
        var bodyStart: Int?
        var buffer = [UInt8](repeating: 0, count: 16 << 10)
        var nextPause = 256 << 10
        while true {
            let n = recv(fd, &buffer, buffer.count, 0)
            if n <= 0 { break }
            received.append(contentsOf: buffer[0..<n])
            if bodyStart == nil, let end = received.firstRange(of: Array("\r\n\r\n".utf8)) { bodyStart = end.upperBound }
            guard let bodyStart else { continue }
            progress(received.count - bodyStart)
            if received.count - bodyStart >= nextPause {
                nextPause += 256 << 10
                usleep(2000)
            }
        }
        let split = bodyStart ?? received.count
        return (String(decoding: received[..<split], as: UTF8.self), Array(received[split...]))
    }
}

/// Sends `bytes` one at a time, `every` apart, until all are sent or the server closes; returns how many were sent.
///
/// A slow client (slowloris): the pacing is the scenario, not a wait for an event.
func trickle(port: Int, _ bytes: [UInt8], every interval: Duration) async throws -> Int {
    try await onThread {
        let fd = try connectedSocket(port: port)
        defer { close(fd) }
        let pause = useconds_t(interval.components.seconds * 1_000_000 + interval.components.attoseconds / 1_000_000_000_000)
        for (index, byte) in bytes.enumerated() {
            var scratch: UInt8 = 0
            // The server closed: the read sees the end of the stream (or a reset).
            if recv(fd, &scratch, 1, Int32(MSG_DONTWAIT)) == 0 || errno == ECONNRESET { return index }
            var value = byte
            guard send(fd, &value, 1, Int32(MSG_NOSIGNAL)) == 1 else { return index }
            usleep(pause)
        }
        return bytes.count
    }
}

/// Sends `text` on a connected blocking socket and reads until `marker` arrives (or the server closes, or 5 s pass).
func exchange(on fd: Int32, _ text: String, until marker: String) throws -> String {
    _ = Array(text.utf8).withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    var received: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 4096)
    while !String(decoding: received, as: UTF8.self).contains(marker) {
        let n = recv(fd, &buffer, buffer.count, 0)
        if n <= 0 { break }
        received.append(contentsOf: buffer[0..<n])
    }
    return String(decoding: received, as: UTF8.self)
}

/// Sends `head`, then `block` `count` times from the same buffer (nothing allocated per block), and reads the answer
/// until the server closes: a client whose memory does not grow with the body.
func rawUpload(port: Int, head: String, block: [UInt8], count: Int) async throws -> String {
    try await onThread {
        let fd = try connectedSocket(port: port)
        defer { close(fd) }
        var timeout = timeval(tv_sec: 60, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let sent = Array(head.utf8).withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        guard sent == head.utf8.count else { throw SocketError(call: "send") }
        try block.withUnsafeBytes { bytes in
            for _ in 0..<count {
                var offset = 0
                while offset < bytes.count {
                    let n = send(fd, bytes.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL))
                    guard n > 0 else { throw SocketError(call: "send") }
                    offset += n
                }
            }
        }
        return readToEnd(fd)
    }
}

/// Runs blocking socket code on a thread of its own, off the cooperative pool.
private func onThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread.detachNewThread { continuation.resume(with: Result { try body() }) }
    }
}

/// Lets N tasks wait until all N have arrived.
final class Gate: Sendable {
    private struct State {
        var arrived = 0
        var waiters: [CheckedContinuation<Void, Never>] = []
        var open = false
    }
    private let state = Mutex(State())
    private let expected: Int

    init(expected: Int) { self.expected = expected }

    /// Counts this arrival and waits until `expected` have arrived (or the gate was opened).
    func arriveAndWait() async {
        await withCheckedContinuation { continuation in
            let release = state.withLock { state -> [CheckedContinuation<Void, Never>] in
                state.arrived += 1
                if state.open || state.arrived >= expected {
                    state.open = true
                    defer { state.waiters = [] }
                    return state.waiters + [continuation]
                }
                state.waiters.append(continuation)
                return []
            }
            for waiter in release { waiter.resume() }
        }
    }

    var arrived: Int { state.withLock { $0.arrived } }

    /// Releases every waiter now and lets later arrivals through.
    func open() {
        let release = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.open = true
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in release { waiter.resume() }
    }
}

/// Peak resident memory of this process in KiB (`VmHWM`), after `reset` clears it to the current size.
enum PeakMemory {
    static func reset() {
        try? "5".write(toFile: "/proc/self/clear_refs", atomically: false, encoding: .utf8)
    }

    static func kibibytes() -> Int {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return 0 }
        let line = status.split(separator: "\n").first { $0.hasPrefix("VmHWM:") } ?? ""
        return Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0
    }
}

extension HTTPClientResponse {
    func text(limit: Int = 1 << 20) async throws -> String {
        String(buffer: try await body.collect(upTo: limit))
    }
}

/// A log handler that keeps every record, for tests that read the access log.
final class CapturedLogs: LogHandler, Sendable {
    struct Record: Sendable {
        var level: Logger.Level
        var message: String
        var metadata: Logger.Metadata
    }

    private let store = Mutex<[Record]>([])

    var records: [Record] { store.withLock { $0 } }

    var logLevel: Logger.Level {
        get { .trace }
        set {}  // the logger's level is set on the `Logger`; this handler keeps whatever reaches it
    }

    var metadata: Logger.Metadata {
        get { [:] }
        set {}
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { nil }
        set {}
    }

    func log(event: LogEvent) {
        store.withLock { $0.append(Record(level: event.level, message: "\(event.message)", metadata: event.metadata ?? [:])) }
    }
}
