import Foundation
import HTTPTypes
import Logging
import MicroHTTP
import Testing

@Suite("Protections on 127.0.0.1", .serialized, .timeLimit(.minutes(2)))
struct ProtectionTests {
    static let chunkedHead = "POST /small HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n"
    static let chunk = "258\r\n" + String(repeating: "x", count: 600) + "\r\n"

    @Test func chunkedBodyOverTheLimitIs413EvenWhenTheHandlerSwallowsIt() async throws {
        var router = Router()
        router.post("/small", maxBodySize: 1000) { request in
            // The handler catches the 413 its body throws and answers 200: the client must still get the 413.
            var count = 0
            do {
                for try await chunk in request.body { count += chunk.count }
            } catch {
                return .text("swallowed")
            }
            return .text("\(count)")
        }
        try await withLiveServer(router) { port, _ in
            // 1200 bytes: over the 1000-byte limit, within the 1000 more that are read and dropped.
            let answer = try await rawExchange(port: port, Self.chunkedHead + Self.chunk + Self.chunk + "0\r\n\r\n")
            #expect(answer.hasPrefix("HTTP/1.1 413"), "\(answer)")
            #expect(answer.lowercased().contains("content-type: application/problem+json"), "\(answer)")
            #expect(answer.lowercased().contains("connection: close"), "\(answer)")
            #expect(answer.hasSuffix(#""status":413,"title":"Content Too Large","type":"about:blank"}"#), "\(answer)")
            #expect(!answer.contains("swallowed"))

            // 60,000 bytes: far past the limit and the bound on what is dropped: closed without an answer.
            let farOver = try await rawExchange(port: port, Self.chunkedHead + String(repeating: Self.chunk, count: 100) + "0\r\n\r\n")
            #expect(farOver.isEmpty, "\(farOver)")

            // Within the limit, the same route still reads the body.
            let fits = try await rawExchange(
                port: port,
                "POST /small HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + Self.chunk + "0\r\n\r\n")
            #expect(fits.hasPrefix("HTTP/1.1 200"), "\(fits)")
            #expect(fits.hasSuffix("600"))
        }
    }

    @Test func chunkedBodyOverTheLimitIs413AfterAnEarlyAnswer() async throws {
        var router = Router()
        // Answers without reading the body: what is still to come is dropped, but it may not pass the limit.
        router.post("/small", maxBodySize: 1000) { _ in .text("early") }
        try await withLiveServer(router) { port, _ in
            let answer = try await rawExchange(port: port, Self.chunkedHead + Self.chunk + Self.chunk + "0\r\n\r\n")
            #expect(answer.hasPrefix("HTTP/1.1 413"), "\(answer)")
            #expect(answer.contains(#""status":413"#), "\(answer)")
            #expect(!answer.contains("early"))
        }
    }
}
