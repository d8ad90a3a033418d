import AsyncHTTPClient
import Foundation
import HTTPTypes
import MicroHTTP
import NIOCore
import NIOHTTP1
import Platform
import ServiceLifecycle
import Synchronization
import Testing

@Suite("Server on 127.0.0.1", .serialized, .timeLimit(.minutes(2)))
struct ServerTests {
    @Test func answersAndEchoesTheRequestID() async throws {
        var router = Router()
        router.get("/hello/{name}") { request in
            .text("hello \(request.parameters["name"] ?? "") from \(request.remoteAddress ?? "?") q=\(request.queryValue("q") ?? "-")")
        }
        try await withLiveServer(router) { port, _ in
            var request = HTTPClientRequest(url: "http://127.0.0.1:\(port)/hello/swift?q=1%202")
            request.headers.add(name: "X-Request-Id", value: "abc-1")
            let response = try await httpClient.execute(request, timeout: .seconds(10))
            #expect(response.status == .ok)
            #expect(response.headers["X-Request-Id"] == ["abc-1"])
            #expect(try await response.text() == "hello swift from 127.0.0.1 q=1 2")

            let generated = try await httpClient.execute(HTTPClientRequest(url: "http://127.0.0.1:\(port)/hello/x"), timeout: .seconds(10))
            #expect(generated.headers["X-Request-Id"].first?.count == 32)
        }
    }

    @Test func fieldNamesInAnyCaseAreTheirFieldsAndTheRequestIDIsTheDaemons() async throws {
        var router = Router()
        router.get("/fields") { request in
            let fields = request.fields
            let seen = [HTTPField.Name("Host")!, .authorization, .userAgent, .requestID, .contentType, .init("X-Custom")!]
                .map { "\($0.canonicalName)=\(fields[$0] ?? "-")" }
            // The handler's own request id gives way to the daemon's; its `Connection: close` is sent, once.
            return Response(
                headerFields: [.requestID: "handler-made", .connection: "close", .contentType: "text/plain"],
                body: .bytes(Array(seen.joined(separator: " ").utf8)))
        }
        try await withLiveServer(router) { port, _ in
            let head =
                "GET /fields HTTP/1.1\r\nhOsT: here\r\nAUTHORIZATION: Bearer k\r\nuser-agent: ua\r\nX-Request-ID: abc-2\r\n"
                + "Content-Typf: no\r\nx-custom: yes\r\n\r\n"
            let answer = try await rawExchange(port: port, head)
            #expect(answer.contains("host=here authorization=Bearer k user-agent=ua x-request-id=abc-2 content-type=- x-custom=yes"), "\(answer)")
            let lines = answer.lowercased().split(separator: "\r\n")
            #expect(lines.filter { $0.hasPrefix("x-request-id:") } == ["x-request-id: abc-2"], "\(answer)")
            #expect(lines.filter { $0.hasPrefix("connection:") } == ["connection: close"], "\(answer)")
        }
    }

    @Test func anImmediateHandlersStreamedBodyIsA500NamingTheRequest() async throws {
        var router = Router()
        router.get("/streamed", immediate: { _ in Response(body: .stream { try await $0.write("never sent") }) }) { _ in .text("async") }
        try await withLiveServer(router) { port, _ in
            var request = HTTPClientRequest(url: "http://127.0.0.1:\(port)/streamed")
            request.headers.add(name: "X-Request-Id", value: "stream-1")
            let response = try await httpClient.execute(request, timeout: .seconds(10))
            #expect(response.status == .internalServerError)
            #expect(response.headers["X-Request-Id"] == ["stream-1"])
            #expect(try await response.text().contains("internal error; request id stream-1"))
        }
    }

    /// Sent from its own memory by both kinds of handler, and let go once sent: the request after it, on the same
    /// connection, finds it freed (libmicrohttpd destroys a response before it reads the next request).
    @Test func anOwnedBodyIsSentAsItIsAndLetGoOnceSent() async throws {
        struct Held { weak var bytes: OwnedBytes? }
        let held = Mutex(Held())
        let size = 300_000
        let body = { @Sendable () -> ResponseBody in
            let start = malloc(size)!.assumingMemoryBound(to: UInt8.self)
            for index in 0..<size { start[index] = UInt8(ascii: "a") + UInt8(index % 26) }
            let bytes = OwnedBytes(taking: start, count: size)
            held.withLock { $0.bytes = bytes }
            return .bytes(bytes)
        }
        let expected = String((0..<size).map { Character(Unicode.Scalar(UInt8(ascii: "a") + UInt8($0 % 26))) })
        var router = Router()
        router.get("/now", immediate: { _ in Response(body: body()) }) { _ in .text("later") }
        router.get("/later") { _ in Response(body: body()) }
        router.get("/held", immediate: { _ in .text(held.withLock { $0.bytes == nil } ? "released" : "held") }) { _ in .text("?") }
        try await withLiveServer(router) { port, _ in
            let get = { (path: String) in "GET \(path) HTTP/1.1\r\nHost: localhost\r\n\r\n" }
            let answer = try await rawExchange(
                port: port, get("/now") + get("/held") + get("/later") + "GET /held HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            #expect(answer.components(separatedBy: "Content-Length: \(size)\r\n").count - 1 == 2)
            #expect(answer.components(separatedBy: "\r\n\r\n\(expected)HTTP/1.1").count - 1 == 2)
            #expect(answer.components(separatedBy: "released").count - 1 == 2, "\(answer.suffix(200))")
        }
    }

    @Test func immediateHandlersAnswerOnTheServerThreadOrHandOver() async throws {
        let asyncCalls = Mutex(0)
        var router = Router()
        router.get(
            "/status/{id}",
            immediate: { request in
                let id = try request.parameters.require("id")
                if id == "teapot" { throw HTTPError(.init(code: 418), detail: "short and stout") }
                return request.queryValue("wait") == nil ? .text("immediate \(id)") : nil
            }
        ) { request in
            asyncCalls.withLock { $0 += 1 }
            return .text("async \(try request.parameters.require("id"))")
        }
        try await withLiveServer(router) { port, _ in
            let base = "http://127.0.0.1:\(port)/status"
            let immediate = try await httpClient.execute(HTTPClientRequest(url: "\(base)/a"), timeout: .seconds(10))
            #expect(String(buffer: try await immediate.body.collect(upTo: 1024)) == "immediate a")
            #expect(immediate.headers["X-Request-Id"].count == 1)
            #expect(asyncCalls.withLock { $0 } == 0)
            let handedOver = try await httpClient.execute(HTTPClientRequest(url: "\(base)/b?wait=1"), timeout: .seconds(10))
            #expect(String(buffer: try await handedOver.body.collect(upTo: 1024)) == "async b")
            #expect(asyncCalls.withLock { $0 } == 1)
            let problem = try await httpClient.execute(HTTPClientRequest(url: "\(base)/teapot"), timeout: .seconds(10))
            #expect(problem.status.code == 418)
            #expect(problem.headers["Content-Type"] == ["application/problem+json"])
        }
    }

    @Test func connectionsStayOpenAcrossImmediateAsyncAndUnmatchedAnswers() async throws {
        var router = Router()
        router.get("/now", immediate: { _ in .text("now") }) { _ in .text("later") }
        router.get("/async") { _ in .text("async") }
        try await withLiveServer(router) { port, _ in
            // Pipelined on one connection: each answer must leave it open for the next request.
            let get = { (path: String) in "GET \(path) HTTP/1.1\r\nHost: localhost\r\n\r\n" }
            let answer = try await rawExchange(
                port: port,
                get("/now") + get("/async") + get("/missing") + get("/now")
                    + "GET /now HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
            )
            #expect(answer.components(separatedBy: "HTTP/1.1 200 OK").count - 1 == 4, "\(answer)")
            #expect(answer.components(separatedBy: "HTTP/1.1 404").count - 1 == 1, "\(answer)")
            #expect(answer.lowercased().components(separatedBy: "connection: close").count - 1 == 1, "only the last answer closes")
            #expect(answer.hasSuffix("now"))
        }
    }

    @Test func unknownPathAndMethodAreProblems() async throws {
        var router = Router()
        router.get("/only-get") { _ in .text("ok") }
        try await withLiveServer(router) { port, _ in
            let missing = try await httpClient.execute(HTTPClientRequest(url: "http://127.0.0.1:\(port)/nope"), timeout: .seconds(10))
            #expect(missing.status == .notFound)
            #expect(missing.headers["Content-Type"] == ["application/problem+json"])
            #expect(try await missing.text().contains(#""status":404"#))

            var post = HTTPClientRequest(url: "http://127.0.0.1:\(port)/only-get")
            post.method = .POST
            let wrong = try await httpClient.execute(post, timeout: .seconds(10))
            #expect(wrong.status == .methodNotAllowed)
            #expect(wrong.headers["Allow"] == ["GET, HEAD"])
            #expect(try await wrong.text().contains(#""status":405"#))
        }
    }

    /// Run in a process of its own (an exit test): peak RSS is the process's, and the suites running beside this one
    /// in the test process would add theirs. The client is a raw socket that sends one buffer again and again, so
    /// the growth measured is the server's: with AsyncHTTPClient in the same process (a fresh 1 MiB buffer a block,
    /// on its event loop's threads) the growth was 6 to 20 MiB from run to run, and once over the old 24 MiB bound,
    /// while the server's own, measured this way, is 0.1 to 0.2 MiB.
    @Test func streamedUploadKeepsMemoryBounded() async throws {
        let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
            let size = 64 << 20
            var router = Router()
            router.post("/upload", maxBodySize: size) { request in
                var total = 0
                var largest = 0
                var checksum: UInt64 = 0
                // Slower than the client in a debug build: the connection is suspended again and again.
                for try await chunk in request.body {
                    total += chunk.count
                    largest = max(largest, chunk.count)
                    checksum = chunk.reduce(checksum) { ($0 &* 31) &+ UInt64($1) }
                }
                return .text("\(total) \(largest) \(checksum)")
            }
            try await withLiveServer(router) { port, _ in
                let block = (0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 7) }
                var expected: UInt64 = 0
                for _ in 0..<(size >> 20) { expected = block.reduce(expected) { ($0 &* 31) &+ UInt64($1) } }
                func upload(blocks: Int) async throws -> [Substring] {
                    let head = "POST /upload HTTP/1.1\r\nHost: localhost\r\nContent-Length: \(blocks << 20)\r\nConnection: close\r\n\r\n"
                    let answer = try await rawUpload(port: port, head: head, block: block, count: blocks)
                    guard answer.hasPrefix("HTTP/1.1 200") else { return [] }
                    return (answer.components(separatedBy: "\r\n\r\n").last ?? "").split(separator: " ")
                }
                // A fresh process: a first upload warms what any first request allocates (the server's pools, the
                // handler's task), so that the measured growth is the streaming's own.
                _ = try await upload(blocks: 4)
                PeakMemory.reset()
                let before = PeakMemory.kibibytes()
                let parts = try await upload(blocks: size >> 20)
                let growth = PeakMemory.kibibytes() - before
                // An exit test's own expectations are not seen by its parent: it reports, the parent judges.
                let report = "growth=\(growth) answer=\(parts.joined(separator: ",")) expected=\(size),\(expected)\n"
                FileHandle.standardError.write(Data(report.utf8))
            }
        }
        let said = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
        let report = try #require(said.split(separator: "\n").last { $0.hasPrefix("growth=") }, "\(said.suffix(2000))")
        let fields = Dictionary(
            uniqueKeysWithValues: report.split(separator: " ").map { ($0.prefix { $0 != "=" }, $0.drop { $0 != "=" }.dropFirst()) })
        let answer = (fields["answer"] ?? "").split(separator: ",")
        let expected = (fields["expected"] ?? "").split(separator: ",")
        let growth = Int(fields["growth"] ?? "") ?? .max
        #expect(answer.count == 3 && answer.first == expected.first, "every byte reached the handler: \(report)")
        #expect((Int(answer.dropFirst().first ?? "") ?? .max) <= 64 << 10, "chunks of at most 64 KiB: \(report)")
        #expect(answer.last == expected.last, "in order: \(report)")
        // The server holds at most the body buffer (256 KiB) and libmicrohttpd's 32 KiB a connection; the rest of the
        // allowance is the allocator's slack.
        #expect(growth < 8 << 10, "peak RSS grew by \(growth) KiB while streaming 64 MiB")
        print("peak RSS grew by \(growth) KiB while streaming 64 MiB")
    }

    @Test func bodyOverTheRouteLimitIs413AndNeverReachesTheHandler() async throws {
        let handled = Mutex(0)
        var router = Router()
        router.post("/small", maxBodySize: 1000) { request in
            handled.withLock { $0 += 1 }
            return .text("\(try await request.body.collect(upTo: 1000).count)")
        }
        try await withLiveServer(router) { port, _ in
            var request = HTTPClientRequest(url: "http://127.0.0.1:\(port)/small")
            request.method = .POST
            request.body = .bytes(ByteBuffer(repeating: 1, count: 1001))
            let response = try await httpClient.execute(request, timeout: .seconds(10))
            #expect(response.status == .payloadTooLarge)
            #expect(try await response.text().contains(#""status":413"#))

            // Chunked bodies have no declared length: the handler runs, and the 413 comes once the limit is passed.
            let chunk = String(repeating: "x", count: 600)
            let raw = try await rawExchange(
                port: port,
                "POST /small HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n258\r\n\(chunk)\r\n258\r\n\(chunk)\r\n0\r\n\r\n"
            )
            #expect(raw.hasPrefix("HTTP/1.1 413"), "\(raw)")

            request.body = .bytes(ByteBuffer(repeating: 1, count: 1000))
            let fits = try await httpClient.execute(request, timeout: .seconds(10))
            #expect(try await fits.text() == "1000")
        }
        #expect(handled.withLock { $0 } == 2, "the 413 by Content-Length is answered before the handler runs")
    }

    @Test(arguments: [
        "POST /echo HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        "POST /echo HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: gzip\r\n\r\nhello",
        "POST /echo HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        "POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
        "GET /echo HTTP/1.1\r\n\r\n",
    ])
    func smugglingShapesAre400AndClose(_ raw: String) async throws {
        var router = Router()
        router.on(.get, "/echo") { _ in .text("get") }
        router.post("/echo") { request in .text(String(decoding: try await request.body.collect(upTo: 100), as: UTF8.self)) }
        try await withLiveServer(router) { port, _ in
            let answer = try await rawExchange(port: port, raw)
            #expect(answer.hasPrefix("HTTP/1.1 400"), "\(answer)")
            #expect(answer.lowercased().contains("connection: close"))
            #expect(!answer.contains("hello"))
        }
    }

    @Test func chunkedBodiesAreRead() async throws {
        var router = Router()
        router.post("/echo") { request in .text(String(decoding: try await request.body.collect(upTo: 100), as: UTF8.self)) }
        try await withLiveServer(router) { port, _ in
            let answer = try await rawExchange(
                port: port,
                "POST /echo HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
            )
            #expect(answer.hasPrefix("HTTP/1.1 200"))
            #expect(answer.hasSuffix("hello world"))
        }
    }

    @Test func fiftyConcurrentSlowHandlersAllRunAtOnce() async throws {
        let count = 50
        let gate = Gate(expected: count)
        var router = Router()
        router.get("/slow") { _ in
            // Every handler waits until all 50 are inside: only possible if no libmicrohttpd thread is blocked.
            await gate.arriveAndWait()
            try await Task.sleep(for: .milliseconds(200))
            return .text("done")
        }
        try await withLiveServer(router) { port, _ in
            let statuses = try await withThrowingTaskGroup(of: HTTPResponseStatus.self) { group in
                for _ in 0..<count {
                    group.addTask {
                        let response = try await httpClient.execute(HTTPClientRequest(url: "http://127.0.0.1:\(port)/slow"), timeout: .seconds(30))
                        _ = try await response.text()
                        return response.status
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(statuses.count == count)
            #expect(statuses.allSatisfy { $0 == .ok })
            #expect(gate.arrived == count)
        }
    }

    @Test func gracefulShutdownLetsTheRequestInFlightFinish() async throws {
        let entered = Gate(expected: 2)  // the handler and the test
        let release = Gate(expected: 2)
        var router = Router()
        router.get("/inflight") { _ in
            await entered.arriveAndWait()
            await release.arriveAndWait()
            return .text("finished")
        }
        // The probe answers at once: a probe that blocked like /inflight would time out before the server quiesced
        // (under load), and be taken for a refusal.
        router.get("/probe") { _ in .text("up") }
        try await withLiveServer(router) { port, group in
            async let response = httpClient.execute(HTTPClientRequest(url: "http://127.0.0.1:\(port)/inflight"), timeout: .seconds(30))
            await entered.arriveAndWait()
            await group.triggerGracefulShutdown()
            // New connections are refused once the server quiesced, while the request in flight still waits.
            var refused = false
            for _ in 0..<100 where !refused {
                refused = (try? await rawExchange(port: port, "GET /probe HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")) == nil
                if !refused { try await Task.sleep(for: .milliseconds(20)) }
            }
            #expect(refused)
            await release.arriveAndWait()
            let finished = try await response
            #expect(finished.status == .ok)
            #expect(finished.headers["Connection"].first?.lowercased() == "close")
            #expect(try await finished.text() == "finished")
        }
    }

    @Test func multipartPartsStreamThroughThePostProcessor() async throws {
        var router = Router()
        router.post("/form") { request in
            var summary: [String] = []
            var size = 0
            for try await event in try request.body.multipart(limits: MultipartLimits(maxParts: 4, maxFieldSize: 100, maxFileSize: 1 << 20)) {
                switch event {
                case .partStart("reject", _, _): throw HTTPError(.badRequest, detail: "the part named reject")
                case .partStart(let name, let filename, let type): summary.append("\(name):\(filename ?? "-"):\(type ?? "-")")
                case .data(let bytes): size += bytes.count
                case .partEnd: summary.append("end")
                }
            }
            return .text(summary.joined(separator: ",") + " \(size)")
        }
        try await withLiveServer(router) { port, _ in
            let file = String(repeating: "z", count: 100_000)
            let body =
                "--XyZ\r\nContent-Disposition: form-data; name=\"text\"\r\n\r\nhi there\r\n"
                + "--XyZ\r\nContent-Disposition: form-data; name=\"media\"; filename=\"a.png\"\r\nContent-Type: image/png\r\n\r\n\(file)\r\n"
                + "--XyZ--\r\n"
            var request = HTTPClientRequest(url: "http://127.0.0.1:\(port)/form")
            request.method = .POST
            request.headers.add(name: "Content-Type", value: "multipart/form-data; boundary=XyZ")
            request.body = .bytes(ByteBuffer(string: body))
            let response = try await httpClient.execute(request, timeout: .seconds(10))
            #expect(response.status == .ok)
            #expect(try await response.text() == "text:-:-,end,media:a.png:image/png,end \(8 + 100_000)")

            let tooMany = (0..<5).map { "--XyZ\r\nContent-Disposition: form-data; name=\"f\($0)\"\r\n\r\nv\r\n" }.joined() + "--XyZ--\r\n"
            request.body = .bytes(ByteBuffer(string: tooMany))
            let rejected = try await httpClient.execute(request, timeout: .seconds(10))
            #expect(rejected.status == .payloadTooLarge)

            // The parts before the one over the limit reach the handler first, even when one chunk holds them all:
            // here the handler refuses the first part, so that is the answer, not the part count.
            request.body = .bytes(ByteBuffer(string: "--XyZ\r\nContent-Disposition: form-data; name=\"reject\"\r\n\r\nv\r\n" + tooMany))
            let refusedFirst = try await httpClient.execute(request, timeout: .seconds(10))
            #expect(refusedFirst.status == .badRequest)
        }
    }

    @Test func streamedResponsesArriveInOrder() async throws {
        var router = Router()
        router.get("/stream") { _ in
            Response(
                headerFields: [.contentType: "text/event-stream"],
                body: .stream { writer in
                    for index in 0..<200 {
                        try await writer.write("data: \(index)\n\n")
                        if index % 50 == 0 { await Task.yield() }
                    }
                })
        }
        try await withLiveServer(router) { port, _ in
            let response = try await httpClient.execute(HTTPClientRequest(url: "http://127.0.0.1:\(port)/stream"), timeout: .seconds(10))
            #expect(response.status == .ok)
            let expected = (0..<200).map { "data: \($0)\n\n" }.joined()
            #expect(try await response.text() == expected)
        }
    }
}
