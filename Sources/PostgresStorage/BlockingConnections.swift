import HeraldStorage
import Logging
import NIOCore
import NIOPosix
import PostgresNIO
import Synchronization

/// A few connections of their own for the reads that answer on their caller's thread (the status poll on an HTTP
/// thread, a key's lookup by the gate): the thread waits for the answer, the event loop does the I/O.
///
/// Never for a task of the cooperative pool when an `async` path exists: waiting holds the thread. A wait ends when
/// the database is found unreachable (``Reachability``), or at the latest after ``PostgresStorage/stallLimit``; the
/// call then fails, and its connection is dropped and made again by the next call.
final class BlockingConnections: Sendable {
    /// The longest a connection takes to be made (a refused one fails at once).
    static let connectTimeout = TimeAmount.seconds(3)
    /// These connections' `application_name`, telling them apart in `pg_stat_activity`.
    static let applicationName = "herald-blocking"

    /// One connection, made when first needed, used by one caller at a time.
    private final class Slot: Sendable {
        let connection = Mutex<PostgresConnection?>(nil)
    }

    private let slots: [Slot]
    private let next = Atomic(0)
    private let url: DatabaseURL
    private let reachability: Reachability
    private let logger: Logger

    init(url: DatabaseURL, reachability: Reachability, logger: Logger, count: Int = 4) {
        self.url = url
        self.reachability = reachability
        self.logger = logger
        slots = (0..<max(count, 1)).map { _ in Slot() }
    }

    /// Runs `query` on one of the connections, waiting on this thread for its rows.
    func rows(_ query: PostgresQuery) throws -> [PostgresRow] {
        if let problem = reachability.problem { throw StorageUnavailable(reason: problem) }
        let slot = slots[(next.wrappingAdd(1, ordering: .relaxed).oldValue & Int.max) % slots.count]
        return try slot.connection.withLock { connection in
            // One the server closed since its last use (a restart, an idle timeout) is not tried: it would only fail.
            if let stale = connection, stale.isClosed {
                Self.discard(stale)
                connection = nil
            }
            var reused = connection != nil
            while true {
                do {
                    let current = try connection ?? connect()
                    connection = current
                    return try wait(current.query(query, logger: logger), on: current.eventLoop).rows
                } catch {
                    // A failed or late query leaves the connection in doubt: the next call makes another.
                    if let connection { Self.discard(connection) }
                    connection = nil
                    // A kept connection found closed as the query went: once more, on a new one.
                    if reused, let error = error as? PSQLError, Self.closedCodes.contains(error.code) {
                        reused = false
                        continue
                    }
                    throw PostgresStorage.storageError(error)
                }
            }
        }
    }

    /// Errors of a connection that was closed, not of the query sent on it.
    private static let closedCodes: [PSQLError.Code] = [.serverClosedConnection, .clientClosedConnection, .connectionError, .uncleanShutdown]

    /// Closes every connection (at shutdown).
    func close() {
        for slot in slots {
            slot.connection.withLock { connection in
                if let connection { Self.discard(connection) }
                connection = nil
            }
        }
    }

    private func connect() throws -> PostgresConnection {
        let eventLoop = MultiThreadedEventLoopGroup.singleton.any()
        var configuration = try url.connectionConfiguration()
        configuration.options.connectTimeout = Self.connectTimeout
        configuration.options.additionalStartupParameters = [("application_name", Self.applicationName)]
        let connecting = PostgresConnection.connect(on: eventLoop, configuration: configuration, id: 2, logger: logger)
        do {
            return try wait(connecting, on: eventLoop)
        } catch {
            // Late, not failed: a connection that comes after all is closed, not leaked.
            connecting.whenSuccess(Self.discard)
            throw error
        }
    }

    /// Closes `connection`, keeping it alive until it has (it must not end unclosed).
    private static func discard(_ connection: PostgresConnection) {
        connection.close().whenComplete { _ in withExtendedLifetime(connection) {} }
    }

    /// The future's value, or `StorageUnavailable` once the database is found unreachable, or ``DeadlinePassed`` once
    /// the stall limit has passed.
    private func wait<T: Sendable>(_ future: EventLoopFuture<T>, on eventLoop: any EventLoop) throws -> T {
        let promise = eventLoop.makePromise(of: T.self)
        future.cascade(to: promise)
        let limit = PostgresStorage.stallLimit
        let timer = eventLoop.scheduleTask(in: TimeAmount(limit)) { promise.fail(DeadlinePassed(limit: limit)) }
        let watcher = reachability.watch { reason in promise.fail(StorageUnavailable(reason: reason)) }
        defer {
            reachability.unwatch(watcher)
            timer.cancel()
        }
        return try promise.futureResult.wait()
    }
}
