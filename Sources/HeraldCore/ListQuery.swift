/// Parsing of the list query parameters that are not enums or cursors.
public enum ListQuery {
    /// The page size when `?limit=` is absent.
    public static let defaultLimit = 20
    /// The largest page size allowed.
    public static let maximumLimit = 100

    /// The page size asked for by `?limit=`: 20 when absent, nil (a 400) unless plain decimal digits within 1...100.
    public static func limit(_ raw: String?) -> Int? {
        guard let raw else { return defaultLimit }
        // Plain digits only: `Int("+5")` would pass, and a 400 is clearer than a surprising reading.
        guard !raw.isEmpty, raw.utf8.allSatisfy({ ASCII.digitValue($0) != nil }), let limit = Int(raw),
            (1...maximumLimit).contains(limit)
        else { return nil }
        return limit
    }
}
