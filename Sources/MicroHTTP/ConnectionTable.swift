import CMicroHTTPD
import Platform
import Synchronization

/// Every connection libmicrohttpd holds, and whether it is waiting for a request head: the guards libmicrohttpd
/// 0.9.75 lacks against clients that hold connections without making requests.
///
/// - A head must arrive whole within the timeout of the moment the connection began waiting for it (opened, or
///   its previous request done). libmicrohttpd's own timeout restarts at every byte, so a client sending its head
///   a byte a second (slowloris) would hold the connection for ever.
/// - When a new connection makes the table pass its limit, one waiting for a head is closed to make room (as nginx
///   closes idle keep-alive connections when it runs out): a well-behaved client is answered at once, rather than
///   queued behind idle ones in the kernel's backlog, which libmicrohttpd stops accepting from at its own limit.
///   The one closed is the connection that has waited longest among those that never sent a request (a flood of
///   idle connections churns among itself), else the longest-idle keep-alive one; with every connection in a
///   request, the new one itself.
///
/// A connection is closed with `shutdown(2)`: libmicrohttpd sees the end of the stream on its thread and closes
/// it the usual way. The lock is held around `shutdown`, and libmicrohttpd reports a connection closed (which
/// takes the lock) before it closes the descriptor, so a descriptor is never shut after its number was reused.
final class ConnectionTable: Sendable {
    private struct Entry {
        let descriptor: Int32
        /// The peer's numeric address, formatted once for all the connection's requests.
        let peer: String?
        /// Since when the connection has waited for a request head; nil while a request is under way.
        var waitingSince: MonotonicInstant?
        /// Whether a request ever came: kept-alive clients are closed only after connections that never asked anything.
        var served = false
        /// Shut down already: no longer counted, waiting for libmicrohttpd to report it closed.
        var closing = false
        /// A streamed response parked with nothing to send: libmicrohttpd does not look at the socket then, so the
        /// table does, for the client's hang-up.
        var idleStream: StreamSink?
    }

    private struct State {
        var entries: [UInt: Entry] = [:]
        var idleStreams = 0
        var open = 0
        var closedWaiting = 0
        var evicted = 0
    }

    /// Connections open at once, beyond which one is closed.
    let limit: Int
    /// How long a connection may wait for a whole request head.
    let headTimeout: Duration
    /// The same, converted once: every sweep adds it to each waiting connection's start.
    private let headTimeoutNanoseconds: Int
    private let state = Mutex(State())

    init(limit: Int, headTimeout: Duration) {
        self.limit = limit
        self.headTimeout = headTimeout
        headTimeoutNanoseconds = headTimeout.wholeNanoseconds
    }

    /// Open connections (those already shut down not counted).
    var count: Int { state.withLock { $0.open } }

    /// Connections closed so far because they waited too long for a head, and to make room for new ones.
    var closedCounts: (waiting: Int, evicted: Int) { state.withLock { ($0.closedWaiting, $0.evicted) } }

    /// A new connection from `peer`, waiting for its first head; closes one if the table is now over its limit.
    func opened(_ connection: OpaquePointer, descriptor: Int32, peer: String? = nil, now: MonotonicInstant = .now) {
        state.withLock { state in
            state.entries[key(connection)] = Entry(descriptor: descriptor, peer: peer, waitingSince: now)
            state.open += 1
            guard state.open > limit else { return }
            // Never served before kept alive, then the longest waiting: the new connection only when no other waits.
            let new = key(connection)
            var victim: (key: UInt, served: Bool, since: MonotonicInstant)?
            for (key, entry) in state.entries where key != new && !entry.closing {
                guard let since = entry.waitingSince else { continue }
                if let chosen = victim, (entry.served ? 1 : 0, since) >= (chosen.served ? 1 : 0, chosen.since) { continue }
                victim = (key, entry.served, since)
            }
            close(victim?.key ?? new, in: &state)
            state.evicted += 1
        }
    }

    /// Its head arrived: no deadline while the request is under way. Returns the peer it was opened with.
    func requestStarted(_ connection: OpaquePointer) -> String? {
        state.withLock { state in
            guard let index = state.entries.index(forKey: key(connection)) else { return nil }
            // In one access to the entry, in place: reading `peer` through the values' subscript copied the whole entry.
            return Self.started(&state.entries.values[index])
        }
    }

    /// Marks `entry`'s request under way; its peer.
    private static func started(_ entry: inout Entry) -> String? {
        entry.waitingSince = nil
        entry.served = true
        return entry.peer
    }

    /// Its request is done: the connection waits for the next head (keep-alive) from now.
    func requestEnded(_ connection: OpaquePointer, now: MonotonicInstant = .now) {
        state.withLock { state in
            // Through the index: `entries[key]?.waitingSince = now` runs the subscript's coroutine, whose frame was
            // allocated (and the table's storage checked) at every request.
            guard let index = state.entries.index(forKey: key(connection)) else { return }
            state.entries.values[index].waitingSince = now
        }
    }

    /// libmicrohttpd closed it (and will close its descriptor next).
    func closed(_ connection: OpaquePointer) {
        state.withLock { state in
            guard let entry = state.entries.removeValue(forKey: key(connection)) else { return }
            if !entry.closing { state.open -= 1 }
            if entry.idleStream != nil { state.idleStreams -= 1 }
        }
    }

    /// Its streamed response is parked (suspended) until `sink` has bytes: watched for the client's hang-up.
    ///
    /// Called with the sink's lock held; the sink calls ``streamBusy(_:)`` before it resumes the connection, so the
    /// descriptor is only looked at while libmicrohttpd leaves it alone (a suspended connection is never closed).
    func streamIdle(_ connection: OpaquePointer, sink: StreamSink) {
        state.withLock { state in
            guard let index = state.entries.index(forKey: key(connection)), state.entries.values[index].idleStream == nil else { return }
            state.entries.values[index].idleStream = sink
            state.idleStreams += 1
        }
    }

    /// Its streamed response has bytes again (or ends): libmicrohttpd watches the socket itself.
    func streamBusy(_ connection: OpaquePointer) {
        state.withLock { state in
            guard let index = state.entries.index(forKey: key(connection)), state.entries.values[index].idleStream != nil else { return }
            state.entries.values[index].idleStream = nil
            state.idleStreams -= 1
        }
    }

    /// How often parked streams are looked at for a hung-up client.
    static let idleStreamCheck: Duration = .seconds(1)

    /// Ends the parked streams whose client has hung up (sent its FIN, or reset); returns how many.
    @discardableResult
    func endAbandonedStreams() -> Int {
        let abandoned = state.withLock { state -> [StreamSink] in
            guard state.idleStreams > 0 else { return [] }
            var watched: [(key: UInt, sink: StreamSink)] = []
            var descriptors: [pollfd] = []
            for (key, entry) in state.entries {
                guard let sink = entry.idleStream else { continue }
                watched.append((key, sink))
                descriptors.append(pollfd(fd: entry.descriptor, events: Int16(HERALD_POLLRDHUP), revents: 0))
            }
            // Never waits (timeout 0): it only asks the kernel what it already knows.
            guard poll(&descriptors, nfds_t(descriptors.count), 0) > 0 else { return [] }
            var abandoned: [StreamSink] = []
            for (index, descriptor) in descriptors.enumerated() where descriptor.revents & Int16(HERALD_POLLRDHUP | POLLHUP | POLLERR) != 0 {
                state.entries[watched[index].key]?.idleStream = nil
                state.idleStreams -= 1
                abandoned.append(watched[index].sink)
            }
            return abandoned
        }
        // Outside the table's lock: the sink takes its own, then resumes the connection for libmicrohttpd to close.
        for sink in abandoned { sink.clientLeft() }
        return abandoned.count
    }

    /// Closes the connections whose head is overdue; returns how long until the next one could be.
    func closeOverdue(now: MonotonicInstant = .now) -> Duration {
        state.withLock { state in
            var next = headTimeout
            for (key, entry) in state.entries where !entry.closing {
                guard let since = entry.waitingSince else { continue }
                let deadline = since.adding(nanoseconds: headTimeoutNanoseconds)
                if deadline <= now {
                    close(key, in: &state)
                    state.closedWaiting += 1
                } else {
                    next = min(next, deadline - now)
                }
            }
            return next
        }
    }

    /// Closes connections whose head is overdue until cancelled, waking when the next one falls due, and at least
    /// every ``idleStreamCheck`` to end the parked streams whose client left.
    func closeOverdueUntilCancelled() async {
        while !Task.isCancelled {
            // At least 50 ms apart: a burst of deadlines is handled in one pass.
            endAbandonedStreams()
            let wait = max(min(closeOverdue(), Self.idleStreamCheck), .milliseconds(50))
            try? await Task.sleep(for: wait)
        }
    }

    private func close(_ key: UInt, in state: inout State) {
        guard let descriptor = state.entries[key]?.descriptor else { return }
        state.entries[key]?.closing = true
        state.open -= 1
        shutdown(descriptor, Int32(SHUT_RDWR))
    }

    private func key(_ connection: OpaquePointer) -> UInt { UInt(bitPattern: Int(bitPattern: connection)) }
}
