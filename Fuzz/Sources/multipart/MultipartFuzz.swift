import FuzzSupport
import MicroHTTP

/// Fuzzes a `multipart/form-data` body (fixed or fuzzed boundary) through a live MicroHTTP server, sent whole and in chunks
/// split at fuzzed points; checks that the events nest as parts within the limits, and that the chunks change neither
/// whether the body is refused nor its parts.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    var input = FuzzInput(start, count)
    let flags = input.byte()
    var boundary = Array(fixedBoundary.utf8)
    if flags & 1 != 0 {
        // Anything a header value can hold on one line.
        boundary = input.take(1 + input.int(below: 70)).map { $0 == 0 || $0 == 0x0A || $0 == 0x0D ? UInt8(ascii: "-") : $0 }
    }
    let splitCount = input.int(below: 8)
    let splitBytes = input.take(splitCount)
    let body = Array(input.rest())
    // An empty body sent with `Content-Length: 0` is no body at all, so no multipart parser is made for it (a 415),
    // while an empty chunked body is a body: the two differ by design.
    guard !body.isEmpty else { return 0 }
    let splits = Set(splitBytes.map { Int($0) * body.count / 256 }).filter { $0 > 0 }.sorted()
    let chunks = zip([0] + splits, splits + [body.count]).map { body[$0..<$1] }

    let head = Array("POST /form HTTP/1.1\r\nHost: fuzz\r\nContent-Type: multipart/form-data; boundary=".utf8) + boundary + Array("\r\n".utf8)
    let whole = head + Array("Content-Length: \(body.count)\r\n\r\n".utf8) + body
    let split =
        head + Array("Transfer-Encoding: chunked\r\n\r\n".utf8)
        + chunks.flatMap { Array("\(String($0.count, radix: 16))\r\n".utf8) + $0 + Array("\r\n".utf8) } + Array("0\r\n\r\n".utf8)

    let once = read(whole)
    let inChunks = read(split)
    check((once.refusal == nil) == (inChunks.refusal == nil), "sent whole: \(once.verdict); in \(chunks.count) chunks: \(inChunks.verdict)")
    if once.refusal == nil {
        check(once.parts == inChunks.parts, "sent whole: \(once.parts); in \(chunks.count) chunks: \(inChunks.parts)")
    }
    return 0
}

private let fixedBoundary = "herald-fuzz-boundary"
private let limits = MultipartLimits(maxParts: 4, maxFieldSize: 64, maxFileSize: 512)

/// Sends `request` and returns what the handler made of its body.
private func read(_ request: [UInt8]) -> Reading {
    reading.value = nil
    guard case .answered(let answer) = server.exchange(request), answer.status == 204, let result = reading.value else {
        fatalError("property violated: the form route did not answer \(shown(request))")
    }
    return result
}

/// What the handler read: the parts (with their bytes joined), and the problem's status if the body was refused.
private struct Reading: Sendable {
    struct Part: Sendable, Equatable, CustomStringConvertible {
        var name: String
        var filename: String?
        var contentType: String?
        var data: [UInt8] = []

        var description: String { "\(name)|\(filename ?? "-")|\(contentType ?? "-")|\(shown(data))" }
    }

    var parts: [Part] = []
    var refusal: Int?

    var verdict: String { refusal.map { "refused (\($0))" } ?? "read" }
}

private let reading = Shared<Reading?>(nil)

private let server: LiveServer = {
    var router = Router()
    router.post("/form", maxBodySize: 1 << 16) { request in
        var result = Reading()
        var inPart = false
        do {
            for try await event in try request.body.multipart(limits: limits) {
                switch event {
                case .partStart(let name, let filename, let contentType):
                    check(!inPart, "part \(name) starts inside another")
                    check(result.parts.count < limits.maxParts, "more than \(limits.maxParts) parts")
                    inPart = true
                    result.parts.append(Reading.Part(name: name, filename: filename, contentType: contentType))
                case .data(let bytes):
                    check(inPart && !bytes.isEmpty, "data outside a part, or empty")
                    result.parts[result.parts.count - 1].data += bytes
                    let part = result.parts[result.parts.count - 1]
                    let limit = part.filename == nil ? limits.maxFieldSize : limits.maxFileSize
                    check(part.data.count <= limit, "part \(part.name) is past its limit of \(limit) bytes")
                case .partEnd:
                    check(inPart, "a part ends outside a part")
                    inPart = false
                }
            }
            check(!inPart, "the body ended inside a part")
        } catch let error as HTTPError {
            result.refusal = error.status.code
        }
        reading.value = result
        return Response(status: .noContent)
    }
    return LiveServer(router: router)
}()
