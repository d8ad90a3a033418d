/// Why a call to Herald did not give what was asked.
public enum ClientError: Error, CustomStringConvertible, Sendable {
    /// No answer: the server is down, the address is wrong, the connection broke.
    case unreachable(url: String, reason: String)
    /// Herald answered with an RFC 9457 problem (or another non-2xx status).
    case problem(Problem)
    /// An answer that is not what the contract says (not JSON, missing fields).
    case unexpectedAnswer(String)
    /// A local file that cannot be sent.
    case file(path: String, reason: String)

    public var description: String {
        switch self {
        case .unreachable(let url, let reason): "cannot reach \(url): \(reason)"
        case .problem(let problem): problem.description
        case .unexpectedAnswer(let what): "unexpected answer: \(what)"
        case .file(let path, let reason): "\(path): \(reason)"
        }
    }
}

/// An RFC 9457 problem document as Herald sends it.
public struct Problem: Decodable, Sendable, CustomStringConvertible {
    /// One validation error: where (a JSON pointer) and what.
    public struct Issue: Decodable, Sendable {
        public var pointer: String?
        public var detail: String
    }

    public var status: Int
    public var title: String
    public var detail: String?
    public var errors: [Issue]?

    /// Creates a problem, for answers that carried none.
    public init(status: Int, title: String, detail: String? = nil, errors: [Issue]? = nil) {
        self.status = status
        self.title = title
        self.detail = detail
        self.errors = errors
    }

    /// `422 Unprocessable Content: detail (/media_ids/1: unknown media)`.
    public var description: String {
        var text = "\(status) \(title)"
        if let detail, !detail.isEmpty { text += ": \(detail)" }
        let issues = (errors ?? []).map { issue in issue.pointer.map { "\($0): \(issue.detail)" } ?? issue.detail }
        if !issues.isEmpty { text += " (" + issues.joined(separator: "; ") + ")" }
        return text
    }
}
