import Foundation
import GRDB
import HeraldCore
import HeraldStorage

/// Webhook endpoints, the events a job's end makes, and their deliveries: what the routes and the dispatcher read
/// and write. Every client-facing call takes the caller's tenant.
struct SQLiteWebhookRepository: WebhookRepository {
    let pool: DatabasePool

    // MARK: Endpoints

    /// Records a new endpoint of `tenant`, signed with `secret`.
    func insert(_ webhook: Webhook, tenant: Tenant, secret: String) async throws {
        try await pool.write { db in
            try db.run(
                "INSERT INTO webhooks (id, tenant, url, events, secret, disabled, created_at) VALUES (?, ?, ?, ?, ?, 0, ?)",
                [webhook.id, tenant.rawValue, webhook.url, try Self.eventsJSON(webhook.events), secret, webhook.createdAt.rfc3339]
            )
        }
    }

    /// The endpoint with this id; nil if `tenant` has none.
    func find(id: WebhookID, tenant: Tenant) async throws -> Webhook? {
        try await pool.read { db in
            try Row.fetchOne(db.cachedStatement(sql: "SELECT * FROM webhooks WHERE id = ? AND tenant = ?"), arguments: [id, tenant.rawValue])
                .map(Self.webhook)
        }
    }

    /// One page of the tenant's endpoints, newest first, strictly after `cursor`.
    func list(tenant: Tenant, limit: Int, after cursor: HeraldCore.Cursor?) async throws -> Page<Webhook> {
        try await pool.read { db in
            let rows = try Rows.listRows(db, table: "webhooks", tenant: tenant, state: nil, limit: limit, after: cursor)
            return Page(fetched: try rows.map(Self.webhook), limit: limit, cursor: \.cursor)
        }
    }

    /// Removes the endpoint and its deliveries (pending ones are never sent); false if `tenant` has no such endpoint.
    func delete(id: WebhookID, tenant: Tenant) async throws -> Bool {
        try await pool.write { db in
            try db.run("DELETE FROM webhooks WHERE id = ? AND tenant = ?", [id, tenant.rawValue])
            return db.changesCount == 1
        }
    }

    /// One page of the endpoint's deliveries, newest first; nil if `tenant` has no such endpoint.
    func deliveries(
        of id: WebhookID, tenant: Tenant, limit: Int, after cursor: HeraldCore.Cursor?
    ) async throws -> Page<WebhookDelivery>? {
        try await pool.read { db in
            guard try Bool.fetchOne(db, sql: "SELECT 1 FROM webhooks WHERE id = ? AND tenant = ?", arguments: [id, tenant.rawValue]) != nil
            else { return nil }
            var arguments: StatementArguments = [id]
            var after = ""
            if let cursor {
                after = "AND (d.created_at, d.id) < (?, ?)"
                arguments += [cursor.createdAt.rfc3339, cursor.id]
            }
            arguments += [max(limit, 0) + 1]
            let rows = try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT d.*, e.type FROM webhook_deliveries d JOIN webhook_events e ON e.id = d.event_id
                        WHERE d.webhook_id = ? \(after) ORDER BY d.created_at DESC, d.id DESC LIMIT ?
                        """),
                arguments: arguments
            )
            return Page(fetched: try rows.map(Self.delivery), limit: limit, cursor: \.cursor)
        }
    }

    // MARK: The outbox

    /// Inside the transaction that ends `jobID`: one event, and a delivery to each of its tenant's endpoints that
    /// takes the event's type and is not disabled. Nothing when there is none.
    static func enqueue(_ db: Database, jobID: JobID, postID: PostID) throws {
        guard
            let row = try Row.fetchOne(db.cachedStatement(sql: "SELECT tenant, state, traceparent FROM jobs WHERE id = ?"), arguments: [jobID]),
            let state = JobState(rawValue: row["state"]), let type = WebhookEventType(ending: state)
        else { return }
        let endpoints = try String.fetchAll(
            db.cachedStatement(
                sql: """
                    SELECT id FROM webhooks
                    WHERE tenant = ? AND disabled = 0 AND EXISTS (SELECT 1 FROM json_each(webhooks.events) WHERE value = ?)
                    """),
            arguments: [row["tenant"] as String, type.rawValue]
        )
        guard !endpoints.isEmpty else { return }
        guard let job = try Rows.job(db, id: jobID), let post = try Rows.post(db, id: postID) else {
            throw UnreadableRow(table: "jobs", id: jobID.rawValue, reason: "has no job or post to announce")
        }
        let now = Timestamp.now()
        let event = WebhookEvent(type: type, timestamp: job.finishedAt ?? now, job: job, post: post)
        let eventID = Identifier.generate(at: now)
        try db.run(
            "INSERT INTO webhook_events (id, type, body, created_at, traceparent) VALUES (?, ?, ?, ?, ?)",
            [eventID, type.rawValue, Data(event.json), now.rfc3339, row["traceparent"] as String?]
        )
        for endpoint in endpoints {
            try db.run(
                """
                INSERT INTO webhook_deliveries (id, webhook_id, event_id, status, next_attempt_at, created_at)
                VALUES (?, ?, ?, 'pending', ?, ?)
                """,
                [DeliveryID.generate(at: now), endpoint, eventID, now.rfc3339, now.rfc3339]
            )
        }
    }

    // MARK: The dispatcher's side

    /// Claims up to `limit` pending deliveries due at `now`, oldest due first, each due again only at `leaseUntil`.
    /// Read first, written only when something is due: an idle dispatcher commits nothing.
    func claimDue(now: Timestamp, leaseUntil: Timestamp, limit: Int, by replica: String) async throws -> [PendingDelivery] {
        let due = try await pool.read { db in
            try String.fetchAll(
                db.cachedStatement(
                    sql: "SELECT id FROM webhook_deliveries WHERE status = 'pending' AND next_attempt_at <= ? ORDER BY next_attempt_at LIMIT ?"),
                arguments: [now.rfc3339, limit])
        }
        guard !due.isEmpty else { return [] }
        return try await pool.write { db in
            try db.run(
                """
                UPDATE webhook_deliveries SET next_attempt_at = ?, claimed_by = ?
                WHERE id IN (\(databaseQuestionMarks(count: due.count))) AND status = 'pending' AND next_attempt_at <= ?
                """,
                [leaseUntil.rfc3339, replica] + StatementArguments(due) + [now.rfc3339])
            let rows = try Row.fetchAll(
                db,
                sql: """
                    SELECT d.id, d.webhook_id, d.event_id, d.attempts, w.url, w.secret, w.disabled, e.body, e.traceparent
                    FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id JOIN webhook_events e ON e.id = d.event_id
                    WHERE d.id IN (\(databaseQuestionMarks(count: due.count))) AND d.next_attempt_at = ?
                    ORDER BY d.created_at, d.id
                    """,
                arguments: StatementArguments(due) + [leaseUntil.rfc3339])
            return rows.map { row in
                PendingDelivery(
                    id: row["id"], webhookID: row["webhook_id"], eventID: row["event_id"], attempts: row["attempts"], url: row["url"],
                    secret: row["secret"], endpointDisabled: (row["disabled"] as Int) != 0, body: [UInt8](row["body"] as Data),
                    traceparent: row["traceparent"])
            }
        }
    }

    /// The claims of `replica` (every one when nil) dropped: due at `now`.
    func releaseClaims(heldBy replica: String?, now: Timestamp) async throws -> Int {
        try await pool.write { db in
            try db.run(
                """
                UPDATE webhook_deliveries SET next_attempt_at = ?, claimed_by = NULL
                WHERE status = 'pending' AND claimed_by IS NOT NULL AND (? IS NULL OR claimed_by = ?)
                """,
                [now.rfc3339, replica, replica])
            return db.changesCount
        }
    }

    /// When the next pending delivery is due; nil when none is pending.
    func nextDue() async throws -> Timestamp? {
        try await pool.read { db in
            try String.fetchOne(db.cachedStatement(sql: "SELECT min(next_attempt_at) FROM webhook_deliveries WHERE status = 'pending'"))
                .flatMap(Timestamp.init(rfc3339:))
        }
    }

    /// Records one attempt of `id` (its count grows by one) and what it came to.
    func record(_ id: DeliveryID, _ outcome: DeliveryOutcome, now: Timestamp) async throws {
        try await pool.write { db in
            switch outcome {
            case .delivered(let statusCode):
                try db.run(
                    """
                    UPDATE webhook_deliveries SET attempts = attempts + 1, status = 'delivered', last_status_code = ?, last_error = NULL,
                        next_attempt_at = NULL, delivered_at = ?, claimed_by = NULL WHERE id = ? AND status = 'pending'
                    """, [statusCode, now.rfc3339, id])
            case .retry(let statusCode, let error, let next):
                try db.run(
                    """
                    UPDATE webhook_deliveries SET attempts = attempts + 1, last_status_code = ?, last_error = ?, next_attempt_at = ?,
                        claimed_by = NULL
                    WHERE id = ? AND status = 'pending'
                    """, [statusCode, error, next.rfc3339, id])
            case .failed(let statusCode, let error, let disable):
                try db.run(
                    """
                    UPDATE webhook_deliveries SET attempts = attempts + 1, status = 'failed', last_status_code = ?, last_error = ?,
                        next_attempt_at = NULL, claimed_by = NULL WHERE id = ? AND status = 'pending'
                    """, [statusCode, error, id])
                if disable {
                    try db.run(
                        "UPDATE webhooks SET disabled = 1 WHERE id = (SELECT webhook_id FROM webhook_deliveries WHERE id = ?)", [id])
                }
            }
        }
    }

    /// A pending delivery whose endpoint is disabled is failed without an attempt.
    func abandon(_ id: DeliveryID, reason: String) async throws {
        try await pool.write { db in
            try db.run(
                "UPDATE webhook_deliveries SET status = 'failed', last_error = ?, next_attempt_at = NULL, claimed_by = NULL WHERE id = ? AND status = 'pending'",
                [reason, id])
        }
    }

    // MARK: Lifecycle

    /// Forgets deliveries created before `cutoff`, and the events no delivery refers to any more. Returns how many
    /// deliveries went.
    func expire(before cutoff: Timestamp) async throws -> Int {
        try await pool.write { db in
            try db.run("DELETE FROM webhook_deliveries WHERE created_at < ?", [cutoff.rfc3339])
            let deleted = db.changesCount
            try db.run(
                "DELETE FROM webhook_events WHERE NOT EXISTS (SELECT 1 FROM webhook_deliveries WHERE event_id = webhook_events.id)")
            return deleted
        }
    }

    // MARK: Rows

    /// The `events` column: a JSON array of the types' names.
    private static func eventsJSON(_ events: [WebhookEventType]) throws -> String {
        String(decoding: try JSONEncoder().encode(events), as: UTF8.self)
    }

    private static func webhook(_ row: Row) throws -> Webhook {
        guard let events = try? JSONDecoder().decode([WebhookEventType].self, from: Data((row["events"] as String).utf8)),
            let createdAt = Timestamp(rfc3339: row["created_at"])
        else { throw UnreadableRow(table: "webhooks", id: row["id"]) }
        return Webhook(id: row["id"], url: row["url"], events: events, disabled: (row["disabled"] as Int) != 0, createdAt: createdAt)
    }

    private static func delivery(_ row: Row) throws -> WebhookDelivery {
        guard let type = WebhookEventType(rawValue: row["type"]), let status = WebhookDelivery.Status(rawValue: row["status"]),
            let createdAt = Timestamp(rfc3339: row["created_at"])
        else { throw UnreadableRow(table: "webhook_deliveries", id: row["id"]) }
        let next = Rows.optionalTimestamp(row["next_attempt_at"])
        let delivered = Rows.optionalTimestamp(row["delivered_at"])
        guard next.isReadable, delivered.isReadable else { throw UnreadableRow(table: "webhook_deliveries", id: row["id"]) }
        return WebhookDelivery(
            id: row["id"], eventID: row["event_id"], type: type, attempts: row["attempts"], status: status,
            lastStatusCode: row["last_status_code"], lastError: row["last_error"], nextAttemptAt: next.value,
            deliveredAt: delivered.value, createdAt: createdAt)
    }
}
