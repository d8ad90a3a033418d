public import HTTPTypes

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// An error of the layers behind the handlers that knows which problem answers it: a handler may let it through.
public protocol HTTPErrorConvertible: Error {
    /// The problem this error answers with.
    var httpError: HTTPError { get }
}

/// An error a handler throws to answer with an RFC 9457 `application/problem+json` response.
public struct HTTPError: Error, Sendable {
    /// One problem with one part of the request, located by a JSON pointer (RFC 6901).
    public struct FieldError: Sendable, Codable, Hashable {
        public var pointer: String
        public var detail: String

        public init(pointer: String, detail: String) {
            self.pointer = pointer
            self.detail = detail
        }
    }

    public var status: HTTPResponse.Status
    public var title: String
    public var detail: String?
    /// A URI naming the problem type; `about:blank` means "see the status code".
    public var type: String
    /// Validation errors, every one found (only for 422).
    public var errors: [FieldError]
    /// Extra response headers, e.g. `Allow` or `Retry-After`.
    public var headerFields: HTTPFields

    public init(
        _ status: HTTPResponse.Status,
        title: String? = nil,
        detail: String? = nil,
        type: String = "about:blank",
        errors: [FieldError] = [],
        headerFields: HTTPFields = [:]
    ) {
        self.status = status
        self.title = title ?? status.reasonPhrase
        self.detail = detail
        self.type = type
        self.errors = errors
        self.headerFields = headerFields
    }

    /// The problem document as sent on the wire.
    struct Body: Encodable {
        var type: String
        var title: String
        var status: Int
        var detail: String?
        var errors: [FieldError]?
    }

    /// The `application/problem+json` response for this error.
    public var response: Response {
        let body = Body(type: type, title: title, status: status.code, detail: detail, errors: errors.isEmpty ? nil : errors)
        var fields = headerFields
        fields[.contentType] = "application/problem+json"
        let bytes = (try? JSONEncoder.problem.encode(body)).map(Array.init) ?? Array(#"{"title":"Internal Server Error","status":500}"#.utf8)
        return Response(status: status, headerFields: fields, body: .bytes(bytes))
    }
}

extension JSONEncoder {
    fileprivate static let problem: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()
}

extension HTTPError {
    /// 431: the request's header fields and URL are over the server's budget.
    public static func headerTooLarge(limit: Int) -> HTTPError {
        HTTPError(.requestHeaderFieldsTooLarge, detail: "the request's header fields and URL are larger than \(limit) bytes")
    }
}
