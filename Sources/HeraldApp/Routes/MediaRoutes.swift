import HTTPTypes
import HeraldCore
import HeraldStorage
import MicroHTTP

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// `POST /v1/media`, `GET /v1/media/{id}`, `DELETE /v1/media/{id}`.
struct MediaRoutes {
    let repository: any MediaRepository
    let staging: StagingArea
    let maxMediaBytes: Int

    /// Alt text longer than this is refused (Mastodon's limit).
    static let maxDescriptionLength = 1500
    /// Room for multipart boundaries and part headers around the file.
    static let multipartOverhead = 64 << 10

    func register(in router: inout Router) {
        router.post("/v1/media", maxBodySize: maxMediaBytes + Self.multipartOverhead) { request in
            try await upload(request)
        }
        router.get("/v1/media/{id}") { request in
            let id = try request.parameters.require("id")
            guard let mediaID = MediaID(validating: id), let media = try await repository.find(id: mediaID, tenant: try request.caller().tenant)
            else {
                throw HTTPError.unknown("media", id)
            }
            return .json(media)
        }
        router.delete("/v1/media/{id}") { request in
            let id = try request.parameters.require("id")
            guard let mediaID = MediaID(validating: id) else { throw HTTPError.unknown("media", id) }
            switch try await repository.deleteStaged(id: mediaID, tenant: try request.caller().tenant) {
            case .deleted(let stagingPath):
                staging.remove(stagingPath)
                return Response(status: .noContent)
            case .notFound:
                throw HTTPError.unknown("media", id)
            case .attached(let postID):
                // The post is the caller's own: attached media belong to the tenant that attached them.
                throw HTTPError(.conflict, detail: "media \(id) is attached to post \(postID)")
            }
        }
    }

    private func upload(_ request: Request) async throws -> Response {
        let tenant = try request.caller().tenant
        try staging.ensureSpace(for: request.declaredLength)
        let contentType = request.head.headerFields[.contentType] ?? ""
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
            let media = Media(
                id: id,
                contentType: type,
                size: Int64(staged.size),
                sha256: staged.sha256,
                description: description,
                createdAt: Timestamp.now()
            )
            try await repository.insert(media, tenant: tenant, stagingPath: staged.relativePath)
            return .json(media, status: .created, headerFields: [.location: "/v1/media/\(id)"])
        } catch {
            staging.remove(staged.relativePath)
            throw error
        }
    }

    /// 422 for a description over the limit, counted in Unicode code points (as JSON Schema's `maxLength` counts).
    private static func checkDescription(_ description: String?) throws {
        guard let description, description.unicodeScalars.count > maxDescriptionLength else { return }
        throw HTTPError(
            .unprocessableContent,
            detail: "the description is too long",
            errors: [.init(pointer: "/description", detail: "at most \(maxDescriptionLength) characters (Unicode code points)")]
        )
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
            if let file { staging.remove(file.1.relativePath) }
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
