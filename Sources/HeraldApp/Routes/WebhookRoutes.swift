import HTTPTypes
import HeraldCore
import HeraldStorage
import MicroHTTP

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// `POST/GET /v1/webhooks`, `GET/DELETE /v1/webhooks/{id}`, `GET /v1/webhooks/{id}/deliveries`: the tenant's
/// endpoints. Another tenant's id answers exactly as an unknown one.
struct WebhookRoutes {
    let webhooks: any WebhookRepository
    let resolver: any HostResolver
    /// `--webhook-allow-private`: loopback and private addresses are accepted (intranets, tests).
    let allowPrivate: Bool

    /// A URL and a few event names.
    static let maxBodyBytes = 4 << 10

    func register(in router: inout Router) {
        router.post("/v1/webhooks", maxBodySize: Self.maxBodyBytes) { request in
            let draft: Draft = try await JSONRequest.decode(request, upTo: Self.maxBodyBytes, shape: Self.shape)
            let created = try await create(draft, tenant: try request.caller().tenant)
            return .json(
                created, status: .created,
                headerFields: [.location: "/v1/webhooks/\(created.webhook.id)", .cacheControl: "no-store"])
        }
        router.get("/v1/webhooks") { request in
            let query = try ListParameters(unfiltered: request, of: "webhooks")
            return .json(try await webhooks.list(tenant: try request.caller().tenant, limit: query.limit, after: query.cursor))
        }
        router.get("/v1/webhooks/{id}") { request in
            let id = try request.parameters.require("id")
            guard let webhookID = WebhookID(validating: id), let webhook = try await webhooks.find(id: webhookID, tenant: try request.caller().tenant)
            else { throw HTTPError.unknown("webhook", id) }
            return .json(webhook)
        }
        router.delete("/v1/webhooks/{id}") { request in
            let id = try request.parameters.require("id")
            guard let webhookID = WebhookID(validating: id), try await webhooks.delete(id: webhookID, tenant: try request.caller().tenant)
            else { throw HTTPError.unknown("webhook", id) }
            return Response(status: .noContent)
        }
        router.get("/v1/webhooks/{id}/deliveries") { request in
            let id = try request.parameters.require("id")
            let query = try ListParameters(unfiltered: request, of: "deliveries")
            guard let webhookID = WebhookID(validating: id),
                let page = try await webhooks.deliveries(of: webhookID, tenant: try request.caller().tenant, limit: query.limit, after: query.cursor)
            else { throw HTTPError.unknown("webhook", id) }
            return .json(page)
        }
    }

    /// Checks the draft (every problem at once), the URL's addresses last; records the endpoint with a new secret.
    private func create(_ draft: Draft, tenant: Tenant) async throws -> CreatedWebhook {
        var issues: [HTTPError.FieldError] = []
        let events: [WebhookEventType]
        if let names = draft.events {
            var seen: [WebhookEventType] = []
            for (index, name) in names.enumerated() {
                guard let type = WebhookEventType(rawValue: name) else {
                    let known = WebhookEventType.allCases.map(\.rawValue).joined(separator: ", ")
                    issues.append(HTTPError.FieldError(pointer: "/events/\(index)", detail: "one of \(known)"))
                    continue
                }
                if seen.contains(type) {
                    issues.append(HTTPError.FieldError(pointer: "/events/\(index)", detail: "\(name) is listed twice"))
                }
                seen.append(type)
            }
            if names.isEmpty { issues.append(HTTPError.FieldError(pointer: "/events", detail: "at least one event type")) }
            events = seen
        } else {
            events = WebhookEventType.allCases
        }
        if let url = draft.url {
            do {
                _ = try WebhookTarget.parse(url)
            } catch {
                issues.append(HTTPError.FieldError(pointer: "/url", detail: error.description))
            }
        } else {
            issues.append(HTTPError.FieldError(pointer: "/url", detail: "the endpoint's absolute http or https URL is required"))
        }
        // Resolved only once the rest is sound: a bad request costs no DNS lookup.
        if issues.isEmpty, let url = draft.url {
            do {
                _ = try await WebhookTarget.resolve(url, resolver: resolver, allowPrivate: allowPrivate)
            } catch {
                issues.append(HTTPError.FieldError(pointer: "/url", detail: error.description))
            }
        }
        guard issues.isEmpty, let url = draft.url else {
            throw HTTPError(
                .unprocessableContent, detail: "The webhook has \(issues.count) problem\(issues.count == 1 ? "" : "s").", errors: issues)
        }
        let now = Timestamp.now()
        let webhook = Webhook(id: WebhookID.generate(at: now), url: url, events: events, createdAt: now)
        let secret = WebhookSignature.generateSecret()
        try await webhooks.insert(webhook, tenant: tenant, secret: secret)
        return CreatedWebhook(webhook: webhook, secret: secret)
    }

    /// What a webhook request looks like.
    private static let shape = #"{"url": string, "events"?: ["job.succeeded"|"job.failed"|"job.cancelled"]}"#

    /// As sent: a missing `url` (or `null`) is a validation problem (422), a `url` of another JSON type a malformed
    /// body (400).
    private struct Draft: Decodable {
        var url: String?
        var events: [String]?
    }
}
