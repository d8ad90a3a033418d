import Crypto
import HTTPTypes
import MicroHTTP

/// `GET /` and `GET /dashboard/{file}`: the web dashboard, files embedded in the binary (`Dashboard/`), no key needed.
///
/// The page itself holds nothing secret: it asks for a key and sends it with its own `/v1/` calls. Every answer
/// carries a strict Content-Security-Policy (scripts, styles and connections from this origin only; no inline script,
/// no framing) and an `ETag`, so a reload costs a 304.
struct DashboardRoutes {
    /// One embedded file, ready to send.
    struct File: Sendable {
        var contentType: String
        var bytes: [UInt8]
        var etag: String
    }

    static let contentSecurityPolicy =
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; connect-src 'self'; "
        + "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

    /// The files by name (`index.html`, `app.js`, …).
    static let files: [String: File] = {
        var files: [String: File] = [:]
        for (name, contents) in EmbeddedDashboard.files {
            let bytes = Array(contents.utf8)
            let digest = SHA256.hash(data: bytes).prefix(12).map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
            files[name] = File(contentType: contentType(of: name), bytes: bytes, etag: "\"\(digest)\"")
        }
        return files
    }()

    func register(in router: inout Router) {
        router.get("/") { request in try Self.answer("index.html", request) }
        router.get("/dashboard/{file}") { request in
            let name = try request.parameters.require("file")
            guard name != "index.html" else { return Response(status: .permanentRedirect, headerFields: [.location: "/"]) }
            return try Self.answer(name, request)
        }
    }

    private static let referrerPolicy = HTTPField.Name("Referrer-Policy")!

    private static func answer(_ name: String, _ request: Request) throws -> Response {
        guard let file = files[name] else { throw HTTPError(.notFound, detail: "The dashboard has no file '\(name)'.") }
        var headers: HTTPFields = [
            .contentType: file.contentType,
            .contentSecurityPolicy: contentSecurityPolicy,
            .xContentTypeOptions: "nosniff",
            referrerPolicy: "no-referrer",
            .cacheControl: "no-cache",
            .eTag: file.etag,
        ]
        if let tags = request.fields[.ifNoneMatch], tags.split(separator: ",").contains(where: { $0.trimmingSpaces == file.etag }) {
            headers[.contentType] = nil
            return Response(status: .notModified, headerFields: headers)
        }
        return Response(headerFields: headers, body: .bytes(file.bytes))
    }

    static func contentType(of name: String) -> String {
        switch name.split(separator: ".").last {
        case "html": "text/html; charset=utf-8"
        case "js": "text/javascript; charset=utf-8"
        case "css": "text/css; charset=utf-8"
        case "svg": "image/svg+xml"
        default: "text/plain; charset=utf-8"
        }
    }
}

extension Substring {
    fileprivate var trimmingSpaces: Substring {
        var text = self
        while text.first == " " || text.first == "\t" { text = text.dropFirst() }
        while text.last == " " || text.last == "\t" { text = text.dropLast() }
        return text
    }
}
