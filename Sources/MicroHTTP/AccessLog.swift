import JSONText
import Platform
import Synchronization
public import Telemetry

/// The access log: one line per request, in the same text or JSON shape as the process's other log lines, written
/// into a buffer that the server's run loop writes out every 100 ms, never by the HTTP thread.
///
/// A request costs a line formatted straight into the buffer (no metadata dictionary, no `String` per field), under one
/// uncontended lock that the writer holds only to swap buffers; the timestamp's text is made once a second. What the
/// buffer holds when the process is killed (at most 100 ms of lines) is lost; a graceful shutdown writes it all.
public final class AccessLog: Sendable {
    /// The line's shape: the one swift-log's `StreamLogHandler` writes, or one JSON object (Herald's `--log-format json`).
    public enum Format: Sendable {
        /// `2026-11-24T09:11:25+0000 info herald: bytes=15 client=… duration_us=804 method=GET path=/healthz request_id=… status=200 [MicroHTTP] request`
        case text
        /// `{"timestamp":"2026-11-24T09:11:25.123Z","level":"info","label":"herald","message":"request","bytes":"15",…}`
        case json
    }

    /// One request's fields, as the line says them.
    ///
    /// Not copyable: made for one line and read in place (a copyable one was copied whole, then destroyed, on its way to
    /// ``record(_:)``).
    public struct Entry: ~Copyable, Sendable {
        public var method: String
        public var path: Substring
        /// nil when no response was sent (`aborted`).
        public var status: Int?
        /// Body bytes sent; nil when unknown (`-`).
        public var bytes: Int?
        public var microseconds: Int
        public var requestID: String
        public var client: String?
        /// libmicrohttpd's termination code when the request did not complete normally.
        public var termination: Int?
        /// The request's span, when the server traces: its `trace_id` and `span_id`.
        public var trace: TraceParent?

        public init(
            method: String, path: Substring, status: Int?, bytes: Int?, microseconds: Int, requestID: String, client: String?, termination: Int?,
            trace: TraceParent? = nil
        ) {
            self.method = method
            self.path = path
            self.status = status
            self.bytes = bytes
            self.microseconds = microseconds
            self.requestID = requestID
            self.client = client
            self.termination = termination
            self.trace = trace
        }
    }

    private struct Buffer {
        var bytes: [UInt8] = []
        /// The second `prefix` was made for, and its text: the timestamp up to the seconds (JSON: with the `.`).
        var second = -1
        var prefix: [UInt8] = []
    }

    private let format: Format
    private let label: String
    private let descriptor: Int32
    private let buffer = Mutex(Buffer())
    /// The room each buffer starts with: a tick's lines at a few thousand requests a second.
    private static let initialCapacity = 256 * 1024

    /// A log of `format` lines labelled `label` (the logger's label, `herald`) written to `descriptor` (not owned).
    public init(format: Format, label: String, descriptor: Int32 = STDOUT_FILENO) {
        self.format = format
        self.label = label
        self.descriptor = descriptor
        buffer.withLock { $0.bytes.reserveCapacity(Self.initialCapacity) }
    }

    /// Appends `entry`'s line.
    public func record(_ entry: borrowing Entry) {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        buffer.withLock { buffer in
            if buffer.second != now.tv_sec {
                buffer.second = now.tv_sec
                buffer.prefix = Self.timestampPrefix(seconds: now.tv_sec, format: format)
            }
            switch format {
            case .text: appendText(entry, to: &buffer)
            case .json: appendJSON(entry, milliseconds: now.tv_nsec / 1_000_000, to: &buffer)
            }
        }
    }

    /// Writes out every line recorded so far (from the caller's thread; `write(2)` outside the lock).
    public func flush() {
        var lines = buffer.withLock { buffer -> [UInt8] in
            guard !buffer.bytes.isEmpty else { return [] }
            var taken: [UInt8] = []
            taken.reserveCapacity(Self.initialCapacity)
            swap(&taken, &buffer.bytes)
            return taken
        }
        guard !lines.isEmpty else { return }
        lines.withUnsafeBytes { bytes in
            var offset = 0
            while offset < bytes.count {
                let written = write(descriptor, bytes.baseAddress! + offset, bytes.count - offset)
                if written < 0 {
                    if errno == EINTR { continue }
                    return  // Nowhere left to say so: lines are lost rather than the server stopped.
                }
                offset += written
            }
        }
        lines.removeAll()
    }

    /// Flushes every `interval` until the task is cancelled, then once more.
    public func flushUntilCancelled(every interval: Duration = .milliseconds(100)) async {
        while !Task.isCancelled {
            try? await Task.sleep(for: interval)
            flush()
        }
        flush()
    }

    // MARK: Lines

    private func appendText(_ entry: borrowing Entry, to buffer: inout Buffer) {
        // The line is put together in room made once, then appended in one copy: appended piece by piece, each of its
        // twenty appends checked the array's uniqueness and room again. The literals take at most 144 bytes, the four numbers
        // `DecimalDigits.maximumCount` each.
        let traceSize = entry.trace.map { $0.spanID.utf8.count + $0.traceID.utf8.count } ?? 0
        let size =
            buffer.prefix.count + label.utf8.count + (entry.client?.utf8.count ?? 1) + entry.method.utf8.count + entry.path.utf8.count
            + entry.requestID.utf8.count + traceSize + 144 + 4 * DecimalDigits.maximumCount
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: size) { room in
            var line = Line(start: room.baseAddress!)
            buffer.prefix.withUnsafeBufferPointer { line.add($0) }
            line.add(" info ")
            line.add(utf8: label)
            line.add(": bytes=")
            if let bytes = entry.bytes { line.add(decimal: bytes) } else { line.add("-") }
            line.add(" client=")
            line.add(utf8: entry.client ?? "-")
            line.add(" duration_us=")
            line.add(decimal: entry.microseconds)
            line.add(" method=")
            line.add(utf8: entry.method)
            line.add(" path=")
            line.add(utf8: entry.path)
            line.add(" request_id=")
            line.add(utf8: entry.requestID)
            if let trace = entry.trace {
                line.add(" span_id=")
                line.add(utf8: trace.spanID)
            }
            line.add(" status=")
            if let status = entry.status { line.add(decimal: status) } else { line.add("aborted") }
            if let termination = entry.termination {
                line.add(" termination=")
                line.add(decimal: termination)
            }
            if let trace = entry.trace {
                line.add(" trace_id=")
                line.add(utf8: trace.traceID)
            }
            line.add(" [MicroHTTP] request\n")
            buffer.bytes.append(contentsOf: UnsafeBufferPointer(start: room.baseAddress, count: line.count))
        }
    }

    /// A line's bytes copied one piece after another into room its caller made large enough.
    private struct Line {
        let start: UnsafeMutablePointer<UInt8>
        var count = 0

        mutating func add(_ bytes: UnsafeBufferPointer<UInt8>) {
            guard let base = bytes.baseAddress else { return }
            (start + count).update(from: base, count: bytes.count)
            count += bytes.count
        }

        mutating func add(_ literal: StaticString) {
            add(UnsafeBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount))
        }

        mutating func add(utf8 text: some StringProtocol) {
            if text.utf8.withContiguousStorageIfAvailable({ add($0) }) == nil {
                for byte in text.utf8 {
                    start[count] = byte
                    count += 1
                }
            }
        }

        mutating func add(decimal value: Int) {
            count += DecimalDigits.write(value, to: start + count)
        }
    }

    /// The members in key order, every value a string: what `JSONLogHandler` writes for the same metadata.
    private func appendJSON(_ entry: borrowing Entry, milliseconds: Int, to buffer: inout Buffer) {
        buffer.bytes.append(contentsOf: buffer.prefix)
        buffer.bytes.append(UInt8(ascii: "0") + UInt8(milliseconds / 100))
        buffer.bytes.append(UInt8(ascii: "0") + UInt8(milliseconds / 10 % 10))
        buffer.bytes.append(UInt8(ascii: "0") + UInt8(milliseconds % 10))
        buffer.bytes.append(contentsOf: #"Z","level":"info","label":"#.utf8)
        Self.appendJSONString(label[...], to: &buffer.bytes)
        buffer.bytes.append(contentsOf: #","message":"request","bytes":""#.utf8)
        if let bytes = entry.bytes { Self.appendDecimal(bytes, to: &buffer.bytes) } else { buffer.bytes.append(UInt8(ascii: "-")) }
        buffer.bytes.append(contentsOf: #"","client":"#.utf8)
        Self.appendJSONString((entry.client ?? "-")[...], to: &buffer.bytes)
        buffer.bytes.append(contentsOf: #","duration_us":""#.utf8)
        Self.appendDecimal(entry.microseconds, to: &buffer.bytes)
        buffer.bytes.append(contentsOf: #"","method":"#.utf8)
        Self.appendJSONString(entry.method[...], to: &buffer.bytes)
        buffer.bytes.append(contentsOf: #","path":"#.utf8)
        Self.appendJSONString(entry.path, to: &buffer.bytes)
        buffer.bytes.append(contentsOf: #","request_id":"#.utf8)
        Self.appendJSONString(entry.requestID[...], to: &buffer.bytes)
        if let trace = entry.trace {
            buffer.bytes.append(contentsOf: #","span_id":""#.utf8)
            buffer.bytes.append(contentsOf: trace.spanID.utf8)
            buffer.bytes.append(UInt8(ascii: "\""))
        }
        buffer.bytes.append(contentsOf: #","status":""#.utf8)
        if let status = entry.status { Self.appendDecimal(status, to: &buffer.bytes) } else { buffer.bytes.append(contentsOf: "aborted".utf8) }
        buffer.bytes.append(UInt8(ascii: "\""))
        if let termination = entry.termination {
            buffer.bytes.append(contentsOf: #","termination":""#.utf8)
            Self.appendDecimal(termination, to: &buffer.bytes)
            buffer.bytes.append(UInt8(ascii: "\""))
        }
        if let trace = entry.trace {
            buffer.bytes.append(contentsOf: #","trace_id":""#.utf8)
            buffer.bytes.append(contentsOf: trace.traceID.utf8)
            buffer.bytes.append(UInt8(ascii: "\""))
        }
        buffer.bytes.append(contentsOf: "}\n".utf8)
    }

    /// The timestamp's text up to the seconds: local time with its offset for text (as swift-log writes it), UTC with
    /// the `.` before the milliseconds for JSON, behind `{"timestamp":"`.
    static func timestampPrefix(seconds: Int, format: Format) -> [UInt8] {
        var time = time_t(seconds)
        var parts = tm()
        var text = [CChar](repeating: 0, count: 64)
        switch format {
        case .text:
            localtime_r(&time, &parts)
            let count = strftime(&text, text.count, "%Y-%m-%dT%H:%M:%S%z", &parts)
            return text.prefix(count).map { UInt8(bitPattern: $0) }
        case .json:
            gmtime_r(&time, &parts)
            let count = strftime(&text, text.count, "%Y-%m-%dT%H:%M:%S.", &parts)
            return Array(#"{"timestamp":""#.utf8) + text.prefix(count).map { UInt8(bitPattern: $0) }
        }
    }

    static func appendDecimal(_ value: Int, to bytes: inout [UInt8]) {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: DecimalDigits.maximumCount) { room in
            bytes.append(contentsOf: UnsafeBufferPointer(start: room.baseAddress, count: DecimalDigits.write(value, to: room.baseAddress!)))
        }
    }

    /// `text` as a JSON string literal, escaped as all of Herald's JSON is (so a line equals `JSONLogHandler`'s).
    static func appendJSONString(_ text: Substring, to bytes: inout [UInt8]) {
        JSONEscaping.appendString(text.utf8, to: &bytes)
    }
}
