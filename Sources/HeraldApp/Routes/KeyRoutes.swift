import HTTPTypes
import HeraldCore
import MicroHTTP

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// `POST /v1/keys`, `GET /v1/keys`, `DELETE /v1/keys/{id}`: admin keys manage every tenant's keys (the gate
/// asks for `admin` on every `/v1/keys` call).
struct KeyRoutes {
    let service: KeyService

    /// A key request is a few short strings.
    static let maxBodyBytes = 4 << 10

    func register(in router: inout Router) {
        router.post("/v1/keys", maxBodySize: Self.maxBodyBytes) { request in
            guard (request.head.headerFields[.contentType] ?? "").lowercased().hasPrefix("application/json") else {
                throw HTTPError(.unsupportedMediaType, detail: "send application/json: {\"name\", \"tenant\"?, \"scope\"?}")
            }
            let body = try await request.body.collect(upTo: Self.maxBodyBytes)
            let draft = try Self.decode(body)
            let created: CreatedKey
            do throws(KeyError) {
                created = try await service.create(name: draft.name, tenant: draft.tenant, scope: draft.scope)
            } catch .invalid(let issues) {
                throw HTTPError(
                    .unprocessableContent, detail: "The key request has \(issues.count) problem\(issues.count == 1 ? "" : "s").",
                    errors: issues.map { HTTPError.FieldError(pointer: $0.pointer, detail: $0.detail) })
            } catch .storage(let error) {
                throw error
            }
            return .json(created, status: .created, headerFields: [.location: "/v1/keys/\(created.key.id)", .cacheControl: "no-store"])
        }
        router.get("/v1/keys") { request in
            if request.queryValue("state") != nil { throw HTTPError(.badRequest, detail: "keys have no state to filter by") }
            let query = try ListParameters(request, states: NoState.self)
            return .json(try await service.list(limit: query.limit, after: query.cursor))
        }
        router.delete("/v1/keys/{id}") { request in
            let id = try request.parameters.require("id")
            guard try await service.revoke(id) != nil else { throw HTTPError.unknown("key", id) }
            return Response(status: .noContent)
        }
    }

    /// `{"name": string, "tenant"?: string, "scope"?: string}`; 400 for anything else.
    private struct Draft: Decodable {
        var name: String
        var tenant: String?
        var scope: String?
    }

    private static func decode(_ body: [UInt8]) throws -> Draft {
        if let problem = JSONSyntax.problem(in: body) { throw HTTPError(.badRequest, detail: "the body is not JSON: \(problem)") }
        do {
            return try JSONDecoder().decode(Draft.self, from: Data(body))
        } catch {
            throw HTTPError(.badRequest, detail: "send {\"name\": string, \"tenant\"?: string, \"scope\"?: \"read\"|\"publish\"|\"admin\"}")
        }
    }
}

/// Keys have no `?state=` (refused before ``ListParameters`` looks): the list's state type, never used.
enum NoState: String, CaseIterable, Sendable {
    case none
}
