import FuzzSupport
import HeraldCore
import MicroHTTP

/// Fuzzes a query string through a live MicroHTTP server into what HeraldApp's `ListParameters` reads; checks that the
/// handler sees the arguments a plain reading finds, and that `limit` and `cursor` pass only in their canonical forms.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    // What cannot stand in a request line is sent escaped; the plain reading below reads the query as sent.
    let query = Array(UnsafeRawBufferPointer(start: start, count: count)).flatMap { byte in
        byte <= 0x20 || byte == 0x7F ? percentEncodedAll([byte]) : [byte]
    }
    expected.value = plainArguments(query)
    handled.value = false
    let request = Array("GET /v1/posts?".utf8) + query + Array(" HTTP/1.1\r\nHost: fuzz\r\n\r\n".utf8)
    guard case .answered(let answer) = server.exchange(request) else {
        fatalError("property violated: no answer to \(shown(request))")
    }
    check(answer.status == 204 && handled.value, "the list route did not take \(shown(query)): \(answer.status) \(shown(answer.body))")
    return 0
}

private let expected = Shared<[(name: String, value: String?)]>([])
private let handled = Shared(false)

private let server: LiveServer = {
    var router = Router()
    router.get("/v1/posts") { request in
        let arguments = expected.value
        check(
            request.query.count == arguments.count && zip(request.query, arguments).allSatisfy { $0 == $1 },
            "the handler sees \(request.query), expected \(arguments)")
        for name in Set(arguments.map(\.name)) {
            let last = arguments.last { $0.name == name }!
            check(request.queryValue(name) == (last.value ?? ""), "queryValue(\(name)) is not the last \(name)")
        }
        // What ListParameters makes of them.
        _ = request.queryValue("state").map { (PostState(rawValue: $0), JobState(rawValue: $0)) }
        let raw = request.queryValue("limit")
        if let limit = ListQuery.limit(raw) {
            check((1...ListQuery.maximumLimit).contains(limit), "limit \(limit) is out of range")
            if let raw {
                check(
                    !raw.isEmpty && raw.utf8.allSatisfy { (0x30...0x39).contains($0) } && Int(raw) == limit,
                    "limit \(shown(raw.utf8)) passed as \(limit)")
            } else {
                check(limit == ListQuery.defaultLimit, "no limit reads as \(limit)")
            }
        }
        if let raw = request.queryValue("cursor"), let cursor = Cursor(encoded: raw) {
            check(cursor.encoded == raw, "cursor \(shown(raw.utf8)) passed but is spelled \(cursor.encoded)")
        }
        handled.value = true
        return Response(status: .noContent)
    }
    return LiveServer(router: router)
}()

/// The query read the obvious way: `&`-separated, the first `=` splitting name from value, `+` as a space and then
/// `%XX` escapes decoded, the bytes read as UTF-8 with replacements. An empty argument is kept only before another.
private func plainArguments(_ query: [UInt8]) -> [(name: String, value: String?)] {
    var pieces = query.split(separator: UInt8(ascii: "&"), omittingEmptySubsequences: false)
    if pieces.last?.isEmpty == true { pieces.removeLast() }
    return pieces.map { piece in
        guard let equals = piece.firstIndex(of: UInt8(ascii: "=")) else { return (decode(piece), nil) }
        return (decode(piece[..<equals]), decode(piece[(equals + 1)...]))
    }
}

private func decode(_ bytes: ArraySlice<UInt8>) -> String {
    String(decoding: percentDecoded(bytes.map { $0 == UInt8(ascii: "+") ? UInt8(ascii: " ") : $0 }).bytes, as: UTF8.self)
}
