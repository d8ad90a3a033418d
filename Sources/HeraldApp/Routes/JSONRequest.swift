import HTTPTypes
import HeraldCore
import MicroHTTP

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// A small JSON request body (a key's, a webhook's): `application/json` or 415, RFC 8259 syntax or 400 saying where,
/// then the expected shape or 400 showing it.
enum JSONRequest {
    /// The body of `request`, at most `maxBytes`, decoded; `shape` is what the client is told to send.
    static func decode<Draft: Decodable>(_ request: Request, upTo maxBytes: Int, shape: String) async throws -> Draft {
        guard (request.fields[.contentType] ?? "").lowercased().hasPrefix("application/json") else {
            throw HTTPError(.unsupportedMediaType, detail: "send application/json: \(shape)")
        }
        let body = try await request.body.collect(upTo: maxBytes)
        if let problem = JSONSyntax.problem(in: body) { throw HTTPError(.badRequest, detail: "the body is not JSON: \(problem)") }
        do {
            return try JSONDecoder().decode(Draft.self, from: Data(body))
        } catch {
            throw HTTPError(.badRequest, detail: "send \(shape)")
        }
    }
}
