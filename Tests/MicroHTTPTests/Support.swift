import AsyncHTTPClient
import Foundation
import Logging
import MicroHTTP
import NIOCore
import ServiceLifecycle
import Synchronization
import Testing

/// Runs `router` on 127.0.0.1 with a free port under a `ServiceGroup` while `body` runs, then shuts down gracefully.
func withLiveServer<T: Sendable>(
    _ router: Router,
    configuration: ServerConfiguration = ServerConfiguration(),
    _ body: @Sendable (_ port: Int, _ group: ServiceGroup) async throws -> T
) async throws -> T {
    var configuration = configuration
    configuration.host = "127.0.0.1"
    configuration.port = 0
    var logger = Logger(label: "MicroHTTPTests")
    logger.logLevel = .warning
    let (ports, portContinuation) = AsyncStream.makeStream(of: Int.self)
    let server = Server(router: router, configuration: configuration, logger: logger) { port in
        portContinuation.yield(port)
        portContinuation.finish()
    }
    let group = ServiceGroup(configuration: .init(services: [server], logger: logger))
    return try await withThrowingTaskGroup(of: Void.self) { tasks in
        tasks.addTask { try await group.run() }
        let port = try #require(await ports.first { _ in true })
        do {
            let result = try await body(port, group)
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
            return result
        } catch {
            await group.triggerGracefulShutdown()
            try? await tasks.waitForAll()
            throw error
        }
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
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw SocketError(call: "socket") }
    defer { close(fd) }
    var timeout = timeval(tv_sec: 5, tv_usec: 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = in_port_t(UInt16(port).bigEndian)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    let connected = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard connected == 0 else { throw SocketError(call: "connect") }
    _ = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    var received: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 65536)
    while true {
        let n = recv(fd, &buffer, buffer.count, 0)
        if n <= 0 { break }
        received.append(contentsOf: buffer[0..<n])
    }
    return String(decoding: received, as: UTF8.self)
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
