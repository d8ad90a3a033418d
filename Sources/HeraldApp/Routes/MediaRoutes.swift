import HTTPTypes
import HeraldCore
import MicroHTTP

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// `POST /v1/media`, `GET /v1/media/{id}`, `DELETE /v1/media/{id}`: the body streamed to the staging area, then
/// ``MediaService`` calls.
struct MediaRoutes {
    let service: MediaService
    let maxMediaBytes: Int

    private var staging: StagingArea { service.staging }

    /// Alt text longer than this is refused (Mastodon's limit).
    static let maxDescriptionLength = 1500
    /// Room for multipart boundaries and part headers around the file.
    static let multipartOverhead = 64 << 10

    func register(in router: inout Router) {
        router.api(.post, "/v1/media", scope: .publish, maxBodySize: maxMediaBytes + Self.multipartOverhead) { request, caller in
            try await upload(request, tenant: caller.tenant)
        }
        router.api(.get, "/v1/media/{id}", scope: .read) { request, caller in
            .json(try await service.find(try request.parameters.require("id"), tenant: caller.tenant))
        }
        router.api(.delete, "/v1/media/{id}", scope: .publish) { request, caller in
            try await service.delete(try request.parameters.require("id"), tenant: caller.tenant)
            return Response(status: .noContent)
        }
    }

    private func upload(_ request: Request, tenant: Tenant) async throws -> Response {
        try staging.ensureSpace(for: request.declaredLength)
        let contentType = request.fields[.contentType] ?? ""
        let id = MediaID.generate()
        let staged: StagingArea.Staged
        let type: MediaType
        var description = request.queryValue("description")
        // Checked wherever it comes from: a form's field wins over the query parameter, but a bad one is still refused.
        try Self.checkDescription(description)
        if contentType.lowercased().hasPrefix("multipart/form-data") {
            (type, staged, description) = try await uploadForm(request, id: id, description: description)
        } else {
            guard let declared = MediaType(contentType: contentType) else { throw HTTPError.unsupportedType(contentType) }
            type = declared
            staged = try await stage(request.body, id: id, type: declared)
        }
        do {
            try Self.checkDescription(description)
        } catch {
            await staging.remove(staged.relativePath)
            throw error
        }
        let media = try await service.record(id, type: type, staged: staged, description: description, tenant: tenant)
        return .json(media, status: .created, headerFields: [.location: "/v1/media/\(id)"])
    }

    /// 422 for a description over the limit, counted in Unicode code points (as JSON Schema's `maxLength` counts), or
    /// holding U+0000 (no database text holds it).
    static func checkDescription(_ description: String?) throws {
        guard let description else { return }
        if description.unicodeScalars.count > maxDescriptionLength {
            throw HTTPError(
                .unprocessableContent,
                detail: "the description is too long",
                errors: [.init(pointer: "/description", detail: "at most \(maxDescriptionLength) characters (Unicode code points)")]
            )
        }
        if description.unicodeScalars.contains("\u{0}") {
            throw HTTPError(
                .unprocessableContent, detail: "the description holds a NUL",
                errors: [.init(pointer: "/description", detail: "must not contain U+0000 (NUL)")])
        }
    }

    /// A form with one `file` part (its own `Content-Type` names the media type) and an optional `description`.
    private func uploadForm(_ request: Request, id: MediaID, description: String?) async throws -> (MediaType, StagingArea.Staged, String?) {
        // Room for one part too many, so that a third part is answered as what it is (an unexpected part, 400)
        // rather than as a body too large.
        let limits = MultipartLimits(maxParts: 3, maxFieldSize: Self.maxDescriptionLength * 4, maxFileSize: maxMediaBytes)
        let parts = PartCursor(try request.body.multipart(limits: limits))
        var file: (MediaType, StagingArea.Staged)?
        var description = description
        var formDescription = false
        do {
            while let event = try await parts.next() {
                guard case .partStart(let name, let filename, let partType) = event else { continue }
                switch name {
                case "file" where file == nil && filename != nil:
                    guard let type = partType.flatMap(MediaType.init(contentType:)) else {
                        throw HTTPError.unsupportedType(partType ?? "none")
                    }
                    file = (type, try await stage(PartBytes(parts: parts), id: id, type: type))
                case "description" where filename == nil && !formDescription:
                    formDescription = true
                    var bytes: [UInt8] = []
                    for try await chunk in PartBytes(parts: parts) { bytes += chunk }
                    description = String(decoding: bytes, as: UTF8.self)
                default:
                    throw HTTPError(.badRequest, detail: "unexpected form part '\(name)': send one file part 'file' and at most one 'description'")
                }
            }
        } catch {
            if let file { await staging.remove(file.1.relativePath) }
            throw error
        }
        guard let file else { throw HTTPError(.badRequest, detail: "the form has no file part named 'file'") }
        return (file.0, file.1, description)
    }

    private func stage<Chunks: AsyncSequence>(_ chunks: Chunks, id: MediaID, type: MediaType) async throws -> StagingArea.Staged
    where Chunks.Element == [UInt8] {
        try await staging.stage(request: chunks, mediaID: id, type: type, maxBytes: maxMediaBytes, whenEmpty: "the media body is empty")
    }
}
