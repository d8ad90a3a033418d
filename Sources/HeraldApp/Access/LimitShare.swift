import HeraldCore
import HeraldStorage
import Logging
import ServiceLifecycle

/// Keeps this replica's share of the rate and failed-authentication limits, which are totals over the replicas: every
/// `--lease-renew` it counts the replicas alive and gives this one 1/N of each limit. A replica that joins or dies
/// changes the others' shares within that time. On SQLite the one process keeps the whole limit.
struct LimitShare: Service {
    let queue: any QueueRepository
    let gate: AccessGate
    let interval: Duration
    let logger: Logger

    func run() async throws {
        await cancelWhenGracefulShutdown {
            var shared = 1
            while !Task.isCancelled {
                do {
                    let live = max(1, try await queue.liveReplicas(now: .now()).replicas)
                    if live != shared {
                        gate.share(among: live)
                        logger.info("rate limits shared among the replicas alive", metadata: ["replicas": "\(live)"])
                        shared = live
                    }
                } catch {
                    // The last share holds until the count can be read again.
                    logger.debug("cannot count the replicas", metadata: ["error": "\(error)"])
                }
                try? await Task.sleep(for: interval)
            }
        }
    }
}
