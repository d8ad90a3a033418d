import HTTPTypes
import HeraldCore
import HeraldStorage
import MicroHTTP
import Publishing

/// `GET /v1/jobs`, `GET /v1/jobs/{id}` (with `?wait=N` long-polling), `POST /v1/jobs/{id}/cancel`, `DELETE /v1/jobs/{id}`.
struct JobRoutes {
    let jobs: JobRepository
    /// Plain status polls, read on the HTTP thread.
    let status: JobStatusReader
    let runner: JobRunner
    let events: JobEvents
    let readiness: Readiness

    /// The longest `?wait=` in seconds.
    static let maxWait = 30
    /// A long-poll re-reads the job at least this often even without an event: that covers a change made by another
    /// process sharing the database, and ends the poll soon after draining begins.
    var recheckInterval: Duration = .seconds(1)

    func register(in router: inout Router) {
        router.get("/v1/jobs") { request in
            let query = try ListParameters(request, states: JobState.self)
            let page = try await jobs.list(state: query.state, limit: query.limit, after: query.cursor)
            return try .json(page, encoder: .api)
        }
        // A plain status poll is answered on the HTTP thread; a long-poll (?wait=N, N > 0) waits in a task.
        router.get(
            "/v1/jobs/{id}",
            immediate: { request in
                guard try Self.wait(request.queryValue("wait")) == 0 else { return nil }
                let id = try request.parameters.require("id")
                guard Identifier.isValid(id), let job = try status.job(id: id) else { throw HTTPError.unknown("job", id) }
                return Self.response(job)
            }
        ) { request in
            let id = try request.parameters.require("id")
            let wait = try Self.wait(request.queryValue("wait"))
            return Self.response(try await job(id, waitingUpTo: .seconds(wait)))
        }
        router.post("/v1/jobs/{id}/cancel") { request in
            try await cancel(try request.parameters.require("id"))
        }
        router.delete("/v1/jobs/{id}") { request in
            try await cancel(try request.parameters.require("id"))
        }
    }

    /// A job as `GET /v1/jobs/{id}` answers it: `Retry-After: 1` until it is done.
    private static func response(_ job: Job) -> Response {
        var fields: HTTPFields = [.contentType: "application/json"]
        if !job.done { fields[.retryAfter] = "1" }
        return Response(headerFields: fields, body: .bytes(job.json))
    }

    /// The job, once it is done or `timeout` has passed (or the server drains, or the request is cancelled).
    ///
    /// Waits for the job's events, re-reading it after each (or after ``recheckInterval`` at most): never a
    /// busy loop, and a job that finishes answers at once. The event generation is taken before each read, so a
    /// change landing between the read and the wait is not missed.
    private func job(_ id: String, waitingUpTo timeout: Duration) async throws -> Job {
        guard Identifier.isValid(id) else { throw HTTPError.unknown("job", id) }
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        var generation = events.generation
        guard var job = try await jobs.find(id: id) else { throw HTTPError.unknown("job", id) }
        while !job.done, !readiness.isDraining, !Task.isCancelled {
            let remaining = clock.now.duration(to: deadline)
            guard remaining > .zero else { break }
            await events.waitForChange(of: id, after: generation, timeout: min(remaining, recheckInterval))
            generation = events.generation
            guard let current = try await jobs.find(id: id) else { throw HTTPError.unknown("job", id) }
            job = current
        }
        return job
    }

    /// `?wait=`: absent is 0; else 0 to 30 in plain digits, or 400.
    static func wait(_ raw: String?) throws -> Int {
        guard let raw else { return 0 }
        guard !raw.isEmpty, raw.utf8.count <= 2, raw.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }),
            let seconds = Int(raw), (0...maxWait).contains(seconds)
        else {
            throw HTTPError(.badRequest, detail: "wait must be an integer from 0 to \(maxWait) (seconds), got \"\(raw)\"")
        }
        return seconds
    }

    /// Cancels a queued or scheduled job at once, or asks the runner to stop a running one.
    private func cancel(_ id: String) async throws -> Response {
        guard Identifier.isValid(id) else { throw HTTPError.unknown("job", id) }
        switch try await jobs.requestCancel(id: id, now: .now()) {
        case .cancelledNow(let job):
            // Wakes long-polls on this job: no runner saw the change.
            events.changed(job.id)
            return try .json(job, status: .accepted, headerFields: [.location: "/v1/jobs/\(job.id)"], encoder: .api)
        case .requested(let job):
            await runner.cancel(jobID: job.id)
            return try .json(job, status: .accepted, headerFields: [.location: "/v1/jobs/\(job.id)"], encoder: .api)
        case .alreadyCancelled(let job):
            return try .json(job, encoder: .api)
        case .finished(let job):
            throw HTTPError(.conflict, detail: "job \(job.id) has already \(job.state.rawValue); it cannot be cancelled")
        case .notFound:
            throw HTTPError.unknown("job", id)
        }
    }
}
