import HTTPTypes
import HeraldCore
import MicroHTTP

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// `POST /v1/posts`, `GET /v1/posts`, `GET /v1/posts/{id}`, `POST /v1/posts/{id}/publish`: HTTP to ``PostService`` calls.
struct PostRoutes {
    let service: PostService
    let maxMediaBytes: Int

    /// A JSON body larger than this is refused (413).
    static let maxJSONBytes = 1 << 20
    /// Bytes of one non-file form field: room for 5,000 characters of any script, and the form's other fields.
    static let maxFieldBytes = 64 << 10

    func register(in router: inout Router) {
        let formLimit = maxMediaBytes * service.maxMediaPerPost + MediaRoutes.multipartOverhead
        router.api(.post, "/v1/posts", scope: .publish, maxBodySize: max(formLimit, Self.maxJSONBytes)) { request, caller in
            let tenant = caller.tenant
            let key = try Self.idempotencyKey(request.fields[.idempotencyKey])
            let contentType = request.fields[.contentType] ?? ""
            let created: PostAndJob
            switch Self.mediaType(of: contentType) {
            case "application/json":
                let draft = try Self.decodeDraft(try await request.body.collect(upTo: Self.maxJSONBytes))
                created = try await service.create(draft, idempotencyKey: key, tenant: tenant, traceparent: request.traceparent)
            case "multipart/form-data":
                try service.staging.ensureSpace(for: request.declaredLength)
                created = try await service.create(
                    try await readForm(request), idempotencyKey: key, tenant: tenant, traceparent: request.traceparent)
            default:
                throw HTTPError(
                    .unsupportedMediaType,
                    detail: "'\(contentType)' is not accepted; send application/json or multipart/form-data"
                )
            }
            return Self.accepted(created)
        }
        router.api(.get, "/v1/posts", scope: .read) { request, caller in
            .json(try await service.list(try ListParameters(request, states: PostState.self), tenant: caller.tenant))
        }
        router.api(.get, "/v1/posts/{id}", scope: .read) { request, caller in
            .json(try await service.find(try request.parameters.require("id"), tenant: caller.tenant))
        }
        router.api(.delete, "/v1/posts/{id}", scope: .publish) { request, caller in
            try await service.delete(try request.parameters.require("id"), tenant: caller.tenant)
            return Response(status: .noContent)
        }
        router.api(.post, "/v1/posts/{id}/publish", scope: .publish) { request, caller in
            Self.accepted(
                try await service.republish(try request.parameters.require("id"), tenant: caller.tenant, traceparent: request.traceparent))
        }
    }

    /// 202 with the job's `Location`.
    private static func accepted(_ postAndJob: PostAndJob) -> Response {
        .json(postAndJob, status: .accepted, headerFields: [.location: "/v1/jobs/\(postAndJob.job.id)"])
    }

    // MARK: Reading the request

    /// A form: field `text`, file parts `media` (staged as `POST /v1/media` stages them), `scheduled_at`, `priority`.
    /// On any error, the files staged so far are removed.
    private func readForm(_ request: Request) async throws -> PostForm {
        let maxMediaPerPost = service.maxMediaPerPost
        let limits = MultipartLimits(maxParts: maxMediaPerPost * 2 + 3, maxFieldSize: Self.maxFieldBytes, maxFileSize: maxMediaBytes)
        let parts = PartCursor(try request.body.multipart(limits: limits))
        var form = PostForm()
        do {
            while let event = try await parts.next() {
                guard case .partStart(let name, let filename, let partType) = event else { continue }
                switch name {
                case "media":
                    form.mediaParts += 1
                    guard form.files.count < maxMediaPerPost else {
                        // Too many: read past it (nothing kept) to find the form's other problems too.
                        for try await _ in PartBytes(parts: parts) {}
                        continue
                    }
                    guard let type = partType.flatMap(MediaType.init(contentType:)) else {
                        throw HTTPError.unsupportedType(partType ?? "none")
                    }
                    let id = MediaID.generate()
                    let staged = try await service.staging.stage(
                        request: PartBytes(parts: parts), mediaID: id, type: type, maxBytes: maxMediaBytes, whenEmpty: "a media part is empty"
                    )
                    form.files.append(PostForm.File(id: id, type: type, staged: staged))
                case "text", "scheduled_at", "priority":
                    guard filename == nil, form.fields[name] == nil else {
                        throw HTTPError(.badRequest, detail: "form field '\(name)' must be given once, as a plain field")
                    }
                    var bytes: [UInt8] = []
                    for try await chunk in PartBytes(parts: parts) { bytes += chunk }
                    guard let value = String(validating: bytes, as: UTF8.self) else {
                        throw HTTPError(.badRequest, detail: "form field '\(name)' is not UTF-8 text")
                    }
                    form.fields[name] = value
                default:
                    throw HTTPError(
                        .badRequest,
                        detail: "unexpected form part '\(name)': send a field 'text', file parts 'media', optional 'scheduled_at' and 'priority'"
                    )
                }
            }
        } catch {
            await form.removeFiles(from: service.staging)
            throw error
        }
        return form
    }

    /// The `Idempotency-Key` header's key (``IdempotencyKey``); nil without the header, 400 when it holds no key.
    static func idempotencyKey(_ header: String?) throws -> String? {
        guard let header else { return nil }
        guard let key = IdempotencyKey.parse(header) else {
            throw HTTPError(.badRequest, detail: "Idempotency-Key must be 1 to \(IdempotencyKey.maxLength) visible ASCII characters")
        }
        return key
    }

    /// `type/subtype` of a `Content-Type`, lowercased, without parameters.
    static func mediaType(of contentType: String) -> String {
        let essence = contentType.prefix { $0 != ";" }
        return String(essence.drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" }.reversed()).lowercased()
    }

    /// The draft in a JSON body; 400 when the body is not RFC 8259 JSON, not an object, or has a value of the wrong type.
    static func decodeDraft(_ body: [UInt8]) throws -> PostDraft {
        // Foundation's decoder tolerates more than RFC 8259 (a trailing comma, for one): what it would accept and
        // the standard does not is refused first.
        if let problem = JSONSyntax.problem(in: body) {
            throw HTTPError(.badRequest, detail: "the body is not valid JSON: \(problem)")
        }
        do {
            return try JSONDecoder().decode(PostDraft.self, from: Data(body))
        } catch let error as DecodingError {
            let detail: String
            switch error {
            case .typeMismatch(_, let context) where context.codingPath.isEmpty:
                detail = "the body must be a JSON object"
            case .typeMismatch(_, let context), .valueNotFound(_, let context):
                detail = "\(pointer(context.codingPath)) has the wrong JSON type: \(context.debugDescription)"
            case .dataCorrupted(let context) where !context.codingPath.isEmpty:
                detail = "\(pointer(context.codingPath)): \(context.debugDescription)"
            default:
                detail = "the body is not valid JSON"
            }
            throw HTTPError(.badRequest, detail: detail)
        } catch {
            throw HTTPError(.badRequest, detail: "the body is not valid JSON")
        }
    }

    private static func pointer(_ path: [any CodingKey]) -> String {
        path.map { "/" + ($0.intValue.map(String.init) ?? $0.stringValue) }.joined()
    }
}

extension HTTPField.Name {
    /// `Idempotency-Key` (IETF draft): makes `POST /v1/posts` safe to retry.
    static let idempotencyKey = HTTPField.Name("Idempotency-Key")!
}
