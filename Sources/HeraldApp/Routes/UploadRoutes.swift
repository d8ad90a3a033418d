import HTTPTypes
import HeraldCore
import Logging
import MicroHTTP

/// `/v1/uploads`: the tus 1.0.0 resumable upload protocol (core, `creation`, `creation-with-upload`, `termination`,
/// `checksum`, `expiration`), so that tus clients upload large media in pieces and resume after a dropped connection.
///
/// Every answer, problems included, carries `Tus-Resumable`: the handlers' through ``tus(_:route:_:)``, the router's own
/// (the gate's refusals, 404, 405, 413) through ``Router/addFields(_:toAnswersUnder:)``.
struct UploadRoutes {
    let service: UploadService

    static let extensions = "creation,creation-with-upload,termination,checksum,expiration"
    static let offsetStream = "application/offset+octet-stream"

    func register(in router: inout Router) {
        let maxBytes = service.maxMediaBytes
        // What the router answers itself there (the gate's 401, 403 and 429, a 404, 405 or 413) is tus's answer too.
        router.addFields([.tusResumable: TusHeaders.version], toAnswersUnder: "/v1/uploads")
        // Needs no key (the gate lets it through): a client asks what the server speaks before it has one to send.
        router.on(.options, "/v1/uploads", requires: Scope.read.rawValue) { request in
            await Self.tus(request, route: "/v1/uploads") {
                Response(
                    status: .noContent,
                    headerFields: [
                        .tusVersion: TusHeaders.version, .tusExtension: Self.extensions, .tusMaxSize: "\(maxBytes)",
                        .tusChecksumAlgorithm: TusHeaders.ChecksumAlgorithm.allCases.map(\.rawValue).joined(separator: ","),
                    ])
            }
        }
        router.api(.post, "/v1/uploads", scope: .publish, maxBodySize: maxBytes) { request, caller in
            await Self.tus(request, route: "/v1/uploads") { try await create(request, tenant: caller.tenant) }
        }
        router.api(.head, "/v1/uploads/{id}", scope: .publish) { request, caller in
            await Self.tus(request, route: "/v1/uploads/{id}") {
                let upload = try await service.find(try request.parameters.require("id"), tenant: caller.tenant)
                var fields: HTTPFields = [.uploadOffset: "\(upload.offset)", .uploadLength: "\(upload.length)", .cacheControl: "no-store"]
                if !upload.isComplete { fields[.uploadExpires] = upload.expiresAt.httpDate }
                // tus's creation extension: the metadata as the client sent it.
                if let metadata = upload.metadata, !metadata.isEmpty { fields[.uploadMetadata] = metadata }
                return Response(status: .ok, headerFields: fields)
            }
        }
        router.api(.patch, "/v1/uploads/{id}", scope: .publish, maxBodySize: maxBytes) { request, caller in
            await Self.tus(request, route: "/v1/uploads/{id}") {
                let id = try request.parameters.require("id")
                let offset = try Self.offset(request)
                try Self.requireOffsetStream(request)
                let checksum = try Self.checksum(request)
                let advanced = try await service.append(request.body, to: id, offset: offset, checksum: checksum, tenant: caller.tenant)
                return Self.progress(advanced, status: .noContent)
            }
        }
        router.api(.delete, "/v1/uploads/{id}", scope: .publish) { request, caller in
            await Self.tus(request, route: "/v1/uploads/{id}") {
                try await service.delete(try request.parameters.require("id"), tenant: caller.tenant)
                return Response(status: .noContent)
            }
        }
    }

    /// `POST /v1/uploads`, with the first bytes when the body has them (`creation-with-upload`).
    private func create(_ request: Request, tenant: Tenant) async throws -> Response {
        let fields = request.fields
        if fields[.uploadDeferLength] != nil {
            throw HTTPError(.badRequest, detail: "Upload-Defer-Length is not supported: send Upload-Length")
        }
        guard let text = fields[.uploadLength], let length = TusHeaders.integer(text) else {
            throw HTTPError(.badRequest, detail: "send Upload-Length: the whole upload's size in bytes")
        }
        guard length > 0 else { throw HTTPError(.badRequest, detail: "Upload-Length is 0: the media would be empty") }
        guard length <= Int64(service.maxMediaBytes) else { throw HTTPError.bodyTooLarge(limit: service.maxMediaBytes) }
        let metadata: [String: String]
        do {
            metadata = try TusHeaders.metadata(fields[.uploadMetadata] ?? "")
        } catch {
            throw HTTPError(.badRequest, detail: "Upload-Metadata is malformed (\(error)): send comma-separated 'key base64value' pairs")
        }
        let filetype = metadata["filetype"] ?? ""
        guard let type = MediaType(contentType: filetype) else { throw HTTPError.unsupportedType(filetype.isEmpty ? "none" : filetype) }
        let description = metadata["description"].flatMap { $0.isEmpty ? nil : $0 }
        try MediaRoutes.checkDescription(description)
        let hasBody = (request.body.declaredLength ?? 0) > 0 || fields[.transferEncoding] != nil
        if hasBody { try Self.requireOffsetStream(request) }
        let checksum = hasBody ? try Self.checksum(request) : nil

        let creation = UploadService.Creation(length: length, type: type, description: description, metadata: fields[.uploadMetadata])
        var upload = try await service.create(creation, tenant: tenant)
        var response = Response(status: .created, headerFields: [.location: "/v1/uploads/\(upload.id)"])
        if hasBody {
            do {
                upload = try await service.append(request.body, to: upload.id.rawValue, offset: 0, checksum: checksum, tenant: tenant)
            } catch {
                // The upload exists: the client resumes it from the Location and the offset a HEAD gives.
                request.logger.info("first bytes of a new upload refused", metadata: ["upload_id": "\(upload.id)", "error": "\(error)"])
                var problem = Router.problem(for: error, route: "/v1/uploads", request: request)
                problem.headerFields[.location] = "/v1/uploads/\(upload.id)"
                return problem
            }
            response.headerFields[.uploadOffset] = "\(upload.offset)"
        }
        if !upload.isComplete { response.headerFields[.uploadExpires] = upload.expiresAt.httpDate }
        return response
    }

    /// The answer to a `PATCH`: the offset reached, and until when the rest may come.
    private static func progress(_ upload: Upload, status: HTTPResponse.Status) -> Response {
        var fields: HTTPFields = [.uploadOffset: "\(upload.offset)"]
        if !upload.isComplete { fields[.uploadExpires] = upload.expiresAt.httpDate }
        return Response(status: status, headerFields: fields)
    }

    /// Runs a tus handler: 412 for a request in another protocol version (`OPTIONS` excepted), and `Tus-Resumable` on
    /// whatever it answers.
    private static func tus(_ request: Request, route: String, _ body: () async throws -> Response) async -> Response {
        var response: Response
        if request.method != .options, request.fields[.tusResumable] != TusHeaders.version {
            response =
                HTTPError(
                    .preconditionFailed, detail: "send Tus-Resumable: \(TusHeaders.version), the tus version this server speaks",
                    headerFields: [.tusVersion: TusHeaders.version]
                ).response
        } else {
            do {
                response = try await body()
            } catch {
                response = Router.problem(for: error, route: route, request: request)
            }
        }
        response.headerFields[.tusResumable] = TusHeaders.version
        return response
    }

    private static func offset(_ request: Request) throws -> Int64 {
        guard let text = request.fields[.uploadOffset], let offset = TusHeaders.integer(text) else {
            throw HTTPError(.badRequest, detail: "send Upload-Offset: the offset the body's first byte goes at")
        }
        return offset
    }

    private static func requireOffsetStream(_ request: Request) throws {
        let type = request.fields[.contentType] ?? "none"
        guard type.lowercased() == offsetStream else {
            throw HTTPError(.unsupportedMediaType, detail: "'\(type)' is not accepted: send the bytes as \(offsetStream)")
        }
    }

    private static func checksum(_ request: Request) throws -> UploadService.Checksum? {
        guard let text = request.fields[.uploadChecksum] else { return nil }
        do {
            let (algorithm, digest) = try TusHeaders.checksum(text)
            return UploadService.Checksum(algorithm: algorithm, digest: digest)
        } catch .unsupportedAlgorithm(let name) {
            throw HTTPError(.badRequest, detail: "the checksum algorithm '\(name)' is not supported: use sha1 or sha256")
        } catch {
            throw HTTPError(.badRequest, detail: "Upload-Checksum is malformed: send 'sha1 BASE64' or 'sha256 BASE64'")
        }
    }
}

extension HTTPField.Name {
    static let tusResumable = HTTPField.Name("Tus-Resumable")!
    static let tusVersion = HTTPField.Name("Tus-Version")!
    static let tusExtension = HTTPField.Name("Tus-Extension")!
    static let tusMaxSize = HTTPField.Name("Tus-Max-Size")!
    static let tusChecksumAlgorithm = HTTPField.Name("Tus-Checksum-Algorithm")!
    static let uploadOffset = HTTPField.Name("Upload-Offset")!
    static let uploadLength = HTTPField.Name("Upload-Length")!
    static let uploadDeferLength = HTTPField.Name("Upload-Defer-Length")!
    static let uploadMetadata = HTTPField.Name("Upload-Metadata")!
    static let uploadChecksum = HTTPField.Name("Upload-Checksum")!
    static let uploadExpires = HTTPField.Name("Upload-Expires")!
}
