public import HTTPTypes
public import Platform

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// One HTTP response as a handler returns it.
public struct Response: Sendable {
    public var status: HTTPResponse.Status
    public var headerFields: HTTPFields
    public var body: ResponseBody

    public init(status: HTTPResponse.Status = .ok, headerFields: HTTPFields = [:], body: ResponseBody = .empty) {
        self.status = status
        self.headerFields = headerFields
        self.body = body
    }

    /// A JSON response of `value`, encoded with `encoder`.
    public static func json(
        _ value: some Encodable,
        status: HTTPResponse.Status = .ok,
        headerFields: HTTPFields = [:],
        encoder: JSONEncoder = JSONEncoder()
    ) throws -> Response {
        var fields = headerFields
        fields[.contentType] = "application/json"
        return Response(status: status, headerFields: fields, body: .bytes(Array(try encoder.encode(value))))
    }

    /// A plain-text response.
    public static func text(_ text: String, status: HTTPResponse.Status = .ok, contentType: String = "text/plain; charset=utf-8") -> Response {
        Response(status: status, headerFields: [.contentType: contentType], body: .bytes(Array(text.utf8)))
    }
}

/// A response body: bytes at hand, or produced by a closure while the response is being sent.
public struct ResponseBody: Sendable {
    enum Storage: Sendable {
        case bytes([UInt8])
        /// Handed to libmicrohttpd as they are, not copied.
        case owned(OwnedBytes)
        case stream(@Sendable (ResponseBodyWriter) async throws -> Void)
    }

    let storage: Storage

    /// No body.
    public static var empty: ResponseBody { ResponseBody(storage: .bytes([])) }

    /// A body of these bytes, sent with `Content-Length`.
    public static func bytes(_ bytes: [UInt8]) -> ResponseBody { ResponseBody(storage: .bytes(bytes)) }

    /// A body of these bytes, sent with `Content-Length` from their own memory (libmicrohttpd copies an array's).
    public static func bytes(_ bytes: OwnedBytes) -> ResponseBody { ResponseBody(storage: .owned(bytes)) }

    /// A body written by `produce` as it goes (sent chunked), e.g. server-sent events or a file.
    ///
    /// `produce` runs after the head is sent; a write waits while the client is behind.
    public static func stream(_ produce: @escaping @Sendable (ResponseBodyWriter) async throws -> Void) -> ResponseBody {
        ResponseBody(storage: .stream(produce))
    }

    /// The bytes of a body at hand (`nil` for a stream).
    public var bytes: [UInt8]? {
        switch storage {
        case .bytes(let bytes): bytes
        case .owned(let bytes): Array(bytes.buffer)
        case .stream: nil
        }
    }
}

/// Writes a streamed response body.
public struct ResponseBodyWriter: Sendable {
    let sink: any ResponseBodySink

    /// Sends `bytes`; waits while the client is behind; throws once the client has gone.
    public func write(_ bytes: [UInt8]) async throws {
        guard !bytes.isEmpty else { return }
        try await sink.write(bytes)
    }

    /// Sends `text` as UTF-8.
    public func write(_ text: String) async throws {
        try await write(Array(text.utf8))
    }
}

/// Where a ``ResponseBodyWriter`` puts bytes.
protocol ResponseBodySink: Sendable {
    func write(_ bytes: [UInt8]) async throws
}
