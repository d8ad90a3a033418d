import HeraldCore
import HeraldStorage

/// Creates, reads and removes a tenant's webhook endpoints: the rules between the webhook routes and storage.
/// Another tenant's id answers exactly as an unknown one.
struct WebhookService {
    let webhooks: any WebhookRepository
    let resolver: any HostResolver
    /// `--webhook-allow-private`: loopback and private addresses are accepted (intranets, tests).
    let allowPrivate: Bool

    /// As sent: a missing `url` (or `null`) is a validation problem (422), a `url` of another JSON type a malformed
    /// body (400).
    struct Draft: Decodable {
        var url: String?
        var events: [String]?
    }

    /// Checks the draft (every problem at once), the URL's addresses last; records the endpoint with a new secret.
    func create(_ draft: Draft, tenant: Tenant) async throws -> CreatedWebhook {
        var issues: [ValidationIssue] = []
        let events: [WebhookEventType]
        if let names = draft.events {
            var seen: [WebhookEventType] = []
            for (index, name) in names.enumerated() {
                guard let type = WebhookEventType(rawValue: name) else {
                    let known = WebhookEventType.allCases.map(\.rawValue).joined(separator: ", ")
                    issues.append(ValidationIssue(pointer: "/events/\(index)", detail: "one of \(known)"))
                    continue
                }
                if seen.contains(type) {
                    issues.append(ValidationIssue(pointer: "/events/\(index)", detail: "\(name) is listed twice"))
                }
                seen.append(type)
            }
            if names.isEmpty { issues.append(ValidationIssue(pointer: "/events", detail: "at least one event type")) }
            events = seen
        } else {
            events = WebhookEventType.allCases
        }
        if let url = draft.url {
            do {
                _ = try WebhookTarget.parse(url)
            } catch {
                issues.append(ValidationIssue(pointer: "/url", detail: error.description))
            }
        } else {
            issues.append(ValidationIssue(pointer: "/url", detail: "the endpoint's absolute http or https URL is required"))
        }
        // Resolved only once the rest is sound: a bad request costs no DNS lookup.
        if issues.isEmpty, let url = draft.url {
            do {
                _ = try await WebhookTarget.resolve(url, resolver: resolver, allowPrivate: allowPrivate)
            } catch {
                issues.append(ValidationIssue(pointer: "/url", detail: error.description))
            }
        }
        guard issues.isEmpty, let url = draft.url else { throw ServiceError.invalid(issues, subject: "webhook") }
        let now = Timestamp.now()
        let webhook = Webhook(id: WebhookID.generate(at: now), url: url, events: events, createdAt: now)
        let secret = WebhookSignature.generateSecret()
        try await webhooks.insert(webhook, tenant: tenant, secret: secret)
        return CreatedWebhook(webhook: webhook, secret: secret)
    }

    func list(tenant: Tenant, limit: Int, after cursor: Cursor?) async throws -> Page<Webhook> {
        try await webhooks.list(tenant: tenant, limit: limit, after: cursor)
    }

    func find(_ id: String, tenant: Tenant) async throws -> Webhook {
        guard let webhookID = WebhookID(validating: id), let webhook = try await webhooks.find(id: webhookID, tenant: tenant) else {
            throw ServiceError.notFound(kind: "webhook", id: id)
        }
        return webhook
    }

    func delete(_ id: String, tenant: Tenant) async throws {
        guard let webhookID = WebhookID(validating: id), try await webhooks.delete(id: webhookID, tenant: tenant) else {
            throw ServiceError.notFound(kind: "webhook", id: id)
        }
    }

    func deliveries(_ id: String, tenant: Tenant, limit: Int, after cursor: Cursor?) async throws -> Page<WebhookDelivery> {
        guard let webhookID = WebhookID(validating: id),
            let page = try await webhooks.deliveries(of: webhookID, tenant: tenant, limit: limit, after: cursor)
        else { throw ServiceError.notFound(kind: "webhook", id: id) }
        return page
    }
}
