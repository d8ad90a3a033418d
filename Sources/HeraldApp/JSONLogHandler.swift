import HeraldCore
public import Logging
import Platform
import Synchronization

/// `--log-format json`: one JSON object a line, for log collectors (Loki, CloudWatch, Elasticsearch).
///
/// Each line is `{"timestamp", "level", "label", "message", …metadata}`: the timestamp in RFC 3339 UTC with
/// milliseconds, then every metadata value (the handler's, the provider's, then the call's; the later wins) as a
/// top-level string member in key order, so `request_id` and `job_id` are fields of their own. Nested metadata is
/// flattened with dotted keys: `["http": ["method": "GET"]]` is `"http.method": "GET"`, and an array's elements
/// are numbered (`"tags.0"`). A metadata key that would repeat one of the four fixed members is written as
/// `metadata.KEY`. An error given to the call (`logger.error(…, error:)`) is the `error` member unless the metadata
/// has one. Strings are escaped by ``JSONWriter``; source, file and line are left out.
public struct JSONLogHandler: LogHandler {
    public var logLevel: Logger.Level = .info
    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?
    private let label: String
    private let output: LineWriter

    /// A handler for `label` that writes to `output` (standard output unless told).
    public init(label: String, output: LineWriter = .standardOutput, metadataProvider: Logger.MetadataProvider? = nil) {
        self.label = label
        self.output = output
        self.metadataProvider = metadataProvider
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        output.write(line(for: event, at: .now()))
    }

    /// The line for `event`, newline included.
    func line(for event: LogEvent, at time: Timestamp) -> [UInt8] {
        var merged = metadata
        if let provided = metadataProvider?.get() { merged.merge(provided) { _, new in new } }
        if let given = event.metadata { merged.merge(given) { _, new in new } }
        if let error = event.error, merged["error"] == nil { merged["error"] = "\(error)" }

        var writer = JSONWriter(capacity: 256)
        writer.beginObject()
        writer.key("timestamp")
        writer.timestamp(time)
        writer.key("level")
        writer.string(event.level.rawValue)
        writer.key("label")
        writer.string(label)
        writer.key("message")
        writer.string(event.message.description)
        var members: [(key: String, value: String)] = []
        for (key, value) in merged {
            Self.flatten(value, key: Self.fixedMembers.contains(key) ? "metadata.\(key)" : key, into: &members)
        }
        for member in members.sorted(by: { $0.key < $1.key }) {
            writer.key(escaping: member.key)
            writer.string(member.value)
        }
        writer.endObject()
        return writer.bytes + [UInt8(ascii: "\n")]
    }

    private static let fixedMembers: Set = ["timestamp", "level", "label", "message"]

    private static func flatten(_ value: Logger.Metadata.Value, key: String, into members: inout [(key: String, value: String)]) {
        switch value {
        case .string(let text): members.append((key, text))
        case .stringConvertible(let convertible): members.append((key, convertible.description))
        case .dictionary(let dictionary):
            for (inner, value) in dictionary { flatten(value, key: "\(key).\(inner)", into: &members) }
        case .array(let array):
            for (index, value) in array.enumerated() { flatten(value, key: "\(key).\(index)", into: &members) }
        }
    }
}

/// Lines to a file descriptor, each with one `write(2)` under a lock, so lines of concurrent tasks never interleave.
public final class LineWriter: Sendable {
    private let descriptor: Int32
    private let lock = Mutex(())

    /// Standard output.
    public static let standardOutput = LineWriter(descriptor: STDOUT_FILENO)

    /// A writer to `descriptor`, which it does not own (nor close).
    public init(descriptor: Int32) {
        self.descriptor = descriptor
    }

    /// Writes all of `line`; more than one `write` only when the kernel takes part of it.
    public func write(_ line: [UInt8]) {
        lock.withLock { _ in
            line.withUnsafeBytes { bytes in
                var offset = 0
                while offset < bytes.count {
                    let written = systemWrite(descriptor, bytes.baseAddress! + offset, bytes.count - offset)
                    if written < 0 {
                        if errno == EINTR { continue }
                        return  // Nowhere left to say so: a log line is lost rather than the process stopped.
                    }
                    offset += written
                }
            }
        }
    }
}
