public import HTTPTypes
public import Logging
import Platform
import Synchronization
import Telemetry

/// One HTTP request as a handler sees it.
public struct Request: Sendable {
    /// The request method.
    public var method: HTTPRequest.Method
    /// The header fields as sent, `Host` among them.
    public var fields: RequestFields
    /// Method, path and fields as swift-http-types' request, made each time it is asked for (``fields`` reads one field
    /// without it).
    public var head: HTTPRequest {
        HTTPRequest(method: method, scheme: nil, authority: fields.first(.hostField), path: pathText, headerFields: fields.httpFields)
    }
    /// The request id: the client's `X-Request-Id` when it sent a sane one, else a generated one.
    public var id: String
    /// Values of the route template's `{name}` segments.
    public var parameters: Parameters
    /// The decoded query arguments, in the order sent.
    public var query: [(name: String, value: String?)]
    /// The body, read as it arrives.
    public var body: RequestBody
    /// A logger carrying this request's id, and its trace's ids when traced (attached when asked for: most requests
    /// never log).
    public var logger: Logger {
        get { Self.logger(baseLogger, requestID: id, trace: trace) }
        set { baseLogger = newValue }
    }
    private var baseLogger: Logger

    /// `base` carrying request `requestID`'s id, and its trace's ids when traced.
    static func logger(_ base: Logger, requestID: String, trace: RequestTrace?) -> Logger {
        var logger = base
        logger[metadataKey: "request_id"] = "\(requestID)"
        trace?.traceparent?.annotate(&logger)
        return logger
    }
    /// The client's IP address, e.g. `127.0.0.1` or `::1`: behind a trusted proxy, the one it forwarded for.
    public var remoteAddress: String?
    /// Who sent the request, as the router's ``Gate`` established it; nil when there is no gate.
    ///
    /// An object: one reference wide, set and read without boxing (the gate hands out one per caller, not per request).
    public var principal: (any AnyObject & Sendable)?
    /// The request's server span; nil when the server does not trace.
    public var trace: RequestTrace?

    /// The decoded path; the server keeps the query apart, in ``query``.
    public var path: Substring { Substring(pathText) }
    private let pathText: String

    /// The last value of query argument `name` (`nil` when absent; `""` for `?name`).
    public func queryValue(_ name: String) -> String? {
        guard let item = query.last(where: { $0.name == name }) else { return nil }
        return item.value ?? ""
    }
}

// The initializers live in an extension, so that the struct keeps its memberwise initializer and they build the value
// through it, in one piece. Assigned property by property, the request was built in a variable of its own, then
// copied whole and the variable destroyed: a retain and a release of every field, every request (a pair the optimizer
// leaves).
extension Request {
    public init(
        method: HTTPRequest.Method,
        path: String,
        fields: RequestFields = RequestFields(),
        id: String = RequestID.generate(),
        parameters: Parameters = Parameters(),
        query: [(name: String, value: String?)] = [],
        body: RequestBody = .empty,
        remoteAddress: String? = nil,
        logger: Logger = Logger(label: "MicroHTTP"),
        trace: RequestTrace? = nil
    ) {
        self.init(
            method: method, fields: fields, id: id, parameters: parameters, query: query, body: body, baseLogger: logger,
            remoteAddress: remoteAddress, principal: nil, trace: trace, pathText: path)
    }

    /// The request `head` describes (`path`, when given, instead of its path: its field value loses a trailing space, so
    /// `/v1/posts/%20` would route as `/v1/posts/`, the list, instead of the post `" "`).
    public init(
        head: HTTPRequest,
        id: String = RequestID.generate(),
        parameters: Parameters = Parameters(),
        query: [(name: String, value: String?)] = [],
        body: RequestBody = .empty,
        remoteAddress: String? = nil,
        logger: Logger = Logger(label: "MicroHTTP"),
        path: String? = nil
    ) {
        self.init(
            method: head.method, path: path ?? head.path ?? "/", fields: RequestFields(head.headerFields), id: id, parameters: parameters,
            query: query, body: body, remoteAddress: remoteAddress, logger: logger)
    }
}

/// The values of a route's path parameters.
public struct Parameters: Sendable, Hashable {
    /// In template order. A route has one or two: they are held in place (an array was allocated for each request), a
    /// third and more in `rest`.
    private var first: Value?
    private var second: Value?
    private var rest: [Value] = []

    private struct Value: Sendable, Hashable {
        let name: String
        var value: String
    }

    /// No values (every request starts so: routing adds them).
    public init() {}

    public init(_ values: [String: String]) {
        store(values.map { Value(name: $0.key, value: $0.value) })
    }

    /// Every value, in order.
    private var all: [Value] { [first, second].compactMap { $0 } + rest }

    private mutating func store(_ values: [Value]) {
        first = values.first
        second = values.dropFirst().first
        rest = Array(values.dropFirst(2))
    }

    public subscript(_ name: String) -> String? {
        get {
            if let first, first.name == name { return first.value }
            if let second, second.name == name { return second.value }
            return rest.first { $0.name == name }?.value
        }
        set {
            // A new name after the others, in place while there is room: what routing does, once a segment.
            if self[name] == nil, let newValue {
                let value = Value(name: name, value: newValue)
                if first == nil {
                    first = value
                } else if second == nil {
                    second = value
                } else {
                    rest.append(value)
                }
                return
            }
            var values = all
            let index = values.firstIndex { $0.name == name }
            switch (index, newValue) {
            case (let index?, let value?): values[index].value = value
            case (let index?, nil): values.remove(at: index)
            case (nil, _): break
            }
            store(values)
        }
    }

    /// Equal when they hold the same names with the same values, in whatever order they were set.
    public static func == (lhs: Parameters, rhs: Parameters) -> Bool {
        let values = lhs.all
        return values.count == rhs.all.count && values.allSatisfy { rhs[$0.name] == $0.value }
    }

    public func hash(into hasher: inout Hasher) {
        for value in all.sorted(by: { $0.name < $1.name }) { hasher.combine(value) }
    }

    /// The value of `name`, which the route template guarantees.
    public func require(_ name: String) throws -> String {
        guard let value = self[name] else {
            throw HTTPError(.internalServerError, detail: "route has no parameter '\(name)'")
        }
        return value
    }
}

/// Request ids: accepted from clients when short and printable, generated otherwise.
public enum RequestID {
    /// 32 lowercase hex digits: a random per-process prefix and a counter (unique, and no syscall per request).
    public static func generate() -> String {
        let sequence = counter.add(1, ordering: .relaxed).newValue
        return String(unsafeUninitializedCapacity: 32) { buffer in
            writeHex(prefix, into: buffer, at: 0)
            writeHex(sequence, into: buffer, at: 16)
            return 32
        }
    }

    private static let prefix = UInt64.random(in: .min ... .max)
    private static let counter = Atomic<UInt64>(0)

    private static func writeHex(_ value: UInt64, into buffer: UnsafeMutableBufferPointer<UInt8>, at offset: Int) {
        let digits: StaticString = "0123456789abcdef"
        for index in 0..<16 {
            let nibble = Int((value >> (60 - 4 * UInt64(index))) & 0xF)
            buffer[offset + index] = digits.utf8Start[nibble]
        }
    }

    /// `candidate` if it is 1 to 128 characters of letters, digits, `-`, `_`, `.` or `:`.
    public static func accept(_ candidate: String?) -> String? {
        guard let candidate, !candidate.isEmpty, candidate.utf8.count <= 128 else { return nil }
        let allowed = candidate.utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"): true
            case UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: ":"): true
            default: false
            }
        }
        return allowed ? candidate : nil
    }

}

extension HTTPField.Name {
    /// `X-Request-Id`, echoed or generated on every response.
    public static let requestID = HTTPField.Name("X-Request-Id")!
}

extension HTTPField.Name {
    /// `Host`: swift-http-types keeps it as `authority`; libmicrohttpd hands it over as a plain field.
    static let hostField = HTTPField.Name("Host")!
    /// `X-Forwarded-For`: the client behind a trusted proxy (``TrustedProxies``).
    static let forwardedFor = HTTPField.Name("X-Forwarded-For")!
}
