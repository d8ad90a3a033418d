/// The key an `Idempotency-Key` header carries (IETF draft): its value with one pair of surrounding double quotes
/// removed, so `"abc"` and `abc` are the same key; 1 to 255 visible ASCII characters.
public enum IdempotencyKey {
    /// The longest key, in characters (bytes: they are ASCII).
    public static let maxLength = 255

    /// The key in the header's `value`; nil when it is not one (the API answers 400).
    public static func parse(_ value: String) -> String? {
        var key = Substring(value)
        if key.utf8.count >= 2, key.hasPrefix("\""), key.hasSuffix("\"") { key = key.dropFirst().dropLast() }
        guard (1...maxLength).contains(key.utf8.count), key.utf8.allSatisfy({ (0x21...0x7E).contains($0) }) else { return nil }
        return String(key)
    }
}
