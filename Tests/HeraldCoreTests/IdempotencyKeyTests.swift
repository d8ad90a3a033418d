import HeraldCore
import Testing

@Suite("Idempotency-Key")
struct IdempotencyKeyTests {
    @Test(arguments: [
        ("abc", "abc"), ("\"abc\"", "abc"), ("\"", "\""), ("\"\"\"\"", "\"\""), ("\"abc", "\"abc"), ("a\"b\"", "a\"b\""),
        (String(repeating: "k", count: 255), String(repeating: "k", count: 255)),
        ("\"" + String(repeating: "k", count: 255) + "\"", String(repeating: "k", count: 255)),
    ])
    func keysAreVisibleASCIIWithOnePairOfQuotesRemoved(_ value: String, _ key: String) {
        #expect(IdempotencyKey.parse(value) == key)
    }

    @Test(arguments: ["", "\"\"", "a b", "tab\there", "caf\u{E9}", String(repeating: "k", count: 256)])
    func otherValuesAreNoKey(_ value: String) {
        #expect(IdempotencyKey.parse(value) == nil, "\(value)")
    }
}
