import HTTPTypes

/// Where a streamed body's chunks come from (the connection, in the server).
protocol BodySource: AnyObject, Sendable {
    /// Called once per iterator made: a body from the connection has one consumer, so a second call traps.
    func claim()
    /// The next chunk, `nil` at the end; waits while the client is sending.
    func nextChunk() async throws -> [UInt8]?
    /// The multipart parser set up for this request, if its content type is `multipart/form-data`.
    func multipartParser() -> MultipartParser?
}

/// A request body, consumed as an `AsyncSequence` of chunks as the client sends it.
///
/// The server stops reading from the connection while the consumer is behind, so a large body never sits in
/// memory. It is `Sendable` so that another task may read it, but it has one consumer: a second iterator on a
/// body from the connection (a second `for try await`, ``collect(upTo:)`` or ``multipart(limits:)`` reading it)
/// is a precondition failure. A body made from bytes may be read again.
public struct RequestBody: AsyncSequence, Sendable {
    public typealias Element = [UInt8]

    private enum Storage: Sendable {
        case bytes([UInt8])
        case stream(any BodySource)
    }

    private let storage: Storage
    /// The declared `Content-Length`, when there was one.
    public let declaredLength: Int?

    /// A body of fixed bytes, for tests and internal requests.
    public init(bytes: [UInt8]) {
        storage = .bytes(bytes)
        declaredLength = bytes.count
    }

    init(source: any BodySource, declaredLength: Int?) {
        storage = .stream(source)
        self.declaredLength = declaredLength
    }

    /// No body.
    public static var empty: RequestBody { RequestBody(bytes: []) }

    public func makeAsyncIterator() -> AsyncIterator {
        switch storage {
        case .bytes(let bytes): return AsyncIterator(pending: bytes.isEmpty ? nil : bytes, source: nil)
        case .stream(let source):
            source.claim()
            return AsyncIterator(pending: nil, source: source)
        }
    }

    public struct AsyncIterator: AsyncIteratorProtocol {
        fileprivate var pending: [UInt8]?
        fileprivate let source: (any BodySource)?

        public mutating func next() async throws -> [UInt8]? {
            if let chunk = pending {
                pending = nil
                return chunk
            }
            return try await source?.nextChunk()
        }
    }

    /// The whole body, or a 413 problem when it is longer than `limit` bytes.
    public func collect(upTo limit: Int) async throws -> [UInt8] {
        if let declaredLength, declaredLength > limit { throw HTTPError.bodyTooLarge(limit: limit) }
        var collected: [UInt8] = []
        collected.reserveCapacity(Swift.min(declaredLength ?? 0, limit))
        for try await chunk in self {
            guard collected.count + chunk.count <= limit else { throw HTTPError.bodyTooLarge(limit: limit) }
            collected.append(contentsOf: chunk)
        }
        return collected
    }

    /// The parts of a `multipart/form-data` body, parsed by libmicrohttpd's post processor as bytes arrive.
    ///
    /// Throws a 415 problem when the body is not `multipart/form-data`.
    public func multipart(limits: MultipartLimits = MultipartLimits()) throws -> MultipartReader {
        guard case .stream(let source) = storage, let parser = source.multipartParser() else {
            throw HTTPError(.unsupportedMediaType, detail: "expected a multipart/form-data body")
        }
        parser.limits = limits
        return MultipartReader(body: self, parser: parser)
    }
}

extension HTTPError {
    /// 413: the body is over the route's limit.
    public static func bodyTooLarge(limit: Int) -> HTTPError {
        HTTPError(.contentTooLarge, detail: "the request body is larger than \(limit) bytes")
    }
}
