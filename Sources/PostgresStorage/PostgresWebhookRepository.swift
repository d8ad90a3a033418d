import Foundation
import HeraldCore
import HeraldStorage
import NIOCore
import PostgresNIO

/// Webhook endpoints, the events a job's end makes, and their deliveries, on PostgreSQL. Every replica's dispatcher
/// reads the due deliveries; each attempt is recorded by the one that made it.
struct PostgresWebhookRepository: WebhookRepository {
    let storage: PostgresStorage

    private static let columns = "id, url, events::text AS events, disabled, created_at"

    // MARK: Endpoints

    func insert(_ webhook: Webhook, tenant: Tenant, secret: String) async throws {
        let events = String(decoding: try JSONEncoder().encode(webhook.events), as: UTF8.self)
        try await storage.run(
            """
            INSERT INTO webhooks (id, tenant, url, events, secret, created_at)
            VALUES (\(webhook.id), \(tenant.rawValue), \(webhook.url), \(events)::jsonb, \(secret), \(webhook.createdAt))
            """)
    }

    func find(id: WebhookID, tenant: Tenant) async throws -> Webhook? {
        try await storage.run("SELECT \(unescaped: Self.columns) FROM webhooks WHERE id = \(id) AND tenant = \(tenant.rawValue)")
            .first.map { try Self.webhook(Columns($0)) }
    }

    func list(tenant: Tenant, limit: Int, after cursor: Cursor?) async throws -> Page<Webhook> {
        try await storage.read { transaction in
            let rows = try await PostgresRows.listRows(
                transaction, table: "webhooks", columns: Self.columns, tenant: tenant, state: nil, limit: limit, after: cursor)
            return Page(fetched: try rows.map(Self.webhook), limit: limit, cursor: \.cursor)
        }
    }

    func delete(id: WebhookID, tenant: Tenant) async throws -> Bool {
        try await !storage.run("DELETE FROM webhooks WHERE id = \(id) AND tenant = \(tenant.rawValue) RETURNING id").isEmpty
    }

    func deliveries(of id: WebhookID, tenant: Tenant, limit: Int, after cursor: Cursor?) async throws -> Page<WebhookDelivery>? {
        try await storage.read { transaction in
            guard try await transaction.row("SELECT 1 FROM webhooks WHERE id = \(id) AND tenant = \(tenant.rawValue)") != nil else {
                return nil
            }
            let rows = try await transaction.rows(
                """
                SELECT d.id, d.event_id, e.type, d.attempts, d.status, d.last_status_code, d.last_error, d.next_attempt_at, d.delivered_at,
                       d.created_at
                FROM webhook_deliveries d JOIN webhook_events e ON e.id = d.event_id
                WHERE d.webhook_id = \(id)
                  AND (\(cursor?.createdAt)::timestamptz IS NULL OR (d.created_at, d.id) < (\(cursor?.createdAt), \(cursor?.id)))
                ORDER BY d.created_at DESC, d.id DESC LIMIT \(max(limit, 0) + 1)
                """)
            return Page(fetched: try rows.map(Self.delivery), limit: limit, cursor: \.cursor)
        }
    }

    // MARK: The outbox

    /// Inside the transaction that ends `jobID`: one event, and a delivery to each of its tenant's endpoints that takes
    /// the event's type and is not disabled. Nothing when there is none.
    static func enqueue(_ transaction: Transaction, jobID: JobID, postID: PostID) async throws {
        guard let row = try await transaction.row("SELECT tenant, state, traceparent FROM jobs WHERE id = \(jobID)"),
            let state = JobState(rawValue: try row("state")), let type = WebhookEventType(ending: state)
        else { return }
        let endpoints: [String] = try await transaction.rows(
            """
            SELECT id FROM webhooks WHERE tenant = \(try row("tenant", as: String.self)) AND NOT disabled AND events ? \(type.rawValue)
            """
        ).map { try $0("id") }
        guard !endpoints.isEmpty else { return }
        guard let post = try await PostgresRows.post(transaction, id: postID) else {
            throw UnreadableRow(table: "jobs", id: jobID.rawValue, reason: "has no post to announce")
        }
        let job = try await PostgresRows.existingJob(transaction, jobID)
        let now = Timestamp.now()
        let event = WebhookEvent(type: type, timestamp: job.finishedAt ?? now, job: job, post: post)
        let eventID = Identifier.generate(at: now)
        try await transaction.run(
            """
            INSERT INTO webhook_events (id, type, body, created_at, traceparent)
            VALUES (\(eventID), \(type.rawValue), \(ByteBuffer(bytes: event.json)), \(now), \(try row("traceparent", as: String?.self)))
            """)
        let deliveries = endpoints.map { _ in DeliveryID.generate(at: now).rawValue }
        try await transaction.run(
            """
            INSERT INTO webhook_deliveries (id, webhook_id, event_id, status, next_attempt_at, created_at)
            SELECT delivery, endpoint, \(eventID), 'pending', \(now), \(now) FROM unnest(\(deliveries)::text[], \(endpoints)::text[]) AS d (delivery, endpoint)
            """)
        transaction.recorder.recordDeliveries()
    }

    // MARK: The dispatcher's side

    /// One statement: the due rows locked, skipping those another replica is claiming, and pushed to `leaseUntil`.
    func claimDue(now: Timestamp, leaseUntil: Timestamp, limit: Int, by replica: String) async throws -> [PendingDelivery] {
        try await storage.run(
            """
            WITH due AS MATERIALIZED (
                SELECT id FROM webhook_deliveries WHERE status = 'pending' AND next_attempt_at <= \(now)
                ORDER BY next_attempt_at LIMIT \(limit) FOR UPDATE SKIP LOCKED
            ), claimed AS (
                UPDATE webhook_deliveries d SET next_attempt_at = \(leaseUntil), claimed_by = \(replica) FROM due WHERE d.id = due.id
                RETURNING d.id, d.webhook_id, d.event_id, d.attempts, d.created_at
            )
            SELECT c.id, c.webhook_id, c.event_id, c.attempts, w.url, w.secret, w.disabled, e.body, e.traceparent
            FROM claimed c JOIN webhooks w ON w.id = c.webhook_id JOIN webhook_events e ON e.id = c.event_id
            ORDER BY c.created_at, c.id
            """
        ).map { row in
            let row = Columns(row)
            return PendingDelivery(
                id: try row("id"), webhookID: try row("webhook_id"), eventID: try row("event_id"), attempts: try row("attempts"),
                url: try row("url"), secret: try row("secret"), endpointDisabled: try row("disabled"),
                body: Array(buffer: try row("body", as: ByteBuffer.self)), traceparent: try row("traceparent"))
        }
    }

    func releaseClaims(heldBy replica: String?, now: Timestamp) async throws -> Int {
        try await storage.run(
            """
            UPDATE webhook_deliveries SET next_attempt_at = \(now), claimed_by = NULL
            WHERE status = 'pending' AND claimed_by IS NOT NULL AND (\(replica)::text IS NULL OR claimed_by = \(replica))
            RETURNING id
            """
        ).count
    }

    func nextDue() async throws -> Timestamp? {
        try await storage.run("SELECT min(next_attempt_at) FROM webhook_deliveries WHERE status = 'pending'").first?.decode(Timestamp?.self)
    }

    func record(_ id: DeliveryID, _ outcome: DeliveryOutcome, now: Timestamp) async throws {
        switch outcome {
        case .delivered(let statusCode):
            try await storage.run(
                """
                UPDATE webhook_deliveries SET attempts = attempts + 1, status = 'delivered', last_status_code = \(statusCode),
                    last_error = NULL, next_attempt_at = NULL, delivered_at = \(now), claimed_by = NULL
                WHERE id = \(id) AND status = 'pending'
                """)
        case .retry(let statusCode, let error, let next):
            try await storage.run(
                """
                UPDATE webhook_deliveries SET attempts = attempts + 1, last_status_code = \(statusCode), last_error = \(error),
                    next_attempt_at = \(next), claimed_by = NULL
                WHERE id = \(id) AND status = 'pending'
                """)
        case .failed(let statusCode, let error, let disable):
            try await storage.write { transaction in
                try await transaction.run(
                    """
                    UPDATE webhook_deliveries SET attempts = attempts + 1, status = 'failed', last_status_code = \(statusCode),
                        last_error = \(error), next_attempt_at = NULL, claimed_by = NULL
                    WHERE id = \(id) AND status = 'pending'
                    """)
                if disable {
                    try await transaction.run(
                        "UPDATE webhooks SET disabled = true WHERE id = (SELECT webhook_id FROM webhook_deliveries WHERE id = \(id))")
                }
            }
        }
    }

    func abandon(_ id: DeliveryID, reason: String) async throws {
        try await storage.run(
            """
            UPDATE webhook_deliveries SET status = 'failed', last_error = \(reason), next_attempt_at = NULL, claimed_by = NULL
            WHERE id = \(id) AND status = 'pending'
            """)
    }

    // MARK: Lifecycle

    func expire(before cutoff: Timestamp) async throws -> Int {
        try await storage.write { transaction in
            let deleted = try await transaction.run("DELETE FROM webhook_deliveries WHERE created_at < \(cutoff) RETURNING id").count
            try await transaction.run(
                "DELETE FROM webhook_events WHERE NOT EXISTS (SELECT 1 FROM webhook_deliveries WHERE event_id = webhook_events.id)")
            return deleted
        }
    }

    // MARK: Rows

    private static func webhook(_ row: Columns) throws -> Webhook {
        let id: WebhookID = try row("id")
        guard let events = try? JSONDecoder().decode([WebhookEventType].self, from: Data(try row("events", as: String.self).utf8)) else {
            throw UnreadableRow(table: "webhooks", id: id.rawValue)
        }
        return Webhook(id: id, url: try row("url"), events: events, disabled: try row("disabled"), createdAt: try row("created_at"))
    }

    private static func delivery(_ row: Columns) throws -> WebhookDelivery {
        let id: DeliveryID = try row("id")
        guard let type = WebhookEventType(rawValue: try row("type")), let status = WebhookDelivery.Status(rawValue: try row("status")) else {
            throw UnreadableRow(table: "webhook_deliveries", id: id.rawValue)
        }
        return WebhookDelivery(
            id: id, eventID: try row("event_id"), type: type, attempts: try row("attempts"), status: status,
            lastStatusCode: try row("last_status_code"), lastError: try row("last_error"), nextAttemptAt: try row("next_attempt_at"),
            deliveredAt: try row("delivered_at"), createdAt: try row("created_at"))
    }
}
