import CMicroHTTPD
import FuzzSupport
import HTTPTypes

@testable import MicroHTTP

/// Fuzzes a raw request path through `TargetProblem.find`, libmicrohttpd's decoding and `Router.match` on Herald's routes;
/// checks that `find` passes exactly the sound paths, that these decode and re-encode to the same segments, and that the
/// router picks what a brute-force matcher picks, with the template's parameters.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    var input = FuzzInput(start, count)
    let method = methods[input.int(below: methods.count)]
    // libmicrohttpd hands the target over as a C string: it ends at the first NUL.
    let raw = Array(input.rest().prefix { $0 != 0 })

    let verdict = raw.withCString { TargetProblem.find(in: $0) }
    let path = Array(raw.prefix { $0 != UInt8(ascii: "?") })
    let reference = PlainReading(path)
    check(
        (verdict == nil) == reference.isSound,
        "find says \(verdict.map { "\($0)" } ?? "sound"), a plain reading says \(reference.isSound ? "sound" : "not") for \(shown(raw))")
    guard verdict == nil, let decoded = reference.decoded else { return 0 }

    // What the server routes: libmicrohttpd's decoding of the path, read with `String(cString:)`.
    let unescaped = unescape(path)
    check(unescaped == decoded, "libmicrohttpd decodes \(shown(path)) to \(shown(unescaped)), expected \(shown(decoded))")
    check(String(validating: unescaped, as: UTF8.self) != nil, "a sound path decoded to invalid UTF-8: \(shown(path))")
    let segments = unescaped.split(separator: UInt8(ascii: "/")).map(Array.init)
    for segment in segments {
        check(!segment.contains { $0 < 0x20 || $0 == 0x7F }, "a sound path decoded to a control byte: \(shown(path))")
        check(segment != [0x2E] && segment != [0x2E, 0x2E], "a sound path decoded to a dot segment: \(shown(path))")
        // Every byte escaped: still sound, and decoded back to the same segment.
        let encoded = Array("/".utf8) + percentEncodedAll(segment)
        check(encoded.withCString { TargetProblem.find(in: $0) } == nil, "the re-encoded segment \(shown(encoded)) is refused")
        check(unescape(encoded) == [UInt8(ascii: "/")] + segment, "the re-encoded segment \(shown(encoded)) decodes differently")
    }

    let text = String(decoding: unescaped, as: UTF8.self)
    let expected = routes.expectedMatch(method, segments: segments.map { String(decoding: $0, as: UTF8.self) })
    switch (router.match(method, path: Substring(text)), expected) {
    case (.found(let route, let parameters), .found(let template, let values)):
        check(route.template == template, "\(method) \(text) routed to \(route.template), expected \(template)")
        check(parameters == Parameters(values), "\(method) \(text) has parameters \(parameters), expected \(values)")
    case (.methodNotAllowed(let allow), .methodNotAllowed(let expectedAllow)):
        check(allow == expectedAllow, "\(method) \(text) allows \(allow), expected \(expectedAllow)")
    case (.notFound, .notFound):
        break
    case (let actual, let expected):
        fatalError("property violated: \(method) \(text) matched \(actual), expected \(expected)")
    }
    return 0
}

private let methods: [HTTPRequest.Method] = [.get, .head, .post, .delete, .put, .options]

/// Herald's routes (HeraldApp's `register(in:)` functions), and a few that make the router backtrack.
private let routes = RouteTable([
    (.post, "/v1/webhooks"), (.get, "/v1/webhooks"), (.get, "/v1/webhooks/{id}"), (.delete, "/v1/webhooks/{id}"),
    (.get, "/v1/webhooks/{id}/deliveries"), (.get, "/v1/queue"), (.post, "/v1/queue/pause"), (.post, "/v1/queue/resume"),
    (.post, "/v1/media"), (.get, "/v1/media/{id}"), (.delete, "/v1/media/{id}"), (.get, "/healthz"), (.get, "/readyz"),
    (.get, "/metrics"), (.get, "/openapi.yaml"), (.get, "/v1/jobs"), (.get, "/v1/jobs/{id}"), (.get, "/v1/jobs/{id}/events"),
    (.get, "/v1/events"), (.post, "/v1/jobs/{id}/cancel"), (.delete, "/v1/jobs/{id}"), (.post, "/v1/keys"), (.get, "/v1/keys"),
    (.delete, "/v1/keys/{id}"), (.post, "/v1/posts"), (.get, "/v1/posts"), (.get, "/v1/posts/{id}"), (.delete, "/v1/posts/{id}"),
    (.post, "/v1/posts/{id}/publish"),
    // Not Herald's: a parameter beside literals at the root and deeper, so that a literal branch can fail late.
    (.get, "/{tenant}/only"), (.put, "/v1/{kind}/{id}/tag"), (.get, "/v1/posts/{id}/{part}"), (.head, "/v1/jobs/{id}/events"),
])

private let router: Router = {
    var router = Router()
    for (method, template) in routes.entries {
        router.on(method, template) { _ in Response(status: .noContent) }
    }
    return router
}()

/// The route table read plainly: every template tried against the segments, the most literal one chosen.
private struct RouteTable {
    enum Expected {
        case found(template: String, parameters: [String: String])
        case methodNotAllowed([HTTPRequest.Method])
        case notFound
    }

    let entries: [(HTTPRequest.Method, String)]

    init(_ entries: [(HTTPRequest.Method, String)]) {
        self.entries = entries
    }

    func expectedMatch(_ method: HTTPRequest.Method, segments: [String]) -> Expected {
        let pieces = { (template: String) in template.split(separator: "/").map(String.init) }
        let isParameter = { (piece: String) in piece.hasPrefix("{") && piece.hasSuffix("}") }
        // A shape is a template with its parameter names blanked: templates of one shape share a router node.
        let shape = { (template: String) in pieces(template).map { isParameter($0) ? "{}" : $0 } }
        let candidates = entries.filter { _, template in
            let pieces = pieces(template)
            return pieces.count == segments.count && zip(pieces, segments).allSatisfy { isParameter($0) || $0 == $1 }
        }
        // Literal beats parameter at the first segment where two shapes differ.
        func beats(_ one: [String], _ other: [String]) -> Bool {
            for (a, b) in zip(one, other) where a != b { return a != "{}" }
            return false
        }
        guard var best = candidates.first.map({ shape($0.1) }) else { return .notFound }
        for candidate in candidates where beats(shape(candidate.1), best) { best = shape(candidate.1) }
        let node = candidates.filter { shape($0.1) == best }
        let route = node.first { $0.0 == method } ?? (method == .head ? node.first { $0.0 == .get } : nil)
        guard let (_, template) = route else {
            var allow = node.map(\.0).sorted { $0.rawValue < $1.rawValue }
            if allow.contains(.get), !allow.contains(.head) { allow.append(.head) }
            return .methodNotAllowed(allow)
        }
        var parameters: [String: String] = [:]
        for (piece, segment) in zip(pieces(template), segments) where isParameter(piece) {
            parameters[String(piece.dropFirst().dropLast())] = segment
        }
        return .found(template: template, parameters: parameters)
    }
}

/// The path read the obvious way: escapes decoded, then each refusal of ``TargetProblem`` looked for in the result.
private struct PlainReading {
    /// The decoded path; nil when an escape is malformed.
    var decoded: [UInt8]?
    var isSound: Bool

    init(_ path: [UInt8]) {
        let (decoded, malformed) = percentDecoded(path)
        guard malformed == 0 else {
            (self.decoded, isSound) = (nil, false)
            return
        }
        self.decoded = decoded
        let slash = UInt8(ascii: "/")
        let encodedSlash = decoded.count { $0 == slash } > path.count { $0 == slash }
        let dotSegment = decoded.split(separator: slash).contains { $0.elementsEqual([0x2E]) || $0.elementsEqual([0x2E, 0x2E]) }
        let control = decoded.contains { $0 < 0x20 || $0 == 0x7F }
        isSound = !encodedSlash && !dotSegment && !control && String(validating: decoded, as: UTF8.self) != nil
    }
}

/// `MHD_http_unescape`, the decoding libmicrohttpd applies to the path before the access handler sees it.
private func unescape(_ bytes: [UInt8]) -> [UInt8] {
    var buffer = bytes.map { CChar(bitPattern: $0) } + [0]
    let length = buffer.withUnsafeMutableBufferPointer { MHD_http_unescape($0.baseAddress) }
    return buffer.prefix(length).map { UInt8(bitPattern: $0) }
}

extension Array where Element == UInt8 {
    /// The bytes as a NUL-terminated C string (they hold no NUL).
    fileprivate func withCString<R>(_ body: (UnsafePointer<CChar>) -> R) -> R {
        (map { CChar(bitPattern: $0) } + [0]).withUnsafeBufferPointer { body($0.baseAddress!) }
    }
}
