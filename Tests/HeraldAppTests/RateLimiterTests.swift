import HTTPTypes
import HeraldCore
import MicroHTTP
import Platform
import Testing

@testable import HeraldApp

@Suite("Token buckets and the gate's rules")
struct RateLimiterTests {
    @Test func aBucketHoldsItsBurstThenRefillsAtItsRate() {
        let limiter = RateLimiter<String>(rate: 2, burst: 4)
        let start = MonotonicInstant.now
        let taken = (0..<5).map { _ in limiter.take("k", now: start) }
        #expect(taken == [.allowed(remaining: 3), .allowed(remaining: 2), .allowed(remaining: 1), .allowed(remaining: 0), .limited(retryAfter: 1)])
        // Another key has a bucket of its own.
        #expect(limiter.take("other", now: start) == .allowed(remaining: 3))
        // Half a second at 2 a second is one token.
        #expect(limiter.take("k", now: start + .milliseconds(500)) == .allowed(remaining: 0))
        #expect(limiter.check("k", now: start + .milliseconds(500)) == .limited(retryAfter: 1))
        // Refilled, never past the burst.
        #expect(limiter.check("k", now: start + .seconds(60)) == .allowed(remaining: 4))
    }

    @Test func aSlowRateAsksForALongerWait() {
        // 20 a minute: a token every 3 seconds.
        let limiter = RateLimiter<String>(rate: 20.0 / 60, burst: 20)
        let start = MonotonicInstant.now
        for _ in 0..<20 { _ = limiter.take("a", now: start) }
        #expect(limiter.check("a", now: start) == .limited(retryAfter: 3))
        #expect(limiter.check("a", now: start + .seconds(3)) == .allowed(remaining: 1))
    }

    @Test func bucketsAreBoundedInNumber() {
        let limiter = RateLimiter<Int>(rate: 1, burst: 1, capacity: 10)
        let start = MonotonicInstant.now
        for key in 0..<100 { _ = limiter.take(key, now: start) }
        // The oldest keys were dropped to make room: key 0 starts afresh (a full bucket), which is the safe side
        // only for a flood of new keys, and keeps memory bounded.
        #expect(limiter.take(0, now: start) == .allowed(remaining: 0))
    }

    @Test func bearerTakesTheSchemeInAnyCase() {
        func bearer(_ field: String) -> String? {
            var field = field
            return field.withUTF8 { AccessGate.bearer($0).map { String(decoding: $0, as: UTF8.self) } }
        }
        #expect(bearer("Bearer hrld_x") == "hrld_x")
        #expect(bearer("bearer  hrld_x") == "hrld_x")
        #expect(bearer("BEARER hrld_x") == "hrld_x")
        #expect(bearer("Basic dXNlcjpwYXNz") == nil)
        #expect(bearer("Bearer ") == nil)
        #expect(bearer("Bearer    ") == nil)
        #expect(bearer("Bearerhrld_x") == nil)
        #expect(bearer("") == nil)
    }

    @Test func onlyV1PathsAreGated() {
        for path in ["/v1", "/v1/", "/v1/jobs", "/v1/jobs/x/events"] { #expect(AccessGate.isAPI(Substring(path)), "\(path)") }
        for path in ["/", "/healthz", "/v10/jobs", "/v1x", "/metrics", "/openapi.yaml", "/V1/jobs"] {
            #expect(!AccessGate.isAPI(Substring(path)), "\(path)")
        }
    }

    @Test("each route declares the scope it needs where it is registered; the gate checks that one")
    func theScopeACallNeeds() async throws {
        try await withHerald { _, _, application in
            let expected: [(HTTPRequest.Method, String, Scope)] = [
                (.get, "/v1/jobs/j1", .read), (.post, "/v1/media", .publish), (.delete, "/v1/jobs/j1", .publish), (.get, "/v1/keys", .admin),
                (.post, "/v1/queue/pause", .admin), (.get, "/v1/queue", .read), (.post, "/v1/posts/p1/publish", .publish),
                (.delete, "/v1/keys/k1", .admin), (.get, "/v1/webhooks/w1/deliveries", .read),
            ]
            for (method, path, scope) in expected {
                guard case .found(let route, _) = application.router.match(method, path: Substring(path)) else {
                    Issue.record("\(method) \(path) is not routed")
                    continue
                }
                #expect(route.requirement == scope.rawValue, "\(method) \(path)")
            }
        }
    }

    @Test("a /v1/ route registered without a scope needs admin: the gate fails closed")
    func anUndeclaredRouteNeedsAdmin() throws {
        var router = Router()
        router.on(.post, "/v1/new-admin-thing") { _ in Response(status: .noContent) }
        guard case .found(let route, _) = router.match(.post, path: "/v1/new-admin-thing") else {
            Issue.record("not routed")
            return
        }
        let gate = AccessGate(mode: .off, requestsPerSecond: 0, failuresPerMinute: 0)
        var request = Request(head: HTTPRequest(method: .post, scheme: "http", authority: "localhost", path: "/v1/new-admin-thing"))
        for scope in Scope.allCases {
            request.principal = Caller(tenant: .default, scope: scope, keyID: nil)
            let refusal = gate.authorize(request, route: route)
            #expect((refusal?.status == .forbidden) == (scope != .admin), "\(scope)")
        }
    }

    @Test func keysHaveTheirShape() {
        let key = KeySecret.generate()
        #expect(key.hasPrefix("hrld_"))
        #expect(key.count == 5 + 43)
        #expect(KeySecret.isWellFormed(key[...]))
        #expect(!KeySecret.isWellFormed("hrld_short"))
        #expect(!KeySecret.isWellFormed(("hrld_" + String(repeating: "a", count: 42) + "!")[...]))
        #expect(Set((0..<100).map { _ in KeySecret.generate() }).count == 100)
    }
}
