import Foundation
import Platform
import Testing

@testable import MicroHTTP

/// A connected pair of sockets: the table shuts `server` down, the test reads `client` to see it.
private struct SocketPair {
    let server: Int32
    let client: Int32

    init() throws {
        var descriptors: [Int32] = [0, 0]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &descriptors) == 0 else { throw SocketError(call: "socketpair") }
        server = descriptors[0]
        client = descriptors[1]
    }

    /// Whether the table shut the server side: the client reads the end of the stream at once.
    var isShut: Bool {
        var byte: UInt8 = 0
        return recv(client, &byte, 1, Int32(MSG_DONTWAIT)) == 0
    }

    func close() {
        Glibc.close(server)
        Glibc.close(client)
    }
}

/// A stand-in for an `MHD_Connection` pointer: the table only uses it as a key.
private func connection(_ number: Int) -> OpaquePointer { OpaquePointer(bitPattern: number * 16)! }

@Suite("Connection table")
struct ConnectionTableTests {
    @Test func aNewConnectionPastTheLimitClosesTheOneThatWaitedLongestForAHead() throws {
        let pairs = try (0..<4).map { _ in try SocketPair() }
        defer { pairs.forEach { $0.close() } }
        let table = ConnectionTable(limit: 2, headTimeout: .seconds(30))
        let start = MonotonicInstant.now
        table.opened(connection(1), descriptor: pairs[0].server, now: start)
        table.opened(connection(2), descriptor: pairs[1].server, now: start + .seconds(1))
        _ = table.requestStarted(connection(1))
        // 1 is in a request, so 2 has waited longest.
        table.opened(connection(3), descriptor: pairs[2].server, now: start + .seconds(2))
        #expect(pairs.map(\.isShut) == [false, true, false, false])
        #expect(table.count == 2)
        // Closed by libmicrohttpd afterwards: counted once.
        table.closed(connection(2))
        #expect(table.count == 2)

        // Every other connection in a request: the new one is the one closed.
        _ = table.requestStarted(connection(3))
        table.opened(connection(4), descriptor: pairs[3].server, now: start + .seconds(3))
        #expect(pairs.map(\.isShut) == [false, true, false, true])
        #expect(table.closedCounts.evicted == 2)
    }

    @Test func connectionsThatNeverAskedAnythingAreClosedBeforeKeptAliveOnes() throws {
        let pairs = try (0..<4).map { _ in try SocketPair() }
        defer { pairs.forEach { $0.close() } }
        let table = ConnectionTable(limit: 3, headTimeout: .seconds(30))
        let start = MonotonicInstant.now
        // 1 was served and waits for its next head since 1 s; 2 and 3 opened later and never sent anything.
        table.opened(connection(1), descriptor: pairs[0].server, now: start)
        _ = table.requestStarted(connection(1))
        table.requestEnded(connection(1), now: start + .seconds(1))
        table.opened(connection(2), descriptor: pairs[1].server, now: start + .seconds(2))
        table.opened(connection(3), descriptor: pairs[2].server, now: start + .seconds(3))
        table.opened(connection(4), descriptor: pairs[3].server, now: start + .seconds(4))
        #expect(pairs.map(\.isShut) == [false, true, false, false])
    }

    @Test func aHeadIsDueWithinTheTimeoutOfWhenTheConnectionBeganWaiting() throws {
        let pairs = try (0..<3).map { _ in try SocketPair() }
        defer { pairs.forEach { $0.close() } }
        let table = ConnectionTable(limit: 10, headTimeout: .seconds(5))
        let start = MonotonicInstant.now
        table.opened(connection(1), descriptor: pairs[0].server, now: start)
        table.opened(connection(2), descriptor: pairs[1].server, now: start)
        table.opened(connection(3), descriptor: pairs[2].server, now: start)
        _ = table.requestStarted(connection(2))
        _ = table.requestStarted(connection(3))
        table.requestEnded(connection(3), now: start + .seconds(4))

        // 1 waited 5 s; 2 is in a request (no deadline); 3 waits for its next head since 4 s, due at 9 s.
        #expect(table.closeOverdue(now: start + .seconds(5)) == .seconds(4))
        #expect(pairs.map(\.isShut) == [true, false, false])
        #expect(table.closeOverdue(now: start + .seconds(9)) == .seconds(5))
        #expect(pairs.map(\.isShut) == [true, false, true])
        #expect(table.closedCounts.waiting == 2)
        #expect(table.count == 1)
    }
}
