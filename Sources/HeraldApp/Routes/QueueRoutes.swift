import HTTPTypes
import HeraldCore
import MicroHTTP

/// `GET /v1/queue`, `POST /v1/queue/pause`, `POST /v1/queue/resume`: HTTP to ``QueueService`` calls.
struct QueueRoutes {
    let service: QueueService

    func register(in router: inout Router) {
        router.api(.get, "/v1/queue", scope: .read) { _, _ in .json(try await service.status()) }
        router.api(.post, "/v1/queue/pause", scope: .admin) { _, _ in .json(try await service.pause()) }
        router.api(.post, "/v1/queue/resume", scope: .admin) { _, _ in .json(try await service.resume()) }
    }
}
