import MicroHTTP
import Testing

@Suite("Address ranges and trusted proxies")
struct AddressRangeTests {
    @Test(arguments: [
        ("10.0.0.0/8", "10.255.1.2", true), ("10.0.0.0/8", "11.0.0.1", false), ("192.0.2.7", "192.0.2.7", true),
        ("192.0.2.7", "192.0.2.8", false), ("10.1.2.3/8", "10.9.9.9", true), ("0.0.0.0/0", "203.0.113.9", true),
        ("fd00::/8", "fd12::1", true), ("fd00::/8", "fe80::1", false), ("::1", "::1", true), ("127.0.0.0/8", "::ffff:127.0.0.1", true),
        ("127.0.0.0/8", "::1", false), ("10.0.0.0/8", "not an address", false),
    ])
    func containment(range: String, address: String, expected: Bool) throws {
        let parsed = try #require(AddressRange(range))
        #expect(parsed.contains(address) == expected)
    }

    @Test(arguments: ["", "10.0.0.0/33", "::/129", "10.0.0.0/", "10.0.0.0/-1", "10.0.0.0/8/8", "example.com", "10.0.0/8"])
    func refusesWhatIsNotARange(text: String) {
        #expect(AddressRange(text) == nil)
    }

    @Test func theClientIsTheFirstHopNotAddedByATrustedProxy() {
        let proxies = TrustedProxies([AddressRange("10.0.0.0/8")!])
        // Not from a proxy: the header is the client's own word, ignored.
        #expect(proxies.client(peer: "203.0.113.1", forwardedFor: ["198.51.100.7"]) == "203.0.113.1")
        // From the proxy: the hop it added.
        #expect(proxies.client(peer: "10.0.0.2", forwardedFor: ["198.51.100.7"]) == "198.51.100.7")
        // A client that forges hops left of the real one gains nothing: the walk stops at the first untrusted hop.
        #expect(proxies.client(peer: "10.0.0.2", forwardedFor: ["1.2.3.4, 198.51.100.7"]) == "198.51.100.7")
        // Through two proxies, over two header lines.
        #expect(proxies.client(peer: "10.0.0.2", forwardedFor: ["198.51.100.7", "10.0.0.3"]) == "198.51.100.7")
        // Garbage ends the walk at the proxy that passed it.
        #expect(proxies.client(peer: "10.0.0.2", forwardedFor: ["198.51.100.7, junk"]) == "10.0.0.2")
        #expect(proxies.client(peer: "10.0.0.2", forwardedFor: []) == "10.0.0.2")
        // No trusted proxies: always the peer.
        #expect(TrustedProxies().client(peer: "10.0.0.2", forwardedFor: ["198.51.100.7"]) == "10.0.0.2")
    }
}
