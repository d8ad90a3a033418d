import Foundation
import Telemetry
import Testing

@testable import MicroHTTP

/// A pipe whose read end the test drains without blocking: what an access log wrote so far.
final class Pipe2: Sendable {
    let read: Int32
    let write: Int32

    init() throws {
        var ends: [Int32] = [0, 0]
        try #require(pipe(&ends) == 0)
        (read, write) = (ends[0], ends[1])
        _ = fcntl(read, F_SETFL, fcntl(read, F_GETFL) | O_NONBLOCK)
        // Room for every line a test writes, so that flush() never waits for the reader.
        _ = fcntl(write, 1031 /* F_SETPIPE_SZ */, 1 << 20)
    }

    /// Everything written so far.
    func drain() -> String {
        var text: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = Foundation.read(read, &chunk, chunk.count)
            guard count > 0 else { break }
            text += chunk.prefix(count)
        }
        return String(decoding: text, as: UTF8.self)
    }

    deinit {
        close(read)
        close(write)
    }
}

@Suite("The access log")
struct AccessLogTests {
    static var entry: AccessLog.Entry {
        AccessLog.Entry(
            method: "GET", path: "/v1/jobs/abc", status: 200, bytes: 814, microseconds: 41, requestID: "f93d2", client: "127.0.0.1",
            termination: nil)
    }

    @Test func textLinesReadAsSwiftLogsStreamLogHandlerWritesThem() throws {
        let pipe = try Pipe2()
        let log = AccessLog(format: .text, label: "herald", descriptor: pipe.write)
        log.record(Self.entry)
        var aborted = Self.entry
        (aborted.status, aborted.bytes, aborted.client, aborted.termination) = (nil, nil, nil, 2)
        log.record(aborted)
        log.flush()
        let lines = pipe.drain().split(separator: "\n")
        try #require(lines.count == 2)
        // `2026-11-24T09:11:25+0000 info herald: …`: the timestamp as swift-log writes it (local time and offset).
        #expect(lines[0].range(of: #"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4} "#, options: .regularExpression) != nil, "\(lines[0])")
        #expect(
            lines[0].drop { $0 != " " }
                == " info herald: bytes=814 client=127.0.0.1 duration_us=41 method=GET path=/v1/jobs/abc request_id=f93d2 status=200 [MicroHTTP] request"
        )
        #expect(
            lines[1].drop { $0 != " " }
                == " info herald: bytes=- client=- duration_us=41 method=GET path=/v1/jobs/abc request_id=f93d2 status=aborted termination=2 [MicroHTTP] request"
        )
    }

    @Test func aTracedRequestsLineCarriesItsTraceAndSpanIDs() throws {
        var traced = Self.entry
        traced.trace = TraceParent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
        try #require(traced.trace != nil)
        let text = try Pipe2()
        let textLog = AccessLog(format: .text, label: "herald", descriptor: text.write)
        textLog.record(traced)
        textLog.flush()
        // In key order, as swift-log writes metadata: span_id after request_id, trace_id last.
        #expect(
            text.drain().drop { $0 != " " }
                == " info herald: bytes=814 client=127.0.0.1 duration_us=41 method=GET path=/v1/jobs/abc request_id=f93d2 "
                + "span_id=b7ad6b7169203331 status=200 trace_id=0af7651916cd43dd8448eb211c80319c [MicroHTTP] request\n")
        let json = try Pipe2()
        let jsonLog = AccessLog(format: .json, label: "herald", descriptor: json.write)
        jsonLog.record(traced)
        jsonLog.flush()
        let line = json.drain()
        let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: String])
        #expect(object["trace_id"] == "0af7651916cd43dd8448eb211c80319c" && object["span_id"] == "b7ad6b7169203331")
        #expect(line.range(of: #""request_id":"f93d2","span_id":"b7ad6b7169203331","status":"200","trace_id":"#) != nil, "\(line)")
    }

    @Test func traceParentsAreReadOnlyInTheirW3CShape() {
        let valid = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        #expect(TraceParent(valid)?.traceID == "0af7651916cd43dd8448eb211c80319c")
        #expect(TraceParent(valid)?.spanID == "b7ad6b7169203331")
        for invalid in [
            "", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331", "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "00_0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01x",
            "00-0af7651916cd43dd8448eb211c80319g-b7ad6b7169203331-01", "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01", "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
        ] {
            #expect(TraceParent(invalid) == nil, "\(invalid)")
        }
    }

    @Test func numbersAreWrittenInDecimal() {
        for value in [0, 7, 10, 99, 100, 1_234_567, -1, -10, Int.max, Int.min] {
            var bytes: [UInt8] = [UInt8(ascii: "=")]
            AccessLog.appendDecimal(value, to: &bytes)
            #expect(String(decoding: bytes, as: UTF8.self) == "=\(value)")
        }
    }

    @Test func jsonLinesAreObjectsWithEveryFieldAString() throws {
        let pipe = try Pipe2()
        let log = AccessLog(format: .json, label: "herald", descriptor: pipe.write)
        var odd = Self.entry
        odd.path = "/a\"b\\c\u{01}é"
        log.record(odd)
        log.flush()
        let line = pipe.drain()
        #expect(line.hasSuffix("}\n") && line.filter { $0 == "\n" }.count == 1)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: String])
        #expect(object["path"] == "/a\"b\\c\u{01}é")
        #expect(object["level"] == "info" && object["label"] == "herald" && object["message"] == "request")
        #expect(object["status"] == "200" && object["bytes"] == "814" && object["duration_us"] == "41")
        #expect(object["timestamp"]?.range(of: #"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$"#, options: .regularExpression) != nil)
        #expect(object["termination"] == nil)
    }

    @Test func nothingIsWrittenUntilAFlushThenEveryLineOnce() throws {
        let pipe = try Pipe2()
        let log = AccessLog(format: .text, label: "herald", descriptor: pipe.write)
        for _ in 0..<100 { log.record(Self.entry) }
        #expect(pipe.drain().isEmpty, "recording writes nothing")
        log.flush()
        #expect(pipe.drain().split(separator: "\n").count == 100)
        log.flush()
        #expect(pipe.drain().isEmpty, "a line is written once")
    }

    /// Lines recorded from many threads at once, flushed meanwhile, come out whole: none cut, none lost.
    @Test func linesFromManyThreadsComeOutWhole() async throws {
        let pipe = try Pipe2()
        let log = AccessLog(format: .json, label: "herald", descriptor: pipe.write)
        // Under the pipe's 1 MiB in all, so that the last flush (after the loop that drains) never waits for a reader.
        let (threads, each) = (8, 400)
        var text = await withTaskGroup(of: String.self) { group in
            for thread in 0..<threads {
                group.addTask {
                    await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
                        Thread.detachNewThread {
                            for index in 0..<each {
                                var entry = Self.entry
                                entry.requestID = "\(thread)-\(index)"
                                log.record(entry)
                            }
                            done.resume()
                        }
                    }
                    return ""
                }
            }
            group.addTask {
                var collected = ""
                for _ in 0..<50 {
                    log.flush()
                    collected += pipe.drain()
                    await Task.yield()
                }
                return collected
            }
            return await group.reduce(into: "") { $0 += $1 }
        }
        log.flush()
        text += pipe.drain()
        let ids = try text.split(separator: "\n").map { line in
            try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: String])["request_id"] ?? ""
        }
        #expect(ids.count == threads * each)
        #expect(Set(ids).count == threads * each)
    }

    @Test func theServerWritesEveryRequestsLineByTheTimeItHasStopped() async throws {
        let pipe = try Pipe2()
        var router = Router()
        router.get("/hello") { _ in .text("hello") }
        let configuration = ServerConfiguration(accessLog: AccessLog(format: .text, label: "MicroHTTPTests", descriptor: pipe.write))
        try await withLiveServer(router, configuration: configuration, logs: CapturedLogs()) { port, _ in
            let get = "GET /hello HTTP/1.1\r\nHost: localhost\r\n\r\n"
            _ = try await rawExchange(port: port, get + get + "GET /nowhere HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        }
        let lines = pipe.drain().split(separator: "\n")
        #expect(lines.count == 3, "\(lines)")
        #expect(lines.filter { $0.contains(" path=/hello ") && $0.contains(" status=200 ") && $0.contains(" bytes=5 ") }.count == 2)
        #expect(lines.contains { $0.contains(" path=/nowhere ") && $0.contains(" status=404 ") })
        #expect(lines.allSatisfy { $0.contains(" client=127.0.0.1 ") && $0.hasSuffix(" [MicroHTTP] request") })
    }

    @Test func aRequestsDurationCountsTheHandlersWork() async throws {
        let pipe = try Pipe2()
        var router = Router()
        // The work to measure: a handler that takes at least 50 ms, async and on libmicrohttpd's thread.
        router.get("/slow") { _ in
            try await Task.sleep(for: .milliseconds(50))
            return .text("slow")
        }
        router.get(
            "/slow-immediate",
            immediate: { _ in
                usleep(50_000)
                return .text("slow")
            }
        ) { _ in .text("never") }
        router.get("/quick") { _ in .text("quick") }
        let configuration = ServerConfiguration(accessLog: AccessLog(format: .text, label: "MicroHTTPTests", descriptor: pipe.write))
        try await withLiveServer(router, configuration: configuration, logs: CapturedLogs()) { port, _ in
            let get = { (path: String) in "GET \(path) HTTP/1.1\r\nHost: localhost\r\n\r\n" }
            _ = try await rawExchange(
                port: port, get("/slow") + get("/slow-immediate") + "GET /quick HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        }
        let lines = pipe.drain().split(separator: "\n")
        func duration(_ path: String) -> Int? {
            lines.first { $0.contains(" path=\(path) ") }?.split(separator: " ").first { $0.hasPrefix("duration_us=") }
                .flatMap { Int($0.dropFirst("duration_us=".count)) }
        }
        let slow = try #require(duration("/slow"), "\(lines)")
        let immediate = try #require(duration("/slow-immediate"), "\(lines)")
        let quick = try #require(duration("/quick"), "\(lines)")
        #expect(slow >= 50_000 && immediate >= 50_000, "\(lines)")
        #expect(quick >= 0 && quick < slow, "\(lines)")
    }
}
