import AsyncHTTPClient
import Foundation
import GRDB
import HeraldCore
import HeraldStorage
import HeraldTestSupport
import MicroHTTP
import NIOCore
import NIOHTTP1
import NIOSSL
import Platform
import Publishing
import SQLiteStorage
import Synchronization
import Testing

@testable import HeraldApp

/// `Tests/Support/webhook_receiver.py` on 127.0.0.1: records what it is sent, answers as planned, and checks
/// signatures with the official `standardwebhooks` package. One process per test.
final class WebhookReceiver: Sendable {
    let port: Int
    private let scheme: String
    /// Talks to the control endpoints; trusts the receiver's own certificate when it serves HTTPS.
    private let client: HTTPClient

    var base: String { "\(scheme)://127.0.0.1:\(port)" }

    /// One recorded request.
    struct Received: Sendable {
        var path: String
        var headers: [String: String]
        var body: Data
        var json: [String: Any] { (try? JSONSerialization.jsonObject(with: body) as? [String: Any]) ?? [:] }
    }

    private init(port: Int, scheme: String, client: HTTPClient) {
        self.port = port
        self.scheme = scheme
        self.client = client
    }

    /// Runs `body` with a receiver; with `tls` (a PEM certificate and key), it serves HTTPS.
    static func with<T: Sendable>(
        tls: (certificate: String, key: String)? = nil, _ body: (WebhookReceiver) async throws -> T
    ) async throws -> T {
        let arguments = tls.map { ["--tls-cert", $0.certificate, "--tls-key", $0.key] } ?? []
        return try await withReceiver("webhook_receiver.py", arguments: arguments) { port in
            try await Self.with(port: port, tls: tls, body)
        }
    }

    private static func with<T: Sendable>(
        port: Int, tls: (certificate: String, key: String)?, _ body: (WebhookReceiver) async throws -> T
    ) async throws -> T {
        guard let tls else {
            return try await body(WebhookReceiver(port: port, scheme: "http", client: .shared))
        }
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(tls.certificate))
        configuration.certificateVerification = .noHostnameVerification
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: HTTPClient.Configuration(tlsConfiguration: configuration))
        do {
            let result = try await body(WebhookReceiver(port: port, scheme: "https", client: client))
            try await client.shutdown()
            return result
        } catch {
            try? await client.shutdown()
            throw error
        }
    }

    /// Answers the next requests to `path` with these (a status, `"hang"`, or `["status": 302, "location": …]`).
    func plan(_ path: String, _ responses: [Any]) async throws {
        let body = try JSONSerialization.data(withJSONObject: ["path": path, "responses": responses])
        _ = try await control(.POST, "plan", body: body)
    }

    /// Every request so far, once there are at least `count` (or after 20 s).
    func requests(atLeast count: Int = 0) async throws -> [Received] {
        let data = try await control(.GET, "requests?min=\(count)&timeout=20")
        let list = try #require(try JSONSerialization.jsonObject(with: data) as? [[String: Any]])
        return list.map { entry in
            Received(
                path: entry["path"] as? String ?? "", headers: entry["headers"] as? [String: String] ?? [:],
                body: Data(base64Encoded: entry["body"] as? String ?? "") ?? Data())
        }
    }

    /// Whether `standardwebhooks` verifies each request with `secret`, in order.
    func verify(secret: String) async throws -> [Bool] {
        let data = try await control(.POST, "verify", body: try JSONSerialization.data(withJSONObject: ["secret": secret]))
        let list = try #require(try JSONSerialization.jsonObject(with: data) as? [[String: Any]])
        return list.map { $0["ok"] as? Bool == true }
    }

    private func control(_ method: HTTPMethod, _ path: String, body: Data? = nil) async throws -> Data {
        var request = HTTPClientRequest(url: "\(base)/_control/\(path)")
        request.method = method
        if let body { request.body = .bytes(ByteBuffer(bytes: Array(body))) }
        let response = try await client.execute(request, timeout: .seconds(30))
        return Data(String(buffer: try await response.body.collect(upTo: 16 << 20)).utf8)
    }
}

/// Resolves every name to the addresses given, in turn: what DNS rebinding looks like.
final class ScriptedResolver: HostResolver {
    private let answers: Mutex<[[String]]>

    init(_ answers: [[String]]) { self.answers = Mutex(answers) }

    func addresses(of host: String) async throws -> [String] {
        if AddressRange.isAddress(host) { return [host] }
        return answers.withLock { answers in answers.count > 1 ? answers.removeFirst() : answers[0] }
    }
}

/// Deliveries that reach an end (delivered or failed), as the dispatcher records them: subscribed when made.
final class SettledDeliveries: Sendable {
    private let stream: AsyncStream<DeliveryID>

    init(_ application: Application) {
        let (stream, continuation) = AsyncStream.makeStream(of: DeliveryID.self)
        self.stream = stream
        application.dispatcher.observe { id, outcome in
            if case .retry(_, _, _) = outcome { return }
            continuation.yield(id)
        }
    }

    /// Returns once `count` more deliveries have settled.
    func wait(for count: Int) async {
        var iterator = stream.makeAsyncIterator()
        for _ in 0..<count { _ = await iterator.next() }
    }
}

/// `POST /v1/webhooks` with `fields`; the answer.
func createWebhook(_ base: String, _ fields: [String: Any]) async throws -> Answer {
    try await exchange(.POST, "\(base)/v1/webhooks", contentType: "application/json", body: Array(try JSONSerialization.data(withJSONObject: fields)))
}

/// The endpoint's deliveries, newest first.
func deliveries(_ base: String, _ webhook: String) async throws -> [[String: Any]] {
    try #require(try await exchange(.GET, "\(base)/v1/webhooks/\(webhook)/deliveries").json["data"] as? [[String: Any]])
}

/// Waits for the job to be done (long-polls).
func waitUntilDone(_ base: String, _ job: String) async throws {
    for _ in 0..<10 where try await exchange(.GET, "\(base)/v1/jobs/\(job)?wait=10").json["done"] as? Bool != true {}
}

@Suite("Webhooks", .serialized, .timeLimit(.minutes(3)))
struct WebhookTests {
    private static func allowPrivate(_ configuration: inout HeraldConfiguration) {
        configuration.webhookAllowPrivate = true
        configuration.webhookRetryBase = .milliseconds(50)
    }

    @Test func successFailureAndCancelAreDeliveredSignedAsStandardWebhooksSays() async throws {
        try await WebhookReceiver.with { receiver in
            let store = TestStore()
            try await withHerald(configure: Self.allowPrivate, store: store) { base, _, application in
                let all = try await createWebhook(base, ["url": "\(receiver.base)/all"])
                #expect(all.status == .created)
                #expect(all.headers["Cache-Control"] == ["no-store"])
                let secret = try #require(all.json["secret"] as? String)
                #expect(secret.hasPrefix("whsec_") && Data(base64Encoded: String(secret.dropFirst(6)))?.count == 32)
                #expect(all.json["events"] as? [String] == ["job.succeeded", "job.failed", "job.cancelled"])
                #expect(all.json["disabled"] as? Bool == false)
                let allID = try #require(all.json["id"] as? String)
                #expect(all.headers["Location"] == ["/v1/webhooks/\(allID)"])
                let failures = try await createWebhook(base, ["url": "\(receiver.base)/failures", "events": ["job.failed"]])
                let failuresID = try #require(failures.json["id"] as? String)
                // Another tenant's endpoint hears nothing of this tenant's jobs.
                let admin = try #require(application.initialKey?.secret)
                let other = try await makeKey(base, admin: admin, name: "other", tenant: "b")
                let theirs = try await TestKey.$current.withValue(other.secret) {
                    try await createWebhook(base, ["url": "\(receiver.base)/other"])
                }
                #expect(theirs.status == .created)

                let succeeded = try await createJob(base, ["text": "ok", "media_ids": [try await uploadMedia(base)]])
                // The store refuses this one medium for good: its job fails.
                let refused = try await uploadMedia(base, jpegBytes, type: "image/jpeg")
                store.behave(.failPermanently, forMediaID: MediaID(rawValue: refused))
                let failed = try await createJob(base, ["text": "no", "media_ids": [refused]])
                let cancelled = try await createJob(base, ["text": "later", "scheduled_at": "2099-01-01T00:00:00Z"])
                #expect(try await exchange(.POST, "\(base)/v1/jobs/\(cancelled)/cancel").status == .accepted)

                let received = try await receiver.requests(atLeast: 4)
                #expect(received.count == 4)
                #expect(!received.contains { $0.path == "/other" })
                let toAll = received.filter { $0.path == "/all" }
                var types: [String: String] = [:]
                for request in toAll {
                    let data = try #require(request.json["data"] as? [String: Any])
                    let job = try #require(data["job"] as? [String: Any])
                    types[try #require(job["id"] as? String)] = request.json["type"] as? String
                    #expect((data["post"] as? [String: Any])?["job_id"] as? String == job["id"] as? String)
                    #expect(request.json["timestamp"] as? String == job["finished_at"] as? String)
                    #expect(request.headers["content-type"] == "application/json")
                    #expect(request.headers["user-agent"] == "herald/\(HeraldConfiguration.version)")
                    #expect(request.headers["webhook-signature"]?.hasPrefix("v1,") == true)
                }
                #expect(types == [succeeded: "job.succeeded", failed: "job.failed", cancelled: "job.cancelled"])
                let onlyFailures = received.filter { $0.path == "/failures" }
                #expect(onlyFailures.count == 1 && onlyFailures.first?.json["type"] as? String == "job.failed")
                // The official library verifies every request sent with this secret (the one to /failures has another).
                let verified = try await receiver.verify(secret: secret)
                #expect(zip(received, verified).allSatisfy { $0.path == "/all" ? $1 : !$1 })

                let listed = try await deliveries(base, allID)
                #expect(listed.count == 3)
                for delivery in listed {
                    #expect(delivery["status"] as? String == "delivered" && delivery["attempts"] as? Int == 1)
                    #expect(delivery["last_status_code"] as? Int == 200 && delivery["next_attempt_at"] is NSNull)
                    #expect(delivery["delivered_at"] is String && delivery["last_error"] is NSNull)
                }
                #expect(Set(listed.compactMap { $0["event_id"] as? String }) == Set(toAll.compactMap { $0.headers["webhook-id"] }))
                #expect(try await deliveries(base, failuresID).count == 1)
                // Secrets are shown once: not in the endpoint, not in the list.
                let shown = try await exchange(.GET, "\(base)/v1/webhooks/\(allID)")
                #expect(shown.json["secret"] == nil && shown.json["url"] as? String == "\(receiver.base)/all")
                let list = try #require(try await exchange(.GET, "\(base)/v1/webhooks").json["data"] as? [[String: Any]])
                #expect(list.count == 2 && list.allSatisfy { $0["secret"] == nil })
            }
        }
    }

    @Test func aFailedAttemptIsRetriedWithTheSameWebhookIDUntilItIsDelivered() async throws {
        try await WebhookReceiver.with { receiver in
            try await withHerald(configure: Self.allowPrivate) { base, _, application in
                try await receiver.plan("/hook", [500, 503])
                let webhook = try #require(try await createWebhook(base, ["url": "\(receiver.base)/hook"]).json["id"] as? String)
                let settled = SettledDeliveries(application)
                _ = try await createJob(base)
                let received = try await receiver.requests(atLeast: 3)
                #expect(received.count == 3)
                #expect(Set(received.compactMap { $0.headers["webhook-id"] }).count == 1, "the same event id on every retry")
                #expect(Set(received.map(\.body)).count == 1, "the same bytes on every retry")
                await settled.wait(for: 1)
                let delivery = try #require(try await deliveries(base, webhook).first)
                #expect(delivery["status"] as? String == "delivered" && delivery["attempts"] as? Int == 3)
                #expect(delivery["last_status_code"] as? Int == 200)

                // Forgotten after 7 days, by the minute's sweep (and its event with it).
                let sweeper = try #require(application.services.compactMap { $0 as? Sweeper }.first)
                #expect(await sweeper.sweep(now: Timestamp.now().adding(milliseconds: 6 * 86_400_000)).deliveries == 0)
                #expect(await sweeper.sweep(now: Timestamp.now().adding(milliseconds: 8 * 86_400_000)).deliveries == 1)
                #expect(try await deliveries(base, webhook).isEmpty)
                let events = try await application.sqlite.pool.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM webhook_events") }
                #expect(events == 0)
            }
        }
    }

    /// https: the attempt connects to the address it checked, while TLS sends and verifies the URL's name.
    @Test func anHTTPSEndpointIsReachedAtTheCheckedAddressWithItsNameVerified() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("herald-hooks-tls-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (certificate, key) = try selfSignedCertificate(in: directory, name: "hooks.test", subjectAltName: "DNS:hooks.test")
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(certificate))

        try await WebhookReceiver.with(tls: (certificate, key)) { receiver in
            // Both names resolve to the receiver's address; the certificate names only hooks.test.
            try await withHerald(configure: {
                Self.allowPrivate(&$0)
                $0.webhookAttempts = 1
                // The refused handshake is retried by the client until the attempt's deadline: keep it short.
                $0.webhookTimeout = 2
                $0.webhookResolver = ScriptedResolver([["127.0.0.1"]])
                $0.webhookTLS = tls
            }) { base, _, application in
                let good = try await createWebhook(base, ["url": "https://hooks.test:\(receiver.port)/secure"])
                let goodID = try #require(good.json["id"] as? String)
                let secret = try #require(good.json["secret"] as? String)
                let wrong = try #require(try await createWebhook(base, ["url": "https://wrong.test:\(receiver.port)/wrong"]).json["id"] as? String)
                let settled = SettledDeliveries(application)
                _ = try await createJob(base)
                await settled.wait(for: 2)

                let received = try await receiver.requests()
                #expect(received.map(\.path) == ["/secure"], "the wrong name's certificate check failed: nothing sent there")
                #expect(received.first?.headers["host"] == "hooks.test:\(receiver.port)")
                #expect(try await receiver.verify(secret: secret) == [true])
                #expect(try await deliveries(base, goodID).first?["status"] as? String == "delivered")
                let refused = try #require(try await deliveries(base, wrong).first)
                #expect(refused["status"] as? String == "failed" && refused["last_status_code"] is NSNull)
                // The certificate was checked against the URL's name, though the connection went to 127.0.0.1.
                #expect((refused["last_error"] as? String)?.contains("Couldn't find wrong.test in certificate") == true)
            }
        }
    }

    /// SIGKILL while the delivery's first attempt waits for its answer, after the job's commit wrote it: the restarted
    /// process sends it again, with the same id and bytes, and it is delivered.
    @Test func aDeliveryCommittedWithItsJobSurvivesSIGKILL() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("herald-outbox-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try await WebhookReceiver.with { receiver in
            try await receiver.plan("/hook", ["hang"])
            let arguments = ["--data-dir", directory, "--webhook-allow-private"]
            let first = try await ServingProcess.start(arguments)
            let key = try #require(first.key)
            let hook = Array(try JSONSerialization.data(withJSONObject: ["url": "\(receiver.base)/hook"]))
            let created = try await call(.POST, "\(first.base)/v1/webhooks", key: key, contentType: "application/json", body: hook)
            let answer = try #require(try JSONSerialization.jsonObject(with: Data(created.body.utf8)) as? [String: Any])
            let webhook = try #require(answer["id"] as? String)
            let secret = try #require(answer["secret"] as? String)
            let post = Array(try JSONSerialization.data(withJSONObject: ["text": "outbox"]))
            #expect(try await call(.POST, "\(first.base)/v1/posts", key: key, contentType: "application/json", body: post).status == .accepted)
            #expect(try await receiver.requests(atLeast: 1).count == 1)

            kill(first.process.processIdentifier, SIGKILL)
            first.process.waitUntilExit()
            let second = try await ServingProcess.start(arguments)
            defer {
                second.process.terminate()
                second.process.waitUntilExit()
            }
            let received = try await receiver.requests(atLeast: 2)
            #expect(received.count == 2)
            #expect(received[0].headers["webhook-id"] == received[1].headers["webhook-id"] && received[0].body == received[1].body)
            #expect(try await receiver.verify(secret: secret) == [true, true])
            // The client's view: polled, as a client would (the record follows the answer by a moment).
            var status: String?
            for _ in 0..<200 {
                let listed = try await call(.GET, "\(second.base)/v1/webhooks/\(webhook)/deliveries", key: key)
                let data = (try JSONSerialization.jsonObject(with: Data(listed.body.utf8)) as? [String: Any])?["data"] as? [[String: Any]]
                status = data?.first?["status"] as? String
                if status != "pending" { break }
                try await Task.sleep(for: .milliseconds(50))
            }
            #expect(status == "delivered")
        }
    }

    @Test func whenAttemptsRunOutTheDeliveryFails() async throws {
        try await WebhookReceiver.with { receiver in
            try await withHerald(configure: {
                Self.allowPrivate(&$0)
                $0.webhookAttempts = 2
            }) { base, _, application in
                try await receiver.plan("/hook", [500, 503, 200])
                let webhook = try #require(try await createWebhook(base, ["url": "\(receiver.base)/hook"]).json["id"] as? String)
                let settled = SettledDeliveries(application)
                _ = try await createJob(base)
                await settled.wait(for: 1)
                let delivery = try #require(try await deliveries(base, webhook).first)
                #expect(delivery["status"] as? String == "failed" && delivery["attempts"] as? Int == 2)
                #expect(delivery["last_status_code"] as? Int == 503 && delivery["last_error"] as? String == "HTTP 503")
                #expect(delivery["next_attempt_at"] is NSNull)
                #expect(try await receiver.requests().count == 2)
            }
        }
    }

    @Test func a410DisablesTheEndpointAndRedirectsAreNotFollowed() async throws {
        try await WebhookReceiver.with { receiver in
            try await withHerald(configure: {
                Self.allowPrivate(&$0)
                $0.webhookAttempts = 1
            }) { base, _, application in
                try await receiver.plan("/gone", [410])
                try await receiver.plan("/moved", [["status": 302, "location": "/elsewhere"]])
                let gone = try #require(try await createWebhook(base, ["url": "\(receiver.base)/gone"]).json["id"] as? String)
                let moved = try #require(try await createWebhook(base, ["url": "\(receiver.base)/moved"]).json["id"] as? String)
                let settled = SettledDeliveries(application)
                _ = try await createJob(base)
                await settled.wait(for: 2)
                let goneDelivery = try #require(try await deliveries(base, gone).first)
                #expect(goneDelivery["status"] as? String == "failed" && goneDelivery["last_status_code"] as? Int == 410)
                #expect(try await exchange(.GET, "\(base)/v1/webhooks/\(gone)").json["disabled"] as? Bool == true)
                let movedDelivery = try #require(try await deliveries(base, moved).first)
                #expect(movedDelivery["status"] as? String == "failed" && movedDelivery["last_status_code"] as? Int == 302)
                #expect(try await receiver.requests().allSatisfy { $0.path != "/elsewhere" })

                // A disabled endpoint gets no delivery for the next job's end; an enabled one does.
                let job = try await createJob(base)
                try await waitUntilDone(base, job)
                #expect(try await deliveries(base, gone).count == 1)
                #expect(try await deliveries(base, moved).count == 2)
            }
        }
    }

    @Test func privateAddressesAreRefusedAtRegistrationAndAgainAtDelivery() async throws {
        try await WebhookReceiver.with { receiver in
            // The name resolves to a public address when registered, to loopback when delivered: rebinding.
            let resolver = ScriptedResolver([["93.184.215.14"], ["127.0.0.1"]])
            try await withHerald(configure: { $0.webhookResolver = resolver }) { base, _, application in
                for (url, address) in [
                    ("http://127.0.0.1:\(receiver.port)/x", "127.0.0.1 (loopback)"), ("http://10.1.2.3/", "10.1.2.3 (private)"),
                    ("http://[::1]:8080/", "::1 (loopback)"), ("http://169.254.169.254/latest/meta-data", "169.254.169.254 (link-local)"),
                    ("http://0.0.0.0/", "0.0.0.0 (unspecified)"), ("https://192.168.1.1/", "192.168.1.1 (private)"),
                    ("http://[::ffff:127.0.0.1]/", "(loopback)"), ("http://[fd00::1]/", "fd00::1 (private)"),
                ] {
                    let refused = try await createWebhook(base, ["url": url])
                    #expect(refused.status == .unprocessableEntity, "\(url)")
                    let error = (refused.json["errors"] as? [[String: Any]])?.first
                    #expect(error?["pointer"] as? String == "/url")
                    #expect((error?["detail"] as? String)?.contains(address) == true, "\(url): \(error?["detail"] ?? "")")
                }
                for url in ["ftp://example.com/", "http://user:secret@example.com/", "not a url", "http:///path"] {
                    #expect(try await createWebhook(base, ["url": url]).status == .unprocessableEntity, "\(url)")
                }
                #expect(try await createWebhook(base, ["url": "http://x.test/", "events": ["job.started"]]).status == .unprocessableEntity)
                #expect(try await createWebhook(base, ["url": "http://x.test/", "events": []]).status == .unprocessableEntity)
                // Well-formed JSON that breaks the rules: 422 naming the member, as for posts; the wrong JSON type: 400.
                let missing = try await createWebhook(base, ["events": ["job.failed"]])
                #expect(missing.status == .unprocessableEntity)
                #expect((missing.json["errors"] as? [[String: Any]])?.compactMap { $0["pointer"] as? String } == ["/url"], "\(missing.json)")
                let unnamed = try await createWebhook(base, ["url": NSNull(), "events": ["job.nope"]])
                #expect((unnamed.json["errors"] as? [[String: Any]])?.compactMap { $0["pointer"] as? String } == ["/events/0", "/url"])
                #expect(try await createWebhook(base, ["url": 5]).status == .badRequest)

                let created = try await createWebhook(base, ["url": "http://hooks.example:\(receiver.port)/hook"])
                #expect(created.status == .created)
                let webhook = try #require(created.json["id"] as? String)
                let settled = SettledDeliveries(application)
                _ = try await createJob(base)
                await settled.wait(for: 1)
                let delivery = try #require(try await deliveries(base, webhook).first)
                #expect(delivery["status"] as? String == "failed" && delivery["attempts"] as? Int == 1, "refused, not retried")
                #expect((delivery["last_error"] as? String)?.contains("127.0.0.1 (loopback)") == true)
                // Nothing reached the address the name now points at.
                #expect(try await receiver.requests().isEmpty)
            }
        }
        // The system's resolver: a name for a loopback address is refused too.
        try await withHerald { base, _, _ in
            let refused = try await createWebhook(base, ["url": "http://localhost:9/hook"])
            #expect(refused.status == .unprocessableEntity)
            #expect(((refused.json["errors"] as? [[String: Any]])?.first?["detail"] as? String)?.contains("(loopback)") == true)
        }
    }

    @Test func anotherTenantsEndpointAnswersAsAnUnknownOne() async throws {
        try await withHerald(configure: Self.allowPrivate) { base, _, application in
            let webhook = try #require(try await createWebhook(base, ["url": "http://127.0.0.1:9/hook"]).json["id"] as? String)
            let unknown = WebhookID.generate().rawValue
            let admin = try #require(application.initialKey?.secret)
            let other = try await makeKey(base, admin: admin, name: "other", tenant: "b")
            for (method, suffix) in [(HTTPMethod.GET, ""), (.GET, "/deliveries"), (.DELETE, "")] {
                let theirs = try await call(method, "\(base)/v1/webhooks/\(webhook)\(suffix)", key: other.secret)
                let none = try await call(method, "\(base)/v1/webhooks/\(unknown)\(suffix)", key: other.secret)
                #expect(theirs.status == .notFound)
                #expect(theirs.body.replacingOccurrences(of: webhook, with: "ID") == none.body.replacingOccurrences(of: unknown, with: "ID"))
            }
            let list = try await call(.GET, "\(base)/v1/webhooks", key: other.secret)
            #expect(list.body.contains("\"data\":[]"))
            // The owner still has it, and deletes it.
            #expect(try await exchange(.GET, "\(base)/v1/webhooks/\(webhook)").status == .ok)
            #expect(try await exchange(.DELETE, "\(base)/v1/webhooks/\(webhook)").status == .noContent)
            #expect(try await exchange(.GET, "\(base)/v1/webhooks/\(webhook)").status == .notFound)
        }
    }
}
