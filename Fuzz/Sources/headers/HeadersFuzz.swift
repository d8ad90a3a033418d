import FuzzSupport
import HTTPTypes
import MicroHTTP

// HeraldApp's own header parsing (`PostRoutes.idempotencyKey` for Idempotency-Key, `AccessGate` for Authorization) is out
// of reach: the fields arrive at the handler, but the code that reads them is in HeraldApp.

/// Fuzzes header fields through a live MicroHTTP server, framed as the input picks; checks that framing Herald refuses
/// never reaches a handler, that what does has one Host, its body, values without CR/LF/NUL, the client's request id when
/// sane and a client address that is the peer or a forwarded hop, and that no request earns a 5xx.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    var input = FuzzInput(start, count)
    let framing = Framing.allCases[input.int(below: Framing.allCases.count)]
    let flags = input.byte()
    let length = Int(flags >> 3)
    // The fuzzed lines: one field each, CR dropped (every line ends in CRLF here), blank lines and framing fields left
    // out (the framing is the target's, so that the request always ends where the target means it to).
    let lines = input.rest().split(separator: UInt8(ascii: "\n")).map { $0.filter { $0 != UInt8(ascii: "\r") } }.filter { line in
        let name = String(decoding: line.prefix { $0 != UInt8(ascii: ":") }.trimmingBlanks(), as: UTF8.self).lowercased()
        return !line.allSatisfy { $0 == 0x20 || $0 == 0x09 } && name != "content-length" && name != "transfer-encoding"
    }
    // Known finding: libmicrohttpd 0.9.75 ends the head at a line that starts with NUL or ':', and reads what follows as
    // another request.
    if skippingKnownFindings, lines.contains(where: { $0.first == 0 || $0.first == UInt8(ascii: ":") }) { return 0 }
    let body = framing.hasBody ? [UInt8](repeating: UInt8(ascii: "b"), count: length) : []
    var head = Array("POST /echo HTTP/1.1\r\n".utf8)
    if flags & 1 != 0 { head += Array("Host: fuzz\r\n".utf8) }
    for line in lines { head += line + Array("\r\n".utf8) }
    head += Array(framing.fields(length: length).utf8) + Array("\r\n".utf8)
    let request = head + framing.encode(body)

    // The last X-Request-Id as sent, as libmicrohttpd 0.9.75 reads it: leading blanks dropped, trailing ones kept.
    // Not known when a line is folded.
    let folded = lines.contains { $0.first == 0x20 || $0.first == 0x09 }
    let sentID =
        folded
        ? nil
        : lines.last { $0.starts(withCaseless: "x-request-id:") }.map { line in
            String(decoding: line.dropFirst("x-request-id:".utf8.count).drop { $0 == 0x20 || $0 == 0x09 }, as: UTF8.self)
        }
    expectation.value = Expectation(framing: framing, body: body, requestID: sentID)
    handled.value = false
    switch server.exchange(request) {
    case .answered(let answer):
        check(answer.status < 500, "\(answer.status) for \(shown(request)): \(shown(answer.body))")
        if framing.isRefused {
            check(answer.status == 400 && !handled.value, "framing \(framing) was not refused: \(answer.status)")
        }
    case .closed:
        // libmicrohttpd closes without a word on some heads it cannot parse; nothing reached Herald then.
        check(!handled.value, "the handler ran, but the connection closed without an answer: \(shown(request))")
    case .malformed(let bytes):
        fatalError("property violated: a malformed response \(shown(bytes)) to \(shown(request))")
    case .timedOut:
        fatalError("property violated: no response within \(LiveServer.timeout) s to \(shown(request))")
    }
    return 0
}

/// How the request says where its body ends; the last four are refused before routing (400).
private enum Framing: CaseIterable {
    case none
    case contentLength
    case chunked
    case both
    case twoLengths
    case otherCoding
    case chunkedTwice

    var hasBody: Bool { self == .contentLength || self == .chunked }
    var isRefused: Bool { !(self == .none || hasBody) }

    func fields(length: Int) -> String {
        switch self {
        case .none: ""
        case .contentLength: "Content-Length: \(length)\r\n"
        case .chunked: "Transfer-Encoding: chunked\r\n"
        case .both: "Content-Length: 0\r\nTransfer-Encoding: chunked\r\n"
        case .twoLengths: "Content-Length: 0\r\nContent-Length: 1\r\n"
        case .otherCoding: "Transfer-Encoding: gzip\r\n"
        case .chunkedTwice: "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n"
        }
    }

    /// The body as this framing sends it.
    func encode(_ body: [UInt8]) -> [UInt8] {
        switch self {
        case .none, .contentLength: body
        case .chunked, .both, .chunkedTwice:
            (body.isEmpty ? [] : Array("\(String(body.count, radix: 16))\r\n".utf8) + body + Array("\r\n".utf8)) + Array("0\r\n\r\n".utf8)
        case .twoLengths: []
        case .otherCoding: Array("0\r\n\r\n".utf8)
        }
    }
}

private struct Expectation: Sendable {
    var framing = Framing.none
    var body: [UInt8] = []
    var requestID: String?
}

private let expectation = Shared(Expectation())
private let handled = Shared(false)

/// 127.0.0.1, the peer, is a trusted proxy here, so `X-Forwarded-For` is read.
private let server: LiveServer = {
    var router = Router()
    router.post("/echo") { request in
        let expected = expectation.value
        check(!expected.framing.isRefused, "framing \(expected.framing) reached the handler")
        let fields = request.head.headerFields
        check(fields.count { $0.name == .host } == 1, "the handler got \(fields.count { $0.name == .host }) Host fields")
        check(
            !(fields.contains { $0.name == .contentLength } && fields.contains { $0.name == .transferEncoding }), "both framings reached the handler")
        for field in fields {
            check(
                !field.value.utf8.contains { $0 == 0 || $0 == 0x0A || $0 == 0x0D },
                "field \(field.name) holds CR, LF or NUL: \(shown(field.value.utf8))")
        }

        // The client's id when it is sane, else a generated one (or, with folded lines, whichever of the two).
        let generated = request.id.utf8.count == 32 && request.id.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
        if let sent = expected.requestID, RequestID.accept(sent) != nil {
            check(request.id == sent, "request id \(request.id), but the client sent the sane \(sent)")
        } else {
            check(
                generated || RequestID.accept(request.id) != nil,
                "request id \(shown(request.id.utf8)) is neither the client's sane one nor generated")
        }

        let hops = fields.filter { $0.name == .forwardedFor }.flatMap { $0.value.split(separator: ",") }
            .map { String($0.filter { $0 != " " && $0 != "\t" }) }
        let client = request.remoteAddress ?? "none"
        check(
            client == "127.0.0.1" || (hops.contains(client) && AddressRange.isAddress(client)),
            "client \(client) is neither the peer nor a hop of \(hops)")

        let body = try await request.body.collect(upTo: 1 << 10)
        check(body == expected.body, "the handler read \(body.count) body bytes, \(expected.body.count) were sent")
        handled.value = true
        return Response(status: .noContent)
    }
    var configuration = ServerConfiguration()
    configuration.trustedProxies = TrustedProxies(["127.0.0.0/8", "10.0.0.0/8", "::1"].compactMap(AddressRange.init))
    return LiveServer(router: router, configuration: configuration)
}()

extension HTTPField.Name {
    fileprivate static let host = HTTPField.Name("Host")!
    fileprivate static let forwardedFor = HTTPField.Name("X-Forwarded-For")!
}

extension Collection<UInt8> {
    fileprivate func trimmingBlanks() -> [UInt8] {
        Array(drop { $0 == 0x20 || $0 == 0x09 }.reversed().drop { $0 == 0x20 || $0 == 0x09 }.reversed())
    }

    /// Whether the line starts with `prefix`, ASCII letters in either case.
    fileprivate func starts(withCaseless prefix: String) -> Bool {
        let lower = { (byte: UInt8) in (0x41...0x5A).contains(byte) ? byte | 0x20 : byte }
        return count >= prefix.utf8.count && zip(self, prefix.utf8).allSatisfy { lower($0) == lower($1) }
    }
}
