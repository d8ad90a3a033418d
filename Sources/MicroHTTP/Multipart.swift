import CMicroHTTPD
import HTTPTypes
import Synchronization

/// Bounds on a `multipart/form-data` body: libmicrohttpd's post processor enforces none.
public struct MultipartLimits: Sendable {
    /// Parts (fields and files) in one body.
    public var maxParts: Int
    /// Bytes of one non-file field.
    public var maxFieldSize: Int
    /// Bytes of one file part.
    public var maxFileSize: Int

    public init(maxParts: Int = 32, maxFieldSize: Int = 64 << 10, maxFileSize: Int = 100 << 20) {
        self.maxParts = maxParts
        self.maxFieldSize = maxFieldSize
        self.maxFileSize = maxFileSize
    }
}

/// What a multipart body is made of, in the order it arrives.
public enum MultipartEvent: Sendable, Equatable {
    /// A part begins: its field name, and for file parts the client's file name and content type.
    case partStart(name: String, filename: String?, contentType: String?)
    /// Bytes of the current part.
    case data([UInt8])
    /// The current part is complete.
    case partEnd
}

/// Reads a multipart body as ``MultipartEvent``s; file parts stream, never held whole.
public struct MultipartReader: AsyncSequence, Sendable {
    public typealias Element = MultipartEvent
    let body: RequestBody
    let parser: MultipartParser

    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(body: body.makeAsyncIterator(), parser: parser)
    }

    public struct AsyncIterator: AsyncIteratorProtocol {
        var body: RequestBody.AsyncIterator
        let parser: MultipartParser
        var finished = false

        public mutating func next() async throws -> MultipartEvent? {
            while true {
                if let event = parser.popEvent() { return event }
                // A limit passed is reported after the events before it, which the handler may refuse first.
                if let failure = parser.failure { throw failure }
                if finished { return nil }
                if let chunk = try await body.next() {
                    try parser.feed(chunk)
                } else {
                    try parser.finish()
                    finished = true
                }
            }
        }
    }
}

/// Drives one `MHD_PostProcessor` and turns its callbacks into events.
///
/// `@unchecked Sendable`: created on the connection's thread, then used by the one task that reads the body.
final class MultipartParser: @unchecked Sendable {
    private var processor: OpaquePointer?
    var limits = MultipartLimits()
    private var events: [MultipartEvent] = []
    private var eventHead = 0
    private var current: (name: String, filename: String?, contentType: String?)?
    private var currentSize = 0
    private var parts = 0
    /// The limit the body passed; thrown once the events before it are taken.
    private(set) var failure: HTTPError?

    /// A parser for the connection's body, or `nil` when its content type is not `multipart/form-data`.
    static func make(for connection: OpaquePointer) -> MultipartParser? {
        let parser = MultipartParser()
        let context = Unmanaged.passUnretained(parser).toOpaque()
        guard let processor = MHD_create_post_processor(connection, 32 << 10, MultipartParser.iterate, context) else { return nil }
        parser.processor = processor
        return parser
    }

    deinit {
        if let processor { MHD_destroy_post_processor(processor) }
    }

    func popEvent() -> MultipartEvent? {
        guard eventHead < events.count else { return nil }
        let event = events[eventHead]
        eventHead += 1
        if eventHead == events.count {
            events.removeAll(keepingCapacity: true)
            eventHead = 0
        }
        return event
    }

    func feed(_ chunk: [UInt8]) throws {
        guard let processor, failure == nil else { return }
        let result = chunk.withUnsafeBufferPointer { buffer in
            buffer.withMemoryRebound(to: CChar.self) { MHD_post_process(processor, $0.baseAddress, $0.count) }
        }
        if failure == nil, result != .YES { throw HTTPError(.badRequest, detail: "malformed multipart/form-data body") }
    }

    func finish() throws {
        guard let processor else { return }
        self.processor = nil
        let result = MHD_destroy_post_processor(processor)
        if failure != nil { return }
        if result != .YES { throw HTTPError(.badRequest, detail: "incomplete multipart/form-data body") }
        if current != nil { events.append(.partEnd) }
        current = nil
    }

    /// libmicrohttpd calls this for every piece of every part; `offset == 0` starts a new part, but for one case.
    ///
    /// When a body chunk ends a few bytes into a part's value, libmicrohttpd 0.9.75 reports the part at offset 0 with
    /// no bytes, then at offset 0 again with them: the same part (found by `Fuzz/multipart`). So offset 0 starts a new
    /// part only once the current one has bytes, or under another name. (Two parts of one name, the first empty, read
    /// as one: the price of not splitting every part whose first chunk is short.)
    func receive(name: String, filename: String?, contentType: String?, data: UnsafeRawBufferPointer, offset: UInt64) -> Bool {
        let isNewPart = current == nil || current?.name != name || current?.filename != filename || (offset == 0 && currentSize > 0)
        if isNewPart {
            if current != nil { events.append(.partEnd) }
            parts += 1
            guard parts <= limits.maxParts else {
                failure = HTTPError(.contentTooLarge, detail: "more than \(limits.maxParts) parts in the multipart body")
                return false
            }
            current = (name, filename, contentType)
            currentSize = 0
            events.append(.partStart(name: name, filename: filename, contentType: contentType))
        }
        currentSize += data.count
        let limit = filename == nil ? limits.maxFieldSize : limits.maxFileSize
        guard currentSize <= limit else {
            failure = HTTPError(.contentTooLarge, detail: "part '\(name)' is larger than \(limit) bytes")
            return false
        }
        if !data.isEmpty { events.append(.data(Array(data))) }
        return true
    }

    private static let iterate: MHD_PostDataIterator = { context, _, key, filename, contentType, _, data, offset, size in
        guard let context else { return .NO }
        let parser = Unmanaged<MultipartParser>.fromOpaque(context).takeUnretainedValue()
        let bytes = UnsafeRawBufferPointer(start: data, count: Int(size))
        let accepted = parser.receive(
            name: key.map { String(cString: $0) } ?? "",
            filename: filename.map { String(cString: $0) },
            contentType: contentType.map { String(cString: $0) },
            data: bytes,
            offset: offset
        )
        return accepted ? .YES : .NO
    }
}
