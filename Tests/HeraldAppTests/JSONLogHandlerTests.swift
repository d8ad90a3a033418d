import Foundation
import HeraldCore
import Logging
import MicroHTTP
import Testing

@testable import HeraldApp

/// `--log-format json`: one line of valid JSON per event, the fixed members first, metadata as string members.
@Suite("JSONLogHandler")
struct JSONLogHandlerTests {
    static let time = Timestamp(rfc3339: "2026-11-22T10:15:30.123Z")!

    static func event(_ message: Logger.Message, level: Logger.Level = .info, metadata: Logger.Metadata? = nil) -> LogEvent {
        LogEvent(level: level, message: message, metadata: metadata, source: nil, file: #fileID, function: #function, line: #line)
    }

    /// The line as text and as the object a log collector reads.
    static func parse(_ line: [UInt8]) throws -> (text: String, object: [String: Any]) {
        let text = String(decoding: line, as: UTF8.self)
        #expect(text.hasSuffix("\n"))
        #expect(text.dropLast().allSatisfy { $0 != "\n" && $0 != "\r" }, "one line: \(text)")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(line)) as? [String: Any])
        return (text, object)
    }

    @Test("a message with metadata is one line of JSON: timestamp, level, label, message, then the metadata as strings")
    func members() throws {
        var handler = JSONLogHandler(label: "herald", metadataProvider: .init { ["provided": "yes"] })
        handler[metadataKey: "request_id"] = "handler-value"
        let line = handler.line(
            for: Self.event(
                "request done", level: .notice,
                metadata: [
                    "request_id": "4bf92f3577b34da6a3ce929d0e0e4736",
                    "job_id": "01a202c0-f64b-7d41-9e6f-0a1b2c3d4e61",
                    "status": .stringConvertible(201),
                    "http": ["method": "POST", "route": "/v1/posts"],
                    "tags": ["a", ["b": "c"]],
                    "message": "not the message",
                ]),
            at: Self.time)
        let (text, object) = try Self.parse(line)
        #expect(text.hasPrefix(#"{"timestamp":"2026-11-22T10:15:30.123Z","level":"notice","label":"herald","message":"request done","#))
        #expect(object["timestamp"] as? String == "2026-11-22T10:15:30.123Z")
        #expect(object["level"] as? String == "notice")
        #expect(object["label"] as? String == "herald")
        #expect(object["message"] as? String == "request done")
        // The call's metadata wins over the handler's; the provider's is there too.
        #expect(object["request_id"] as? String == "4bf92f3577b34da6a3ce929d0e0e4736")
        #expect(object["job_id"] as? String == "01a202c0-f64b-7d41-9e6f-0a1b2c3d4e61")
        #expect(object["provided"] as? String == "yes")
        #expect(object["status"] as? String == "201")
        #expect(object["http.method"] as? String == "POST")
        #expect(object["http.route"] as? String == "/v1/posts")
        #expect(object["tags.0"] as? String == "a")
        #expect(object["tags.1.b"] as? String == "c")
        #expect(object["metadata.message"] as? String == "not the message")
        #expect(object.count == 13)
    }

    @Test("quotes, backslashes, newlines and control characters in the message and metadata are escaped")
    func escaping() throws {
        let awkward = "say \"hi\" \\ then\nnew line\r\ttab \u{0} \u{1} \u{1F} é 🚀 </a>"
        let handler = JSONLogHandler(label: "la\"bel\n")
        let line = handler.line(for: Self.event("\(awkward)", metadata: ["key \"\n": "\(awkward)", "error": "x\u{7}"]), at: Self.time)
        #expect(line.dropLast().allSatisfy { $0 >= 0x20 }, "no raw control bytes")
        let (text, object) = try Self.parse(line)
        #expect(object["message"] as? String == awkward)
        #expect(object["label"] as? String == "la\"bel\n")
        #expect(object["key \"\n"] as? String == awkward)
        #expect(object["error"] as? String == "x\u{7}")
        #expect(text.contains(#"\u0000"#) && text.contains(#"\u001f"#) && text.contains(#"\""#) && text.contains(#"\n"#))
    }

    @Test("through a Logger to a descriptor: one write a line, the timestamp in RFC 3339 UTC with milliseconds")
    func throughLogger() throws {
        let pipe = Pipe()
        let writer = LineWriter(descriptor: pipe.fileHandleForWriting.fileDescriptor)
        var logger = Logger(label: "herald.test") { JSONLogHandler(label: $0, output: writer) }
        logger.logLevel = .debug
        logger[metadataKey: "job_id"] = "j1"
        logger.debug("first", metadata: ["request_id": "r1"])
        logger.trace("below the level")
        logger.error("second", error: CancellationError())
        try pipe.fileHandleForWriting.close()
        let output = pipe.fileHandleForReading.readDataToEndOfFile()
        let lines = output.split(separator: UInt8(ascii: "\n"))
        #expect(lines.count == 2)
        let first = try #require(try JSONSerialization.jsonObject(with: Data(lines[0])) as? [String: Any])
        #expect(first["message"] as? String == "first")
        #expect(first["label"] as? String == "herald.test")
        #expect(first["level"] as? String == "debug")
        #expect(first["request_id"] as? String == "r1")
        #expect(first["job_id"] as? String == "j1")
        let timestamp = try #require(first["timestamp"] as? String)
        #expect(timestamp.wholeMatch(of: /\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z/) != nil, "\(timestamp)")
        let second = try #require(try JSONSerialization.jsonObject(with: Data(lines[1])) as? [String: Any])
        #expect(second["level"] as? String == "error")
        #expect(second["error"] as? String == "CancellationError()")
        #expect(second["job_id"] as? String == "j1")
    }

    @Test("--log-format names text or json, in any case")
    func formatNames() {
        #expect(LogFormat(name: "json") == .json)
        #expect(LogFormat(name: "TEXT") == .text)
        #expect(LogFormat(name: "yaml") == nil)
        #expect(LogFormat(name: "") == nil)
        #expect(HeraldConfiguration().logFormat == .text)
    }

    /// The access log writes its JSON lines itself, off the HTTP thread: byte for byte what this handler would write
    /// for the same request's metadata, but for the timestamp's milliseconds.
    @Test func accessLogLinesAreTheLinesThisHandlerWrites() throws {
        var ends: [Int32] = [0, 0]
        try #require(pipe(&ends) == 0)
        defer {
            close(ends[0])
            close(ends[1])
        }
        let log = AccessLog(format: .json, label: "herald", descriptor: ends[1])
        for path in ["/v1/jobs/abc", "/odd \"path\"\\\u{1}\u{8}\u{C}é"] {
            log.record(
                AccessLog.Entry(
                    method: "POST", path: path[...], status: 202, bytes: 977, microseconds: 1234, requestID: "r1", client: "::1", termination: 3))
            log.flush()
            var bytes = [UInt8](repeating: 0, count: 4096)
            let count = read(ends[0], &bytes, bytes.count)
            let line = String(decoding: bytes.prefix(max(count, 0)), as: UTF8.self)
            let metadata: Logger.Metadata = [
                "method": "POST", "path": "\(path)", "status": "202", "bytes": "977", "duration_us": "1234", "request_id": "r1",
                "client": "::1", "termination": "3",
            ]
            let expected = String(
                decoding: JSONLogHandler(label: "herald").line(for: Self.event("request", metadata: metadata), at: .now()), as: UTF8.self)
            // The timestamps differ by the moment each was taken: compare from the level on.
            func afterTimestamp(_ text: String) -> Substring { text[(text.range(of: #""level""#)?.lowerBound ?? text.startIndex)...] }
            #expect(afterTimestamp(line) == afterTimestamp(expected))
        }
    }
}
