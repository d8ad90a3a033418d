import HTTPTypes
import HeraldCore
import MicroHTTP

/// `POST/GET /v1/webhooks`, `GET/DELETE /v1/webhooks/{id}`, `GET /v1/webhooks/{id}/deliveries`: the tenant's
/// endpoints. Another tenant's id answers exactly as an unknown one.
struct WebhookRoutes {
    let service: WebhookService

    /// A URL and a few event names.
    static let maxBodyBytes = 4 << 10

    func register(in router: inout Router) {
        router.api(.post, "/v1/webhooks", scope: .publish, maxBodySize: Self.maxBodyBytes) { request, caller in
            let draft: WebhookService.Draft = try await JSONRequest.decode(request, upTo: Self.maxBodyBytes, shape: Self.shape)
            let created = try await service.create(draft, tenant: caller.tenant)
            return .json(
                created, status: .created,
                headerFields: [.location: "/v1/webhooks/\(created.webhook.id)", .cacheControl: "no-store"])
        }
        router.api(.get, "/v1/webhooks", scope: .read) { request, caller in
            let query = try ListParameters(unfiltered: request, of: "webhooks")
            return .json(try await service.list(tenant: caller.tenant, limit: query.limit, after: query.cursor))
        }
        router.api(.get, "/v1/webhooks/{id}", scope: .read) { request, caller in
            .json(try await service.find(try request.parameters.require("id"), tenant: caller.tenant))
        }
        router.api(.delete, "/v1/webhooks/{id}", scope: .publish) { request, caller in
            try await service.delete(try request.parameters.require("id"), tenant: caller.tenant)
            return Response(status: .noContent)
        }
        router.api(.get, "/v1/webhooks/{id}/deliveries", scope: .read) { request, caller in
            let query = try ListParameters(unfiltered: request, of: "deliveries")
            return .json(
                try await service.deliveries(try request.parameters.require("id"), tenant: caller.tenant, limit: query.limit, after: query.cursor))
        }
    }

    /// What a webhook request looks like.
    private static let shape = #"{"url": string, "events"?: ["job.succeeded"|"job.failed"|"job.cancelled"]}"#
}
