import HeraldCore
import HeraldStorage
import Logging
import PostgresNIO
import Synchronization

/// Every replica's committed job changes, announced once each to this replica's ``JobChanges``: those it commits
/// itself at once (``announce(_:)``), the others' as PostgreSQL's notifications bring them (``listen()``).
///
/// A trigger notifies `herald_changes` of each job whose `version` a transaction moved (`j <id> <version> <state>
/// <cancel>`), of queued webhook deliveries (`d`) and of the queue paused or resumed (`q <paused>`), delivered when
/// the transaction commits. A job's version only
/// grows, so a change already announced (this replica's own, heard back) is dropped by its version. Notifications sent
/// while the listener was reconnecting are lost (River's issue 1358): after every (re)connection the active and
/// recently finished jobs are read again and announced if they moved.
final class ChangeFeed: Sendable {
    /// The notification channel of migration 0001's triggers.
    static let channel = "herald_changes"
    /// The listener connection's `application_name`.
    static let applicationName = "herald-listener"
    /// How many jobs' versions are remembered; the oldest half is dropped beyond it.
    private static let remembered = 20_000
    /// How often the listener asks the server whether it still answers, and how long it waits for the answer.
    static let probeInterval = Duration.seconds(1)
    static let probePatience = Duration.seconds(3)
    /// How long the listener waits between refused connections.
    static let retryInterval = Duration.milliseconds(500)

    private struct Known {
        var versions: [JobID: Int] = [:]
        /// The jobs in the order they were first seen, to drop the oldest.
        var order: [JobID] = []
        /// Jobs as status polls last read them: each answers the next polls while its version is the last announced.
        var polled: [JobID: Polled] = [:]
        /// Whether every change is heard: the listener is connected and has caught up (else nothing is answered from
        /// ``polled``, and it is emptied).
        var listening = false
    }

    /// A job as a status poll read it from the database.
    private struct Polled {
        let tenant: Tenant
        let version: Int
        let job: Job
    }

    private let changes: JobChanges
    private let url: DatabaseURL
    private let reachability: Reachability
    private let logger: Logger
    private let known = Mutex(Known())
    /// How many times the listener has connected (for tests: a reconnection is seen).
    private let connections = Atomic(0)
    /// How many status polls were answered from memory (for tests).
    private let pollHits = Atomic(0)

    init(changes: JobChanges, url: DatabaseURL, reachability: Reachability, logger: Logger) {
        self.changes = changes
        self.url = url
        self.reachability = reachability
        self.logger = logger
    }

    /// Announces the changes not announced before, in order.
    func announce(_ list: [JobChange]) {
        guard !list.isEmpty else { return }
        let fresh = known.withLock { known in
            list.filter { change in
                if let version = known.versions[change.jobID] {
                    guard change.version > version else { return false }
                } else {
                    known.order.append(change.jobID)
                }
                known.versions[change.jobID] = change.version
                return true
            }
        }
        known.withLock { known in
            guard known.order.count > Self.remembered else { return }
            let dropped = known.order.prefix(known.order.count / 2)
            for id in dropped {
                known.versions[id] = nil
                known.polled[id] = nil
            }
            known.order.removeFirst(dropped.count)
        }
        changes.publish(fresh)
    }

    // MARK: The status polls' memory

    /// The job as a status poll last read it, if no change of it was announced since and every change is heard: the
    /// poll's answer without a database round trip (another replica's change shows once its notification comes,
    /// within the contract's 250 ms).
    func polledJob(id: JobID, tenant: Tenant) -> Job? {
        polled(id: id, tenant: tenant)?.job
    }

    /// ``polledJob(id:tenant:)`` with the version it was read at.
    func polled(id: JobID, tenant: Tenant) -> (job: Job, version: Int)? {
        let found = known.withLock { known -> (job: Job, version: Int)? in
            guard known.listening, let polled = known.polled[id], polled.tenant == tenant, known.versions[id] == polled.version else {
                return nil
            }
            return (polled.job, polled.version)
        }
        if found != nil { pollHits.add(1, ordering: .relaxed) }
        return found
    }

    /// Remembers `job`, read from the database (or written) at `version`, for the next polls: only if that version is the last
    /// announced (a read ahead of its notification is not kept, and drops what was kept, so reads never go back).
    func rememberPolled(_ job: Job, tenant: Tenant, version: Int) {
        known.withLock { known in
            if known.listening, known.versions[job.id] == version {
                known.polled[job.id] = Polled(tenant: tenant, version: version, job: job)
            } else if known.versions[job.id] ?? -1 < version {
                known.polled[job.id] = nil
            }
        }
    }

    /// Status polls answered from memory so far.
    var polledAnswers: Int { pollHits.load(ordering: .relaxed) }

    /// Whether every change is heard now (the listener is connected and caught up).
    var isListening: Bool { known.withLock { $0.listening } }

    /// Sets whether every change is heard; a gap forgets the polls' memory (a change may have gone unheard).
    private func setListening(_ listening: Bool) {
        known.withLock { known in
            known.listening = listening
            if !listening { known.polled = [:] }
        }
    }

    /// The listener's connections so far.
    var connectionCount: Int { connections.load(ordering: .relaxed) }

    /// Listens until cancelled. A lost connection is made again at once, a refused one every ``retryInterval``; the
    /// database counts as unreachable from a refusal or an unanswered probe until a connection is made.
    func listen() async {
        while !Task.isCancelled {
            var connected = false
            do {
                var configuration = try url.connectionConfiguration()
                // Named, so that an operator (or a test) can tell the listener among the replicas' connections.
                configuration.options.additionalStartupParameters = [("application_name", Self.applicationName)]
                let connection = try await PostgresConnection.connect(configuration: configuration, id: 1, logger: logger)
                connected = true
                reachability.markReachable()
                do {
                    try await connection.listen(on: Self.channel) { notifications in
                        connections.add(1, ordering: .relaxed)
                        try await catchUp(connection)
                        setListening(true)
                        defer { setListening(false) }
                        try await withThrowingTaskGroup { group in
                            group.addTask { await self.probe(connection) }
                            defer { group.cancelAll() }
                            for try await notification in notifications { receive(notification.payload) }
                        }
                    }
                } catch {
                    if !Task.isCancelled {
                        logger.warning("the change listener lost its connection", metadata: ["error": "\(PostgresStartError.reason(error))"])
                    }
                }
                try? await connection.close()
            } catch {
                if PostgresStorage.isUnavailable(error) { reachability.markUnreachable(PostgresStartError.reason(error)) }
                logger.warning("the change listener cannot connect", metadata: ["error": "\(PostgresStartError.reason(error))"])
            }
            if !connected { try? await Task.sleep(for: Self.retryInterval) }
        }
    }

    /// Asks the server every ``probeInterval`` whether it answers, until cancelled or it does not: then the database
    /// counts as unreachable and the connection is closed (the listener connects again).
    private func probe(_ connection: PostgresConnection) async {
        while (try? await Task.sleep(for: Self.probeInterval)) != nil {
            do {
                try await Self.ask(connection, within: Self.probePatience, logger: logger).get()
            } catch let error as DeadlinePassed {
                reachability.markUnreachable("PostgreSQL gave the listener \(error)")
                try? await connection.close()
                return
            } catch {
                // The connection failed: the notifications say so, and the listener connects again.
                return
            }
        }
    }

    /// `SELECT 1` on `connection`, failed with ``DeadlinePassed`` unless answered within `patience`.
    ///
    /// The query is sent and its wait timed by the connection's event loop, in one task: a busy machine that runs the
    /// loop late (a busy cooperative pool, a starved thread) delays both alike, and an answer that came while the loop
    /// was late is read before the timer's turn (the loop handles its sockets before its due tasks).
    static func ask(_ connection: PostgresConnection, within patience: Duration, logger: Logger) -> EventLoopFuture<Void> {
        let loop = connection.eventLoop
        return loop.flatSubmit {
            let answered = loop.makePromise(of: Void.self)
            connection.query("SELECT 1", logger: logger).map { _ in }.cascade(to: answered)
            let timer = loop.scheduleTask(in: TimeAmount(patience)) { answered.fail(DeadlinePassed(limit: patience)) }
            answered.futureResult.whenComplete { _ in timer.cancel() }
            return answered.futureResult
        }
    }

    /// Reads the jobs whose notifications may have been missed (every active job, those finished lately) and the
    /// deliveries: whatever moved is announced.
    private func catchUp(_ connection: PostgresConnection) async throws {
        let rows = try await connection.query(
            """
            SELECT \(unescaped: Transaction.changed) FROM jobs
            WHERE state IN ('queued', 'scheduled', 'running') OR finished_at > now() - interval '10 minutes'
            ORDER BY version
            """, logger: logger
        ).collect()
        announce(try rows.map { try Transaction.change(Columns($0)) })
        changes.publishDeliveries()
        let paused = try await connection.query("SELECT paused FROM queue_control WHERE id = 1", logger: logger).collect()
        if let paused = try paused.first?.decode(Bool.self) { changes.publishQueue(paused: paused) }
    }

    /// One notification's payload.
    private func receive(_ payload: String) {
        let parts = payload.split(separator: " ")
        switch parts.first {
        case "j":
            guard parts.count == 5, let version = Int(parts[2]), let state = JobState(rawValue: String(parts[3])) else {
                logger.warning("unreadable change notification", metadata: ["payload": "\(payload)"])
                return
            }
            announce([JobChange(jobID: JobID(String(parts[1])), version: version, state: state, cancelRequested: parts[4] == "1")])
        case "d":
            changes.publishDeliveries()
        case "q":
            changes.publishQueue(paused: parts.count == 2 && parts[1] == "1")
        default:
            logger.warning("unknown change notification", metadata: ["payload": "\(payload)"])
        }
    }
}
