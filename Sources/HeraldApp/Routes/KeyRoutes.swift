import HTTPTypes
import HeraldCore
import MicroHTTP

/// `POST /v1/keys`, `GET /v1/keys`, `DELETE /v1/keys/{id}`: admin keys manage every tenant's keys (each
/// route declares the `admin` scope).
struct KeyRoutes {
    let service: KeyService

    /// A key request is a few short strings.
    static let maxBodyBytes = 4 << 10

    func register(in router: inout Router) {
        router.api(.post, "/v1/keys", scope: .admin, maxBodySize: Self.maxBodyBytes) { request, caller in
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
        router.api(.get, "/v1/keys", scope: .admin) { request, caller in
            let query = try ListParameters(unfiltered: request, of: "keys")
            return .json(try await service.list(limit: query.limit, after: query.cursor))
        }
        router.api(.delete, "/v1/keys/{id}", scope: .admin) { request, caller in
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
