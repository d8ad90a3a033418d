import HTTPTypes
import HeraldCore
import Testing

@testable import HeraldApp

@Suite("Token buckets and the gate's rules")
struct RateLimiterTests {
    @Test func aBucketHoldsItsBurstThenRefillsAtItsRate() {
        let limiter = RateLimiter<String>(rate: 2, burst: 4)
        let start = ContinuousClock.now
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
        let start = ContinuousClock.now
        for _ in 0..<20 { _ = limiter.take("a", now: start) }
        #expect(limiter.check("a", now: start) == .limited(retryAfter: 3))
        #expect(limiter.check("a", now: start + .seconds(3)) == .allowed(remaining: 1))
    }

    @Test func bucketsAreBoundedInNumber() {
        let limiter = RateLimiter<Int>(rate: 1, burst: 1, capacity: 10)
        let start = ContinuousClock.now
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

    @Test(arguments: [
        ("GET", "/v1/jobs/{id}", Scope.read), ("POST", "/v1/media", .publish), ("DELETE", "/v1/jobs/{id}", .publish),
        ("GET", "/v1/keys", .admin), ("POST", "/v1/queue/pause", .admin), ("GET", "/v1/queue", .read),
    ])
    func theScopeACallNeeds(method: String, template: String, scope: Scope) {
        #expect(AccessGate.scope(method: .init(method)!, template: template) == scope)
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
