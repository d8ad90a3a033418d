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
            let draft: Draft = try await JSONRequest.decode(request, upTo: Self.maxBodyBytes, shape: Self.shape)
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
            let query = try ListParameters(unfiltered: request, of: "keys")
            return .json(try await service.list(limit: query.limit, after: query.cursor))
        }
        router.delete("/v1/keys/{id}") { request in
            let id = try request.parameters.require("id")
            guard try await service.revoke(id) != nil else { throw HTTPError.unknown("key", id) }
            return Response(status: .noContent)
        }
    }

    /// What a key request looks like.
    private static let shape = #"{"name": string, "tenant"?: string, "scope"?: "read"|"publish"|"admin"}"#

    private struct Draft: Decodable {
        var name: String
        var tenant: String?
        var scope: String?
    }
}
