import Crypto
import HTTPTypes
import HeraldCore
import HeraldStorage
import MicroHTTP
import Publishing

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// `POST /v1/posts`, `GET /v1/posts`, `GET /v1/posts/{id}`, `POST /v1/posts/{id}/publish`.
struct PostRoutes {
    let posts: PostRepository
    let media: MediaRepository
    let staging: StagingArea
    let runner: JobRunner
    let maxMediaBytes: Int
    let maxMediaPerPost: Int

    /// A JSON body larger than this is refused (413).
    static let maxJSONBytes = 1 << 20
    /// The longest `Idempotency-Key`, not counting one pair of surrounding quotes.
    static let maxIdempotencyKeyLength = 255
    /// Bytes of one non-file form field: room for 5,000 characters of any script, and the form's other fields.
    static let maxFieldBytes = 64 << 10
    /// How many listed media ids are looked up to report unknown or attached ones alongside other problems.
    static let maxMediaLookups = 100

    func register(in router: inout Router) {
        let formLimit = maxMediaBytes * maxMediaPerPost + MediaRoutes.multipartOverhead
        router.post("/v1/posts", maxBodySize: max(formLimit, Self.maxJSONBytes)) { request in
            try await create(request)
        }
        router.get("/v1/posts") { request in
            let query = try ListParameters(request, states: PostState.self)
            let page = try await posts.list(state: query.state, limit: query.limit, after: query.cursor)
            return try .json(page, encoder: .api)
        }
        router.get("/v1/posts/{id}") { request in
            let id = try request.parameters.require("id")
            guard Identifier.isValid(id), let post = try await posts.find(id: id) else { throw HTTPError.unknown("post", id) }
            return try .json(post, encoder: .api)
        }
        router.post("/v1/posts/{id}/publish") { request in
            let id = try request.parameters.require("id")
            guard Identifier.isValid(id) else { throw HTTPError.unknown("post", id) }
            switch try await posts.republish(id: id, now: .now()) {
            case .queued(let created):
                runner.wake()
                return try Self.accepted(created)
            case .notFound:
                throw HTTPError.unknown("post", id)
            case .conflict(let reason):
                throw HTTPError(.conflict, detail: reason)
            }
        }
    }

    // MARK: Creating a post

    private func create(_ request: Request) async throws -> Response {
        let key = try Self.idempotencyKey(request.head.headerFields[.idempotencyKey])
        let contentType = request.head.headerFields[.contentType] ?? ""
        switch Self.mediaType(of: contentType) {
        case "application/json":
            return try await createFromJSON(request, key: key)
        case "multipart/form-data":
            return try await createFromForm(request, key: key)
        default:
            throw HTTPError(
                .unsupportedMediaType,
                detail: "'\(contentType)' is not accepted; send application/json or multipart/form-data"
            )
        }
    }

    /// A `PostCreate` JSON object; its media were uploaded before, with `POST /v1/media`.
    private func createFromJSON(_ request: Request, key: String?) async throws -> Response {
        let draft = try Self.decodeDraft(try await request.body.collect(upTo: Self.maxJSONBytes))
        let postRequest: PostRequest
        do {
            postRequest = try draft.validated(maxMediaPerPost: maxMediaPerPost)
        } catch {
            // Unknown and attached media are found by the repository, which is only asked for a valid draft:
            // look them up here so that every problem is reported at once.
            throw Self.invalid(error.issues + (try await mediaIssues(draft.mediaIDs)))
        }
        let idempotency = key.map {
            PostRepository.Idempotency(key: $0, requestHash: Self.requestHash(CanonicalPost(postRequest, media: nil)))
        }
        return try await answer(try await posts.create(postRequest, idempotency: idempotency, now: .now()))
    }

    /// Every unknown or already attached id among the first ``maxMediaLookups`` distinct ones.
    private func mediaIssues(_ ids: [String]) async throws -> [ValidationIssue] {
        var issues: [ValidationIssue] = []
        var seen = Set<String>()
        for (index, id) in ids.enumerated() where seen.count < Self.maxMediaLookups && seen.insert(id).inserted {
            if Identifier.isValid(id), let found = try await media.find(id: id) {
                if found.postID != nil {
                    issues.append(ValidationIssue(pointer: "/media_ids/\(index)", detail: "Media \(id) is attached to another post."))
                }
            } else {
                issues.append(ValidationIssue(pointer: "/media_ids/\(index)", detail: "There is no media with id \(id)."))
            }
        }
        return issues
    }

    /// A form: field `text`, file parts `media` (staged as `POST /v1/media` stages them), `scheduled_at`, `priority`.
    ///
    /// The payload that an `Idempotency-Key` binds includes the files' bytes, so the key is reserved once they are
    /// staged (and hashed), before any row is written; a replay then answers at once and drops the new files.
    private func createFromForm(_ request: Request, key: String?) async throws -> Response {
        let form = try await readForm(request)
        var rowsInserted = 0
        var reserved: PostRepository.Idempotency?
        do {
            let draft = PostDraft(
                text: form.fields["text"] ?? "",
                mediaIDs: form.files.map(\.id),
                scheduledAt: form.fields["scheduled_at"],
                priority: form.fields["priority"]
            )
            var issues = draft.validate(maxMediaPerPost: maxMediaPerPost)
            if form.mediaParts > maxMediaPerPost {
                issues.append(
                    ValidationIssue(
                        pointer: "/media_ids",
                        detail: "A post can have at most \(maxMediaPerPost) media; \(form.mediaParts) were given."
                    )
                )
            }
            guard issues.isEmpty else {
                throw Self.invalid(issues.map { ValidationIssue(pointer: Self.formPointer($0.pointer), detail: $0.detail) })
            }
            let postRequest: PostRequest
            do {
                postRequest = try draft.validated(maxMediaPerPost: maxMediaPerPost)
            } catch {
                throw Self.invalid(error.issues)
            }
            if let key {
                let idempotency = PostRepository.Idempotency(
                    key: key,
                    requestHash: Self.requestHash(CanonicalPost(postRequest, media: form.files.map { CanonicalPost.File($0) }))
                )
                if let early = try await posts.reserve(idempotency, now: .now()) {
                    form.removeFiles(from: staging)
                    return try await answer(early)
                }
                reserved = idempotency
            }
            let now = Timestamp.now()
            for file in form.files {
                let item = Media(id: file.id, contentType: file.type, size: Int64(file.staged.size), sha256: file.staged.sha256, createdAt: now)
                try await media.insert(item, stagingPath: file.staged.relativePath)
                rowsInserted += 1
            }
            let creation = try await posts.create(postRequest, idempotency: reserved, now: now)
            guard case .created = creation else {
                // Nothing of this request was kept: undo its media, and free the key for a retry.
                throw UndoneCreation(creation: creation)
            }
            return try await answer(creation)
        } catch {
            for file in form.files.prefix(rowsInserted) { _ = try? await media.deleteStaged(id: file.id) }
            form.removeFiles(from: staging)
            if let reserved { try? await posts.release(reserved) }
            if let undone = error as? UndoneCreation { return try await answer(undone.creation) }
            throw error
        }
    }

    /// A creation outcome to answer after this request's own rows were removed.
    private struct UndoneCreation: Error {
        var creation: PostRepository.Creation
    }

    /// The form's fields and staged files; on any error, the files staged so far are removed.
    private func readForm(_ request: Request) async throws -> PostForm {
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
                    let id = Identifier.generate()
                    form.files.append(PostForm.File(id: id, type: type, staged: try await stage(PartBytes(parts: parts), id: id, type: type)))
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
            form.removeFiles(from: staging)
            throw error
        }
        return form
    }

    private func stage<Chunks: AsyncSequence>(_ chunks: Chunks, id: String, type: MediaType) async throws -> StagingArea.Staged
    where Chunks.Element == [UInt8] {
        try await staging.stage(request: chunks, mediaID: id, type: type, maxBytes: maxMediaBytes, whenEmpty: "a media part is empty")
    }

    /// 202 with the job's `Location` for a new or replayed post, else the matching problem.
    private func answer(_ creation: PostRepository.Creation) async throws -> Response {
        switch creation {
        case .created(let created):
            runner.wake()
            return try Self.accepted(created)
        case .replayed(let replayed):
            return try Self.accepted(replayed)
        case .invalid(let issues):
            throw Self.invalid(issues)
        case .keyReusedWithOtherPayload:
            throw HTTPError(.unprocessableContent, detail: "this Idempotency-Key was already used with a different payload")
        case .keyInProgress:
            throw HTTPError(.conflict, detail: "a request with this Idempotency-Key is still being processed; retry later")
        }
    }

    private static func accepted(_ postAndJob: PostAndJob) throws -> Response {
        try .json(postAndJob, status: .accepted, headerFields: [.location: "/v1/jobs/\(postAndJob.job.id)"], encoder: .api)
    }

    // MARK: Parsing

    /// The key with one pair of surrounding quotes removed; 400 unless 1 to 255 visible ASCII characters.
    static func idempotencyKey(_ header: String?) throws -> String? {
        guard var key = header else { return nil }
        if key.utf8.count >= 2, key.hasPrefix("\""), key.hasSuffix("\"") { key = String(key.dropFirst().dropLast()) }
        guard (1...maxIdempotencyKeyLength).contains(key.utf8.count), key.utf8.allSatisfy({ (0x21...0x7E).contains($0) }) else {
            throw HTTPError(.badRequest, detail: "Idempotency-Key must be 1 to \(maxIdempotencyKeyLength) visible ASCII characters")
        }
        return key
    }

    /// `type/subtype` of a `Content-Type`, lowercased, without parameters.
    static func mediaType(of contentType: String) -> String {
        let essence = contentType.prefix { $0 != ";" }
        return String(essence.drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" }.reversed()).lowercased()
    }

    /// The draft in a JSON body; 400 when the body is not JSON, not an object, or has a value of the wrong type.
    static func decodeDraft(_ body: [UInt8]) throws -> PostDraft {
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

    /// A form has `media` parts where a JSON body has `media_ids`.
    private static func formPointer(_ pointer: String) -> String {
        pointer.hasPrefix("/media_ids") ? "/media" + pointer.dropFirst("/media_ids".count) : pointer
    }

    /// 422 listing every issue, in the order of the request's fields.
    static func invalid(_ issues: [ValidationIssue]) -> HTTPError {
        let ordered = issues.enumerated().sorted { lhs, rhs in
            let left = fieldOrder(lhs.element.pointer)
            let right = fieldOrder(rhs.element.pointer)
            return left != right ? left < right : lhs.offset < rhs.offset
        }
        let count = ordered.count
        return HTTPError(
            .unprocessableContent,
            detail: count == 1 ? "The post has 1 problem." : "The post has \(count) problems.",
            errors: ordered.map { HTTPError.FieldError(pointer: $0.element.pointer, detail: $0.element.detail) }
        )
    }

    /// Sorts issues by field, then by index within `media_ids`.
    private static func fieldOrder(_ pointer: String) -> (Int, Int) {
        let segments = pointer.split(separator: "/")
        let field: Int =
            switch segments.first {
            case "text": 0
            case nil: 1
            case "media_ids", "media": 2
            case "scheduled_at": 3
            case "priority": 4
            default: 5
            }
        return (field, segments.count > 1 ? Int(segments[1]) ?? -1 : -1)
    }

    /// The SHA-256 (hex) of the request's canonical form: its method, path and sorted-key JSON of the validated payload.
    static func requestHash(_ payload: CanonicalPost) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let json = (try? encoder.encode(payload)).map(Array.init) ?? []
        var hasher = SHA256()
        hasher.update(data: Array("POST /v1/posts\n".utf8))
        hasher.update(data: json)
        return hasher.finalize().map { byte in
            let digits = Array("0123456789abcdef".utf8)
            return String(decoding: [digits[Int(byte >> 4)], digits[Int(byte & 0xF)]], as: UTF8.self)
        }.joined()
    }
}

extension HTTPField.Name {
    /// `Idempotency-Key` (IETF draft): makes `POST /v1/posts` safe to retry.
    static let idempotencyKey = HTTPField.Name("Idempotency-Key")!
}

/// What an `Idempotency-Key` binds: the validated values, so key order, whitespace, an explicit `"priority": "normal"`
/// or another spelling of the same instant do not make a different payload. A form's files count by type and bytes.
struct CanonicalPost: Encodable {
    struct File: Encodable {
        var contentType: String
        var size: Int
        var sha256: String

        init(_ file: PostForm.File) {
            contentType = file.type.rawValue
            size = file.staged.size
            sha256 = file.staged.sha256
        }
    }

    var text: String
    var mediaIDs: [String]?
    var media: [File]?
    var scheduledAt: String?
    var priority: String

    init(_ request: PostRequest, media: [File]?) {
        text = request.text
        mediaIDs = media == nil ? request.mediaIDs : nil
        self.media = media
        scheduledAt = request.scheduledAt?.rfc3339
        priority = request.priority.rawValue
    }
}

/// A post form as read: plain fields, and the files staged (ids made here) in the order of their parts.
struct PostForm {
    struct File {
        var id: String
        var type: MediaType
        var staged: StagingArea.Staged
    }

    var fields: [String: String] = [:]
    var files: [File] = []
    /// `media` parts sent, including those beyond the limit (not staged).
    var mediaParts = 0

    func removeFiles(from staging: StagingArea) {
        for file in files { staging.remove(file.staged.relativePath) }
    }
}

/// `?state=`, `?limit=` and `?cursor=` of a list, checked (400 for a bad value).
struct ListParameters<State: RawRepresentable & CaseIterable> where State.RawValue == String {
    var state: State?
    var limit: Int
    var cursor: Cursor?

    init(_ request: Request, states: State.Type) throws {
        if let raw = request.queryValue("state") {
            guard let state = State(rawValue: raw) else {
                let known = State.allCases.map(\.rawValue).joined(separator: ", ")
                throw HTTPError(.badRequest, detail: "state must be one of \(known), got \"\(raw)\"")
            }
            self.state = state
        }
        let rawLimit = request.queryValue("limit")
        guard let limit = ListQuery.limit(rawLimit) else {
            throw HTTPError(
                .badRequest,
                detail: "limit must be an integer from 1 to \(ListQuery.maximumLimit), got \"\(rawLimit ?? "")\""
            )
        }
        self.limit = limit
        if let raw = request.queryValue("cursor") {
            guard let cursor = Cursor(encoded: raw) else {
                throw HTTPError(.badRequest, detail: "cursor is not a next_cursor this server handed out")
            }
            self.cursor = cursor
        }
    }
}
