import HeraldClient
import Platform
import UnixSignals

/// What a following command has done so far, for its Ctrl-C handler: the job to cancel, the media to clean up.
actor Session {
    private(set) var jobID: String?
    private(set) var staged: [String] = []

    func follow(jobID: String) { self.jobID = jobID }
    func staged(_ mediaID: String) { staged.append(mediaID) }
}

/// Runs `work` with Ctrl-C handled as `herald publish` and `jobs watch` promise.
///
/// The first Ctrl-C cancels the session's job and lets `work` go on following it to its end (so the exit status says
/// how it ended); before there is a job it stops `work`, deletes what was staged and answers 130. A second Ctrl-C
/// leaves at once (130), whatever the first one is still waiting for (a server that does not answer).
func handlingInterrupts(
    session: Session, api: APIClient, display: any Display, _ work: @escaping @Sendable () async throws -> Int32
) async throws
    -> Int32
{
    let signals = await UnixSignalsSequence(trapping: .sigint)
    let (interrupts, interrupted) = AsyncStream.makeStream(of: Void.self)
    return try await withThrowingTaskGroup(of: Int32?.self) { listening in
        // The listener only counts Ctrl-Cs, so that it hears the second one however long the first one's work takes.
        listening.addTask {
            var count = 0
            for await _ in signals {
                count += 1
                guard count > 1 else {
                    interrupted.yield()
                    continue
                }
                display.end()
                printError("herald: left without waiting" + ((await session.jobID).map { "; job \($0) goes on" } ?? ""))
                exit(ExitStatus.interrupted)
            }
            return nil
        }
        defer { listening.cancelAll() }
        return try await following(interrupts, session: session, api: api, display: display, work)
    }
}

/// Runs `work` until it ends or the first interrupt comes before there is a job; cancels the job on an interrupt after.
private func following(
    _ interrupts: AsyncStream<Void>, session: Session, api: APIClient, display: any Display,
    _ work: @escaping @Sendable () async throws -> Int32
) async throws -> Int32 {
    enum Outcome {
        case finished(Int32)
        case interrupted
    }
    return try await withThrowingTaskGroup(of: Outcome.self) { group in
        group.addTask { .finished(try await work()) }
        group.addTask {
            for await _ in interrupts {
                guard let jobID = await session.jobID else { return .interrupted }
                display.note("cancelling job \(jobID)… (Ctrl-C again to leave at once)")
                do {
                    _ = try await api.cancel(jobID: jobID)
                } catch {
                    display.note("could not cancel: \(error)")
                }
            }
            return .interrupted
        }
        defer { group.cancelAll() }
        switch try await group.next() {
        case .finished(let status): return status
        case .interrupted, nil:
            group.cancelAll()
            // The uploads stop with their task; what was staged is of no use without its post.
            while (try? await group.next()) != nil {}
            for id in await session.staged { try? await api.deleteMedia(id: id) }
            display.end()
            printError("herald: interrupted")
            return ExitStatus.interrupted
        }
    }
}

/// The exit status for how a job ended: 0 succeeded, 1 failed, 3 cancelled.
func exitStatus(of state: String) -> Int32 {
    switch state {
    case "succeeded": ExitStatus.succeeded
    case "cancelled": ExitStatus.cancelled
    default: ExitStatus.failed
    }
}
