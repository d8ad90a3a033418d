import HTTPTypes
import JSONText

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

    /// The `application/problem+json` response for this error.
    public var response: Response {
        var fields = headerFields
        fields[.contentType] = "application/problem+json"
        return Response(status: status, headerFields: fields, body: .bytes(problemDocument))
    }

    /// The RFC 9457 document, members in one order: `type, title, status, detail, errors[{pointer, detail}]`;
    /// `detail` only when there is one, `errors` only when not empty.
    ///
    /// Written by hand: `JSONEncoder` keeps no key order on Linux, and MicroHTTP does not depend on HeraldCore's writer.
    var problemDocument: [UInt8] {
        var json: [UInt8] = []
        json.reserveCapacity(128)
        json += #"{"type":"#.utf8
        Self.append(string: type, to: &json)
        json += #","title":"#.utf8
        Self.append(string: title, to: &json)
        json += #","status":"#.utf8
        json += String(status.code).utf8
        if let detail {
            json += #","detail":"#.utf8
            Self.append(string: detail, to: &json)
        }
        if !errors.isEmpty {
            json += #","errors":["#.utf8
            for (index, error) in errors.enumerated() {
                json += (index == 0 ? #"{"pointer":"# : #",{"pointer":"#).utf8
                Self.append(string: error.pointer, to: &json)
                json += #","detail":"#.utf8
                Self.append(string: error.detail, to: &json)
                json.append(UInt8(ascii: "}"))
            }
            json.append(UInt8(ascii: "]"))
        }
        json.append(UInt8(ascii: "}"))
        return json
    }

    /// `text` as a JSON string: quotes, backslashes and control characters escaped, everything else as is (UTF-8).
    private static func append(string text: String, to json: inout [UInt8]) {
        JSONEscaping.appendString(text.utf8, to: &json)
    }
}

extension HTTPError {
    /// 431: the request's header fields and URL are over the server's budget.
    public static func headerTooLarge(limit: Int) -> HTTPError {
        HTTPError(.requestHeaderFieldsTooLarge, detail: "the request's header fields and URL are larger than \(limit) bytes")
    }
}
