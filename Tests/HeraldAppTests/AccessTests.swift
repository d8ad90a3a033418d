import AsyncHTTPClient
import Foundation
import GRDB
import HeraldCore
import HeraldStorage
import Logging
import MicroHTTP
import NIOCore
import NIOHTTP1
import NIOSSL
import SQLiteStorage
import Synchronization
import Testing

@testable import HeraldApp

/// A raw answer: status, headers and the body's bytes as text.
typealias RawAnswer = (status: HTTPResponseStatus, headers: HTTPHeaders, body: String)

/// A one-day self-signed P-256 certificate for `name` (`subjectAltName` such as `IP:127.0.0.1` or `DNS:hooks.test`),
/// made by openssl in `directory`: the PEM files' paths.
func selfSignedCertificate(in directory: String, name: String, subjectAltName: String) throws -> (certificate: String, key: String) {
    let certificate = "\(directory)/\(name)-cert.pem"
    let key = "\(directory)/\(name)-key.pem"
    let openssl = Process()
    openssl.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    openssl.arguments = [
        "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj", "/CN=\(name)",
        "-addext", "subjectAltName=\(subjectAltName)", "-keyout", key, "-out", certificate,
    ]
    openssl.standardError = FileHandle.nullDevice
    try openssl.run()
    openssl.waitUntilExit()
    try #require(openssl.terminationStatus == 0, "openssl made the certificate")
    return (certificate, key)
}

/// A request with an explicit key (nil: no `Authorization`), answered as text.
func call(
    _ method: HTTPMethod, _ url: String, key: String?, contentType: String? = nil, headers: [(String, String)] = [], body: [UInt8]? = nil,
    client: HTTPClient = .shared
) async throws -> RawAnswer {
    var request = HTTPClientRequest(url: url)
    request.method = method
    if let key { request.headers.add(name: "Authorization", value: "Bearer \(key)") }
    if let contentType { request.headers.add(name: "Content-Type", value: contentType) }
    for (name, value) in headers { request.headers.add(name: name, value: value) }
    if let body { request.body = .bytes(ByteBuffer(bytes: body)) }
    let response = try await client.execute(request, timeout: .seconds(30))
    return (response.status, response.headers, String(buffer: try await response.body.collect(upTo: 4 << 20)))
}

/// Makes a key over HTTP with the admin key; returns its secret and id.
func makeKey(
    _ base: String, admin: String, name: String, tenant: String = "default", scope: String = "publish"
) async throws -> (
    secret: String, id: String
) {
    let body = Array(try JSONSerialization.data(withJSONObject: ["name": name, "tenant": tenant, "scope": scope]))
    let answer = try await call(.POST, "\(base)/v1/keys", key: admin, contentType: "application/json", body: body)
    #expect(answer.status == .created, "\(answer.body)")
    let json = try #require(try JSONSerialization.jsonObject(with: Data(answer.body.utf8)) as? [String: Any])
    return (try #require(json["key"] as? String), try #require(json["id"] as? String))
}

/// `GET /v1/keys` with an admin key: the key objects of the first page.
func listKeys(_ base: String, admin: String) async throws -> [[String: Any]] {
    let list = try await call(.GET, "\(base)/v1/keys", key: admin)
    #expect(list.status == .ok)
    return try #require((try JSONSerialization.jsonObject(with: Data(list.body.utf8)) as? [String: Any])?["data"] as? [[String: Any]])
}

/// Log lines, captured whole (message and metadata) for the "no key in any log line" check.
final class CapturedLog: Sendable {
    let lines = Mutex<[String]>([])

    var logger: Logger {
        var logger = Logger(label: "captured") { _ in Handler(log: self) }
        logger.logLevel = .trace
        return logger
    }

    struct Handler: LogHandler {
        let log: CapturedLog
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let all = metadata.merging(event.metadata ?? [:]) { $1 }
            log.lines.withLock { $0.append("\(event.level) \(event.message) \(all.sorted { $0.key < $1.key })") }
        }
    }
}

@Suite("API keys, tenants, scopes, rate limits, TLS", .serialized, .timeLimit(.minutes(3)))
struct AccessTests {
    @Test func everyV1CallNeedsAKeyBeforeRoutingAndBodyLimits() async throws {
        try await withHerald { base, _, application in
            let admin = try #require(application.initialKey?.secret)
            let missing = try await call(.GET, "\(base)/v1/jobs", key: nil)
            #expect(missing.status == .unauthorized)
            #expect(missing.headers["WWW-Authenticate"] == [#"Bearer realm="herald""#])
            #expect(missing.headers["Content-Type"] == ["application/problem+json"])
            let wrong = try await call(.GET, "\(base)/v1/jobs", key: KeySecret.generate())
            #expect(wrong.status == .unauthorized)
            #expect(wrong.headers["WWW-Authenticate"] == [#"Bearer realm="herald", error="invalid_token""#])
            let malformed = try await call(.GET, "\(base)/v1/jobs", key: "not-a-key")
            #expect(malformed.status == .unauthorized)
            // An unknown path and a body far over its limit: 401 all the same, not 404 or 413.
            #expect(try await call(.GET, "\(base)/v1/no-such-thing", key: nil).status == .unauthorized)
            let big = [UInt8](repeating: 0x41, count: 2 << 20)
            #expect(try await call(.POST, "\(base)/v1/posts", key: nil, contentType: "application/json", body: big).status == .unauthorized)
            // With the key: the unknown path is a 404 again.
            #expect(try await call(.GET, "\(base)/v1/no-such-thing", key: admin).status == .notFound)
            #expect(try await call(.GET, "\(base)/v1/jobs", key: admin).status == .ok)
            // Operations need no key.
            for path in ["/healthz", "/readyz", "/metrics", "/openapi.yaml"] {
                #expect(try await call(.GET, "\(base)\(path)", key: nil).status == .ok, "\(path)")
            }
        }
    }

    @Test func theInitialAdminKeyIsMadeOnceIntoAnEmptyDatabase() async throws {
        try await withHerald { _, _, application in
            let created = try #require(application.initialKey)
            #expect(created.key.name == "initial-admin")
            #expect(created.key.scope == .admin)
            #expect(created.key.tenant == .default)
            #expect(created.secret.hasPrefix("hrld_"))
            #expect(KeySecret.isWellFormed(created.secret[...]))
            #expect(try await KeyService(keys: application.storage.keys).createInitialAdmin() == nil)
            // Only the hash is stored.
            let stored = try await application.sqlite.pool.read { db in try String.fetchAll(db, sql: "SELECT hash || name FROM keys") }
            #expect(!stored.joined().contains(created.secret))
        }
    }

    /// For every route that takes an id, tenant B naming tenant A's id gets exactly what an unknown id gets.
    @Test func anotherTenantsIdAnswersExactlyAsAnUnknownId() async throws {
        try await withHerald { base, _, application in
            let admin = try #require(application.initialKey?.secret)
            let alice = try await makeKey(base, admin: admin, name: "alice", tenant: "a")
            let bob = try await makeKey(base, admin: admin, name: "bob", tenant: "b")
            #expect(try await call(.POST, "\(base)/v1/queue/pause", key: admin).status == .ok)
            let media = try await TestKey.$current.withValue(alice.secret) { try await uploadMedia(base) }
            let spare = try await TestKey.$current.withValue(alice.secret) { try await uploadMedia(base) }
            let created = try await TestKey.$current.withValue(alice.secret) { try await createPost(base, ["text": "a's", "media_ids": [media]]) }
            let (post, job) = try postAndJob(created.json)
            let postID = try #require(post["id"] as? String)
            let jobID = try #require(job["id"] as? String)

            let routes: [(HTTPMethod, String, String)] = [
                (.GET, "/v1/media/{id}", spare), (.DELETE, "/v1/media/{id}", spare), (.GET, "/v1/posts/{id}", postID),
                (.DELETE, "/v1/posts/{id}", postID),
                (.POST, "/v1/posts/{id}/publish", postID), (.GET, "/v1/jobs/{id}", jobID), (.GET, "/v1/jobs/{id}?wait=1", jobID),
                (.POST, "/v1/jobs/{id}/cancel", jobID), (.DELETE, "/v1/jobs/{id}", jobID),
            ]
            for (method, template, id) in routes {
                let theirs = try await call(method, base + template.replacingOccurrences(of: "{id}", with: id), key: bob.secret)
                let unknown = try await call(method, base + template.replacingOccurrences(of: "{id}", with: unknownID), key: bob.secret)
                #expect(theirs.status == .notFound, "\(method) \(template)")
                #expect(theirs.status == unknown.status, "\(method) \(template)")
                #expect(theirs.body.replacingOccurrences(of: id, with: "ID") == unknown.body.replacingOccurrences(of: unknownID, with: "ID"))
                var theirHeaders = theirs.headers
                var unknownHeaders = unknown.headers
                for header in ["X-Request-Id", "Date", "Content-Length"] {
                    theirHeaders.remove(name: header)
                    unknownHeaders.remove(name: header)
                }
                #expect(theirHeaders == unknownHeaders, "\(method) \(template)")
            }
            // Nothing of A's was touched: the spare medium is still there, the job still queued.
            #expect(try await TestKey.$current.withValue(alice.secret) { try await exchange(.GET, "\(base)/v1/media/\(spare)") }.status == .ok)
            let still = try await TestKey.$current.withValue(alice.secret) { try await exchange(.GET, "\(base)/v1/jobs/\(jobID)") }
            #expect(still.json["state"] as? String == "queued")

            // Lists are per tenant; B cannot attach A's media (unknown to B).
            for list in ["/v1/posts", "/v1/jobs"] {
                let answer = try await call(.GET, "\(base)\(list)", key: bob.secret)
                #expect(answer.status == .ok)
                #expect(answer.body == #"{"data":[],"next_cursor":null}"#, "\(list)")
                let own = try await call(.GET, "\(base)\(list)", key: alice.secret)
                #expect(own.body.contains(list == "/v1/posts" ? postID : jobID))
            }
            let steal = try await TestKey.$current.withValue(bob.secret) { try await createPost(base, ["text": "mine", "media_ids": [spare]]) }
            #expect(steal.status == .unprocessableEntity)
            #expect(pointers(steal.json) == ["/media_ids/0"])
            // Idempotency keys are per tenant: the same key in B makes B's own post.
            let first = try await TestKey.$current.withValue(alice.secret) { try await createPost(base, ["text": "x"], key: "same") }
            let second = try await TestKey.$current.withValue(bob.secret) { try await createPost(base, ["text": "x"], key: "same") }
            #expect(first.status == .accepted)
            #expect(second.status == .accepted)
            #expect(try postAndJob(first.json).post["id"] as? String != postAndJob(second.json).post["id"] as? String)
        }
    }

    /// Each scope against each route: allowed (anything but 401/403), or 403.
    @Test func eachScopeAgainstEachRoute() async throws {
        try await withHerald(configure: { $0.webhookAllowPrivate = true }) { base, _, application in
            let admin = try #require(application.initialKey?.secret)
            var keys: [Scope: String] = [.admin: admin]
            for scope in [Scope.read, .publish] {
                keys[scope] = try await makeKey(base, admin: admin, name: scope.rawValue, scope: scope.rawValue).secret
            }
            let json = Array(#"{"text": "scoped"}"#.utf8)
            let keyBody = Array(#"{"name": "made"}"#.utf8)
            let hookBody = Array(#"{"url": "http://127.0.0.1:9/hook"}"#.utf8)
            let routes: [(HTTPMethod, String, Scope, String?, [UInt8]?)] = [
                (.GET, "/v1/media/\(unknownID)", .read, nil, nil), (.POST, "/v1/media", .publish, "image/png", pngBytes),
                (.DELETE, "/v1/media/\(unknownID)", .publish, nil, nil), (.GET, "/v1/posts", .read, nil, nil),
                (.POST, "/v1/posts", .publish, "application/json", json), (.GET, "/v1/posts/\(unknownID)", .read, nil, nil),
                (.DELETE, "/v1/posts/\(unknownID)", .publish, nil, nil),
                (.POST, "/v1/posts/\(unknownID)/publish", .publish, nil, nil), (.GET, "/v1/jobs", .read, nil, nil),
                (.GET, "/v1/jobs/\(unknownID)", .read, nil, nil), (.POST, "/v1/jobs/\(unknownID)/cancel", .publish, nil, nil),
                (.DELETE, "/v1/jobs/\(unknownID)", .publish, nil, nil), (.GET, "/v1/queue", .read, nil, nil),
                (.POST, "/v1/queue/pause", .admin, nil, nil), (.POST, "/v1/queue/resume", .admin, nil, nil),
                (.GET, "/v1/keys", .admin, nil, nil), (.POST, "/v1/keys", .admin, "application/json", keyBody),
                (.DELETE, "/v1/keys/\(unknownID)", .admin, nil, nil), (.GET, "/v1/webhooks", .read, nil, nil),
                (.POST, "/v1/webhooks", .publish, "application/json", hookBody), (.GET, "/v1/webhooks/\(unknownID)", .read, nil, nil),
                (.DELETE, "/v1/webhooks/\(unknownID)", .publish, nil, nil), (.GET, "/v1/webhooks/\(unknownID)/deliveries", .read, nil, nil),
            ]
            for (method, path, needed, type, body) in routes {
                for scope in Scope.allCases {
                    let answer = try await call(method, base + path, key: keys[scope], contentType: type, body: body)
                    if scope.allows(needed) {
                        #expect(answer.status != .forbidden && answer.status != .unauthorized, "\(scope) \(method) \(path): \(answer.status)")
                    } else {
                        #expect(answer.status == .forbidden, "\(scope) \(method) \(path): \(answer.status)")
                        #expect(answer.body.contains("'\(needed.rawValue)' scope"))
                    }
                }
            }
        }
    }

    @Test func aRevokedKeyIsRefusedWithinASecond() async throws {
        try await withHerald { base, _, application in
            let admin = try #require(application.initialKey?.secret)
            let elsewhere = try await makeKey(base, admin: admin, name: "revoked elsewhere")
            let here = try await makeKey(base, admin: admin, name: "revoked here")
            #expect(try await call(.GET, "\(base)/v1/jobs", key: elsewhere.secret).status == .ok)
            #expect(try await call(.GET, "\(base)/v1/jobs", key: here.secret).status == .ok)
            // As `herald keys revoke` does from another process: the database alone, not this server's cache.
            _ = try await application.storage.keys.revoke(id: KeyID(elsewhere.id), now: .now())
            // The contract's promise is about time: "within 1 second", so the test waits that long.
            try await Task.sleep(for: .milliseconds(1050))
            let refused = try await call(.GET, "\(base)/v1/jobs", key: elsewhere.secret)
            #expect(refused.status == .unauthorized)
            #expect(refused.headers["WWW-Authenticate"] == [#"Bearer realm="herald", error="invalid_token""#])
            // Through this server: at once.
            #expect(try await call(.DELETE, "\(base)/v1/keys/\(here.id)", key: admin).status == .noContent)
            #expect(try await call(.GET, "\(base)/v1/jobs", key: here.secret).status == .unauthorized)
            // Listed with its revocation; revoking again keeps answering 204.
            let keys = try await listKeys(base, admin: admin)
            #expect(keys.first { $0["id"] as? String == here.id }?["revoked_at"] is String)
            #expect(keys.first { $0["name"] as? String == "initial-admin" }?["revoked_at"] is NSNull)
            #expect(try await call(.DELETE, "\(base)/v1/keys/\(here.id)", key: admin).status == .noContent)
        }
    }

    @Test func aKeysLastUseIsRecorded() async throws {
        try await withHerald { base, _, application in
            let admin = try #require(application.initialKey?.secret)
            let used = try await makeKey(base, admin: admin, name: "used")
            let idle = try await makeKey(base, admin: admin, name: "idle")
            #expect(try await call(.GET, "\(base)/v1/jobs", key: used.secret).status == .ok)
            // What the writer does every minute and on shutdown.
            await application.services.compactMap { $0 as? Authenticator }.first?.flush()
            let keys = try await listKeys(base, admin: admin)
            #expect(keys.first { $0["id"] as? String == used.id }?["last_used_at"] is String)
            #expect(keys.first { $0["id"] as? String == idle.id }?["last_used_at"] is NSNull)
        }
    }

    @Test func aKeyNeverAppearsInALogLineAListAnErrorOrMetrics() async throws {
        let log = CapturedLog()
        try await withHerald(logger: log.logger) { base, _, application in
            let admin = try #require(application.initialKey?.secret)
            let made = try await makeKey(base, admin: admin, name: "secretive")
            #expect(try await call(.GET, "\(base)/v1/jobs", key: made.secret).status == .ok)
            _ = try await call(.GET, "\(base)/v1/jobs/\(unknownID)", key: made.secret)
            _ = try await call(.POST, "\(base)/v1/posts", key: made.secret, contentType: "application/json", body: Array("{".utf8))
            #expect(try await call(.DELETE, "\(base)/v1/keys/\(made.id)", key: admin).status == .noContent)
            let refused = try await call(.GET, "\(base)/v1/jobs", key: made.secret)
            #expect(refused.status == .unauthorized)
            let list = try await call(.GET, "\(base)/v1/keys", key: admin)
            let metrics = try await call(.GET, "\(base)/metrics", key: nil)
            await application.services.compactMap { $0 as? Authenticator }.first?.flush()
            for (what, text) in [("error", refused.body), ("list", list.body), ("metrics", metrics.body)] {
                #expect(!text.contains(made.secret) && !text.contains(admin), "\(what)")
                #expect(!text.contains("hrld_"), "\(what)")
            }
            #expect(list.body.contains(made.id))
        }
        let lines = log.lines.withLock { $0 }
        #expect(lines.contains { $0.contains("/v1/keys") }, "the access log was captured")
        #expect(!lines.contains { $0.contains("hrld_") })
    }

    @Test func aBurstOverTheRateLimitIs429WithTheHeadersAndRecovers() async throws {
        try await withHerald(configure: { $0.rateLimit = 2 }) { base, _, application in
            let admin = try #require(application.initialKey?.secret)
            let other = try await makeKey(base, admin: admin, name: "other")
            var answers: [RawAnswer] = []
            for _ in 0..<8 { answers.append(try await call(.GET, "\(base)/v1/queue", key: admin)) }
            // Burst 2N = 4, one spent making the other key: three more pass, then the bucket is empty.
            #expect(answers.prefix(3).allSatisfy { $0.status == .ok })
            let limited = try #require(answers.last)
            #expect(limited.status == .tooManyRequests)
            #expect(limited.headers["Content-Type"] == ["application/problem+json"])
            let retryAfter = try #require(limited.headers.first(name: "Retry-After").flatMap { Int($0) })
            #expect(retryAfter >= 1)
            #expect(limited.headers["RateLimit-Policy"] == [#""default";q=2;w=1"#])
            #expect(limited.headers["RateLimit"] == [#""default";r=0;t=\#(retryAfter)"#])
            // Another key has its own bucket.
            #expect(try await call(.GET, "\(base)/v1/queue", key: other.secret).status == .ok)
            // Retry-After is what a client waits: then the key is served again.
            try await Task.sleep(for: .seconds(retryAfter))
            #expect(try await call(.GET, "\(base)/v1/queue", key: admin).status == .ok)
        }
    }

    @Test func failedAuthenticationsAreLimitedPerClientAddressBehindATrustedProxy() async throws {
        try await withHerald(configure: {
            $0.authFailureLimit = 3
            $0.trustedProxies = [AddressRange("127.0.0.0/8")!]
        }) { base, _, application in
            let admin = try #require(application.initialKey?.secret)
            let mallory = [("X-Forwarded-For", "203.0.113.7")]
            for _ in 0..<3 {
                #expect(try await call(.GET, "\(base)/v1/jobs", key: KeySecret.generate(), headers: mallory).status == .unauthorized)
            }
            // The address's budget is spent: 429 before the key is looked at, even a good one.
            let limited = try await call(.GET, "\(base)/v1/jobs", key: admin, headers: mallory)
            #expect(limited.status == .tooManyRequests)
            #expect(limited.headers.first(name: "Retry-After").flatMap { Int($0) } ?? 0 >= 1)
            // Another client behind the same proxy keeps its own budget.
            let neighbour = [("X-Forwarded-For", "203.0.113.8")]
            let served = try await call(.GET, "\(base)/v1/jobs", key: admin, headers: neighbour)
            #expect(served.status == .ok)
            let refused = try await call(.GET, "\(base)/v1/jobs", key: KeySecret.generate(), headers: neighbour)
            #expect(refused.status == .unauthorized)
        }
    }

    @Test func authOffServesEveryoneAsTheDefaultTenantOnLoopbackOnly() async throws {
        try await withHerald(configure: { $0.auth = .off }) { base, _, application in
            #expect(application.initialKey == nil)
            let read = try await call(.GET, "\(base)/v1/jobs", key: nil)
            #expect(read.status == .ok)
            let paused = try await call(.POST, "\(base)/v1/queue/pause", key: nil)
            #expect(paused.status == .ok)
        }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("herald-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        await #expect(throws: ConfigurationError.self) {
            _ = try await Application.build(
                configuration: HeraldConfiguration(host: "0.0.0.0", port: 0, dataDirectory: directory, auth: .off), logger: Logger(label: "test"),
                metrics: TestMetrics.registry)
        }
        #expect(!FileManager.default.fileExists(atPath: directory), "refused before the database is made")
    }

    @Test func theWholeStatusFlowOverTLSWithASelfSignedCertificate() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("herald-tls-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (certificate, key) = try selfSignedCertificate(in: directory, name: "127.0.0.1", subjectAltName: "IP:127.0.0.1")

        var tls = TLSConfiguration.makeClientConfiguration()
        tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(certificate))
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: HTTPClient.Configuration(tlsConfiguration: tls))
        do {
            try await withHerald(configure: {
                $0.tlsCertificatePath = certificate
                $0.tlsKeyPath = key
            }) { base, _, application in
                #expect(base.hasPrefix("https://"))
                let admin = try #require(application.initialKey?.secret)
                let media = try await call(.POST, "\(base)/v1/media", key: admin, contentType: "image/png", body: pngBytes, client: client)
                #expect(media.status == .created)
                let mediaID = try #require((try JSONSerialization.jsonObject(with: Data(media.body.utf8)) as? [String: Any])?["id"] as? String)
                let body = Array(try JSONSerialization.data(withJSONObject: ["text": "over TLS", "media_ids": [mediaID]]))
                let created = try await call(.POST, "\(base)/v1/posts", key: admin, contentType: "application/json", body: body, client: client)
                #expect(created.status == .accepted)
                let job = try postAndJob(try #require(try JSONSerialization.jsonObject(with: Data(created.body.utf8)) as? [String: Any])).job
                let jobID = try #require(job["id"] as? String)
                let done = try await call(.GET, "\(base)/v1/jobs/\(jobID)?wait=20", key: admin, client: client)
                #expect(done.status == .ok)
                #expect(done.body.contains(#""state":"succeeded""#))
                // The container's HEALTHCHECK probes HTTPS too.
                let probe = try runHerald(["healthcheck", "--url", "\(base)/healthz"])
                #expect(probe.status == 0, "\(probe.out)")
                // Plain HTTP to the TLS port gets no answer.
                await #expect(throws: (any Error).self) {
                    _ = try await call(.GET, base.replacingOccurrences(of: "https", with: "http") + "/healthz", key: nil)
                }
            }
        } catch {
            try await client.shutdown()
            throw error
        }
        try await client.shutdown()
    }
}
