import HTTPTypes
import HeraldCore
import MicroHTTP

/// `GET /v1/jobs`, `GET /v1/jobs/{id}` (with `?wait=N` long-polling), `POST /v1/jobs/{id}/cancel`, `DELETE /v1/jobs/{id}`:
/// HTTP to ``JobService`` calls.
struct JobRoutes {
    let service: JobService
    let events: EventStreams

    func register(in router: inout Router) {
        router.api(.get, "/v1/jobs", scope: .read) { request, caller in
            .json(try await service.list(try ListParameters(request, states: JobState.self), tenant: caller.tenant))
        }
        // A plain status poll is answered on the HTTP thread; a long-poll (?wait=N, N > 0) waits in a task.
        router.api(
            .get, "/v1/jobs/{id}", scope: .read,
            immediate: { request, caller in
                guard try Self.wait(request.queryValue("wait")) == 0 else { return nil }
                let (json, done) = try service.current(try request.parameters.require("id"), tenant: caller.tenant)
                return Self.response(.bytes(json), done: done)
            }
        ) { request, caller in
            let wait = try Self.wait(request.queryValue("wait"))
            let id = try request.parameters.require("id")
            return Self.response(try await service.job(id, tenant: caller.tenant, waitingUpTo: .seconds(wait)))
        }
        router.api(.get, "/v1/jobs/{id}/events", scope: .read) { request, caller in
            try await events.job(
                try request.parameters.require("id"), tenant: caller.tenant,
                lastEventID: request.fields[.lastEventID].flatMap { Int($0.trimmingPrefix(" ")) })
        }
        router.api(.get, "/v1/events", scope: .read) { request, caller in
            try events.tenant(caller.tenant)
        }
        router.api(.post, "/v1/jobs/{id}/cancel", scope: .publish) { request, caller in
            try await cancel(try request.parameters.require("id"), tenant: caller.tenant)
        }
        router.api(.delete, "/v1/jobs/{id}", scope: .publish) { request, caller in
            try await cancel(try request.parameters.require("id"), tenant: caller.tenant)
        }
    }

    /// A job as `GET /v1/jobs/{id}` answers it: `Retry-After: 1` until it is done.
    private static func response(_ job: Job) -> Response {
        response(.bytes(job.json), done: job.done)
    }

    /// A job's JSON as `GET /v1/jobs/{id}` answers it.
    private static func response(_ json: ResponseBody, done: Bool) -> Response {
        Response(headerFields: done ? doneFields : runningFields, body: json)
    }

    /// A done job's fields and a running one's, made once: each answer shares their storage instead of building its own.
    private static let doneFields: HTTPFields = [.contentType: "application/json"]
    private static let runningFields: HTTPFields = [.contentType: "application/json", .retryAfter: "1"]

    /// `?wait=`: absent is 0; else 0 to 30 in plain digits, or 400.
    static func wait(_ raw: String?) throws -> Int {
        guard let raw else { return 0 }
        guard !raw.isEmpty, raw.utf8.count <= 2, raw.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }),
            let seconds = Int(raw), (0...JobService.maxWait).contains(seconds)
        else {
            throw HTTPError(.badRequest, detail: "wait must be an integer from 0 to \(JobService.maxWait) (seconds), got \"\(raw)\"")
        }
        return seconds
    }

    /// 202 with the job (cancelled, or asked to stop); 200 when it was cancelled already.
    private func cancel(_ id: String, tenant: Tenant) async throws -> Response {
        switch try await service.cancel(id, tenant: tenant) {
        case .accepted(let job):
            return .json(job, status: .accepted, headerFields: [.location: "/v1/jobs/\(job.id)"])
        case .alreadyCancelled(let job):
            return .json(job)
        }
    }
}

extension HTTPField.Name {
    /// `Last-Event-ID`: the id of the last event a reconnecting Server-Sent Events client saw.
    static let lastEventID = HTTPField.Name("Last-Event-ID")!
}
