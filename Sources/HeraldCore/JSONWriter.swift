/// Writes JSON text straight into bytes, for the hottest responses: `JSONEncoder` costs tens of µs for a job.
///
/// It writes what it is told, in order: callers write each key once and keep objects balanced.
/// `JobJSONTests` checks its output equals `JSONEncoder`'s for the objects that use it.
public struct JSONWriter {
    public private(set) var bytes: [UInt8] = []
    /// Whether the next member or element needs a comma before it.
    private var needsComma = false

    public init(capacity: Int = 1024) {
        bytes.reserveCapacity(capacity)
    }

    public mutating func beginObject() {
        separate()
        bytes.append(UInt8(ascii: "{"))
        needsComma = false
    }

    public mutating func endObject() {
        bytes.append(UInt8(ascii: "}"))
        needsComma = true
    }

    public mutating func beginArray() {
        separate()
        bytes.append(UInt8(ascii: "["))
        needsComma = false
    }

    public mutating func endArray() {
        bytes.append(UInt8(ascii: "]"))
        needsComma = true
    }

    /// A member's key; its value comes next.
    public mutating func key(_ key: StaticString) {
        separate()
        bytes.append(UInt8(ascii: "\""))
        key.withUTF8Buffer { bytes.append(contentsOf: $0) }
        bytes.append(UInt8(ascii: "\""))
        bytes.append(UInt8(ascii: ":"))
        needsComma = false
    }

    public mutating func string(_ value: String) {
        separate()
        bytes.append(UInt8(ascii: "\""))
        var value = value
        // Ids, states and timestamps need no escaping: one copy of the whole string.
        value.withUTF8 { utf8 in
            if utf8.allSatisfy({ $0 >= 0x20 && $0 != UInt8(ascii: "\"") && $0 != UInt8(ascii: "\\") }) {
                bytes.append(contentsOf: utf8)
            } else {
                for byte in utf8 { escape(byte) }
            }
        }
        bytes.append(UInt8(ascii: "\""))
        needsComma = true
    }

    private mutating func escape(_ byte: UInt8) {
        let escaped: UInt8
        switch byte {
        case UInt8(ascii: "\""): escaped = UInt8(ascii: "\"")
        case UInt8(ascii: "\\"): escaped = UInt8(ascii: "\\")
        case 0x0A: escaped = UInt8(ascii: "n")
        case 0x0D: escaped = UInt8(ascii: "r")
        case 0x09: escaped = UInt8(ascii: "t")
        case 0x08: escaped = UInt8(ascii: "b")
        case 0x0C: escaped = UInt8(ascii: "f")
        case 0..<0x20:
            let hex: StaticString = "0123456789abcdef"
            bytes.append(contentsOf: "\\u00".utf8)
            hex.withUTF8Buffer { digits in
                bytes.append(digits[Int(byte >> 4)])
                bytes.append(digits[Int(byte & 0xF)])
            }
            return
        default:
            bytes.append(byte)
            return
        }
        bytes.append(UInt8(ascii: "\\"))
        bytes.append(escaped)
    }

    public mutating func string(_ value: String?) {
        if let value { string(value) } else { null() }
    }

    public mutating func int(_ value: Int) {
        separate()
        bytes.append(contentsOf: String(value).utf8)
        needsComma = true
    }

    public mutating func bool(_ value: Bool) {
        separate()
        bytes.append(contentsOf: (value ? "true" : "false").utf8)
        needsComma = true
    }

    public mutating func null() {
        separate()
        bytes.append(contentsOf: "null".utf8)
        needsComma = true
    }

    private mutating func separate() {
        if needsComma { bytes.append(UInt8(ascii: ",")) }
    }
}

extension Job {
    /// The API's job object as JSON, the same members and values as its `Encodable` form, written directly.
    public var json: [UInt8] {
        var writer = JSONWriter(capacity: 512 + uploads.count * 160)
        writer.beginObject()
        writer.key("id")
        writer.string(id)
        writer.key("post_id")
        writer.string(postID)
        writer.key("state")
        writer.string(state.rawValue)
        writer.key("done")
        writer.bool(done)
        writer.key("priority")
        writer.string(priority.rawValue)
        writer.key("attempt")
        writer.int(attempt)
        writer.key("run_at")
        writer.string(runAt.description)
        writer.key("cancel_requested")
        writer.bool(cancelRequested)
        let progress = progress
        writer.key("progress")
        writer.beginObject()
        writer.key("total")
        writer.int(progress.total)
        writer.key("uploaded")
        writer.int(progress.uploaded)
        writer.key("failed")
        writer.int(progress.failed)
        writer.key("percent")
        writer.int(progress.percent)
        writer.endObject()
        writer.key("uploads")
        writer.beginArray()
        for upload in uploads {
            writer.beginObject()
            writer.key("media_id")
            writer.string(upload.mediaID)
            writer.key("state")
            writer.string(upload.state.rawValue)
            writer.key("attempts")
            writer.int(upload.attempts)
            writer.key("error")
            writer.string(upload.error)
            writer.endObject()
        }
        writer.endArray()
        writer.key("error")
        if let error {
            writer.beginObject()
            writer.key("code")
            writer.string(error.code.rawValue)
            writer.key("message")
            writer.string(error.message)
            if let mediaID = error.mediaID {
                writer.key("media_id")
                writer.string(mediaID)
            }
            writer.endObject()
        } else {
            writer.null()
        }
        writer.key("created_at")
        writer.string(createdAt.description)
        writer.key("started_at")
        writer.string(startedAt?.description)
        writer.key("finished_at")
        writer.string(finishedAt?.description)
        writer.endObject()
        return writer.bytes
    }
}
