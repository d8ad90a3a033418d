import HeraldCore

/// Tests spell ids as literals (`"019a…"` where a `JobID` is expected); production code never makes one from text
/// without saying which kind it is.
extension ID: ExpressibleByStringLiteral {
    public init(stringLiteral value: String) {
        self.init(rawValue: value)
    }
}
