/// One Server-Sent Event: its `id:`, `event:` and joined `data:` lines.
public struct ServerSentEvent: Sendable, Equatable {
    /// The last `id:` seen in the stream, as the spec keeps it across events.
    public var id: String?
    /// The `event:` field, `message` when none was given.
    public var name: String
    /// The `data:` lines joined with line feeds.
    public var data: String

    /// Creates an event.
    public init(id: String?, name: String, data: String) {
        self.id = id
        self.name = name
        self.data = data
    }
}

/// Splits a `text/event-stream` body into events, as the WHATWG HTML "event stream interpretation" does.
///
/// Bytes arrive in chunks cut anywhere (inside a line, inside a UTF-8 sequence); ``feed(_:)`` keeps the unfinished
/// line and returns the events the chunk completed. Comment lines (`:`) keep-alives are dropped.
public struct EventStreamParser: Sendable {
    private var pending: [UInt8] = []
    private var lastID: String?
    private var name = ""
    private var data: [String] = []
    private var hasData = false
    /// Whether the previous chunk ended in a CR, so that a LF starting this one belongs to it.
    private var endedInCR = false

    /// Creates a parser at the start of a stream.
    public init() {}

    /// Takes the next bytes of the stream; returns the events they complete, in order.
    public mutating func feed(_ bytes: some Sequence<UInt8>) -> [ServerSentEvent] {
        var events: [ServerSentEvent] = []
        for byte in bytes {
            if endedInCR {
                endedInCR = false
                if byte == UInt8(ascii: "\n") { continue }
            }
            switch byte {
            case UInt8(ascii: "\r"):
                endedInCR = true
                fallthrough
            case UInt8(ascii: "\n"):
                if let event = line(String(decoding: pending, as: UTF8.self)) { events.append(event) }
                pending.removeAll(keepingCapacity: true)
            default:
                pending.append(byte)
            }
        }
        return events
    }

    /// Handles one whole line; returns an event when the line is the blank one that ends it.
    private mutating func line(_ line: String) -> ServerSentEvent? {
        if line.isEmpty {
            defer {
                name = ""
                data = []
                hasData = false
            }
            guard hasData else { return nil }
            return ServerSentEvent(id: lastID, name: name.isEmpty ? "message" : name, data: data.joined(separator: "\n"))
        }
        if line.hasPrefix(":") { return nil }
        let field: Substring
        var value: Substring
        if let colon = line.firstIndex(of: ":") {
            field = line[..<colon]
            value = line[line.index(after: colon)...]
            if value.hasPrefix(" ") { value = value.dropFirst() }
        } else {
            field = line[...]
            value = ""
        }
        switch field {
        case "data":
            data.append(String(value))
            hasData = true
        case "event": name = String(value)
        case "id" where !value.contains("\0"): lastID = String(value)
        default: break
        }
        return nil
    }
}
