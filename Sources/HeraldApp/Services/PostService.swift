import Crypto
import HeraldCore
import HeraldStorage
import Logging
import Publishing

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Creates, reads and re-publishes posts: the rules between the routes and storage.
///
/// Every check of a draft happens here, in one order: the draft's own rules (``PostDraft``), then the media the
/// database must confirm, read with one query (``PostRepository/mediaIssues(_:)``); every problem is reported at
/// once. A post is created in one transaction with its job (and, for a form, its media rows), so the only thing to
/// undo when it is not created is the files a form staged.
struct PostService: Sendable {
    let posts: any PostRepository
    let staging: StagingArea
    let maxMediaPerPost: Int
    /// Where deleting a post deletes its published objects.
    let store: any MediaStore
    let logger: Logger

    /// How many distinct media ids of an invalid draft are looked up, to report unknown or attached ones too.
    static let maxMediaLookups = 100

    // MARK: Creating

    /// A post whose media were uploaded before (`media_ids`); `traceparent` is the traced request's, for its job.
    func create(_ draft: PostDraft, idempotencyKey: String?, tenant: Tenant, traceparent: String? = nil) async throws -> PostAndJob {
        var request = try await validated(draft, tenant: tenant)
        request.traceparent = traceparent
        let idempotency = idempotencyKey.map { IdempotencyRecord(key: $0, requestHash: Self.requestHash(request, files: nil)) }
        return try Self.result(try await posts.create(request, tenant: tenant, idempotency: idempotency, now: .now()))
    }

    /// A post with the files its own request staged (a form's `media` parts). The files are removed unless the post
    /// is created with them; a replayed key answers with the first post and drops these files.
    ///
    /// The payload an `Idempotency-Key` binds includes the files' bytes, so the key is reserved once they are
    /// staged (and hashed), before any row is written.
    func create(_ form: PostForm, idempotencyKey: String?, tenant: Tenant, traceparent: String? = nil) async throws -> PostAndJob {
        var reserved: IdempotencyRecord?
        do {
            var request = try validated(form)
            request.traceparent = traceparent
            if let idempotencyKey {
                let idempotency = IdempotencyRecord(key: idempotencyKey, requestHash: Self.requestHash(request, files: form.files))
                if let early = try await posts.reserve(idempotency, tenant: tenant, now: .now()) {
                    await form.removeFiles(from: staging)
                    return try Self.result(early)
                }
                reserved = idempotency
            }
            let now = Timestamp.now()
            let media = form.files.map { file in
                NewMedia(
                    media: Media(id: file.id, contentType: file.type, size: Int64(file.staged.size), sha256: file.staged.sha256, createdAt: now),
                    stagingPath: file.staged.relativePath
                )
            }
            let creation = try await posts.create(request, tenant: tenant, newMedia: media, idempotency: reserved, now: now)
            if case .created = creation { return try Self.result(creation) }
            // Nothing of this request was kept: drop its files, and free the key for a retry.
            await form.removeFiles(from: staging)
            if let reserved { try await posts.release(reserved, tenant: tenant) }
            return try Self.result(creation)
        } catch {
            await form.removeFiles(from: staging)
            if let reserved { try? await posts.release(reserved, tenant: tenant) }
            throw error
        }
    }

    // MARK: Reading and re-publishing

    /// The post with this id.
    func find(_ id: String, tenant: Tenant) async throws -> Post {
        guard let postID = PostID(validating: id), let post = try await posts.find(id: postID, tenant: tenant) else {
            throw ServiceError.notFound(kind: "post", id: id)
        }
        return post
    }

    /// One page of posts, newest first.
    func list(_ query: ListParameters<PostState>, tenant: Tenant) async throws -> Page<Post> {
        try await posts.list(tenant: tenant, state: query.state, limit: query.limit, after: query.cursor)
    }

    /// A failed or cancelled post with a new job; `traceparent` is the traced request's, for that job.
    func republish(_ id: String, tenant: Tenant, traceparent: String? = nil) async throws -> PostAndJob {
        guard let postID = PostID(validating: id) else { throw ServiceError.notFound(kind: "post", id: id) }
        switch try await posts.republish(id: postID, tenant: tenant, now: .now(), traceparent: traceparent) {
        case .queued(let created): return created
        case .notFound: throw ServiceError.notFound(kind: "post", id: id)
        case .conflict(let reason): throw ServiceError.conflict(reason)
        }
    }

    // MARK: Deleting

    /// Deletes a post that no job is working on: its objects from the store first, then its rows (one transaction),
    /// then its staged files. A crash in between leaves a post whose objects are gone, which deleting it again
    /// finishes; never objects without rows to find them.
    func delete(_ id: String, tenant: Tenant) async throws {
        guard let postID = PostID(validating: id) else { throw ServiceError.notFound(kind: "post", id: id) }
        switch try await posts.deletionPlan(id: postID, tenant: tenant) {
        case .notFound: throw ServiceError.notFound(kind: "post", id: id)
        case .active(let job): throw ServiceError.conflict("The post's job \(job) is still queued, scheduled or running; cancel it first.")
        case .deletable(let objectKeys, _):
            // A key the store no longer holds is fine: deleting is idempotent.
            for key in objectKeys { try await store.delete(key: key) }
        }
        switch try await posts.delete(id: postID, tenant: tenant) {
        case .notFound: throw ServiceError.notFound(kind: "post", id: id)
        case .active(let job): throw ServiceError.conflict("The post's job \(job) started meanwhile; cancel it first.")
        case .deletable(_, let stagingPaths):
            for path in stagingPaths { await staging.remove(path) }
            logger.info("post deleted", metadata: ["post_id": "\(postID)", "objects": "\(stagingPaths.count)"])
        }
    }

    // MARK: Validation

    /// The checked request, or every problem of the draft and its media at once.
    private func validated(_ draft: PostDraft, tenant: Tenant) async throws -> PostRequest {
        do {
            return try draft.validated(maxMediaPerPost: maxMediaPerPost)
        } catch {
            // The repository checks the media of a valid draft as it creates the post; an invalid draft's are read
            // here, so that unknown and attached media are reported with its other problems.
            var seen = Set<String>()
            let listed = draft.mediaIDs.enumerated()
                .filter { seen.insert($0.element).inserted }
                .prefix(Self.maxMediaLookups)
                .map { (index: $0.offset, id: $0.element) }
            throw ServiceError.invalid(Self.ordered(error.issues + (try await posts.mediaIssues(Array(listed), tenant: tenant))))
        }
    }

    /// A form's draft checked, its `media_ids` pointers named after the form's `media` parts.
    private func validated(_ form: PostForm) throws -> PostRequest {
        var issues = form.draft.validate(maxMediaPerPost: maxMediaPerPost)
        if form.mediaParts > maxMediaPerPost {
            issues.append(
                ValidationIssue(pointer: "/media_ids", detail: "A post can have at most \(maxMediaPerPost) media; \(form.mediaParts) were given.")
            )
        }
        guard issues.isEmpty else {
            throw ServiceError.invalid(Self.ordered(issues.map { ValidationIssue(pointer: Self.formPointer($0.pointer), detail: $0.detail) }))
        }
        do {
            return try form.draft.validated(maxMediaPerPost: maxMediaPerPost)
        } catch {
            throw ServiceError.invalid(Self.ordered(error.issues))
        }
    }

    /// The post and job of a creation, or why there is none.
    private static func result(_ creation: PostCreation) throws -> PostAndJob {
        switch creation {
        case .created(let created), .replayed(let created): created
        case .invalid(let issues): throw ServiceError.invalid(ordered(issues))
        case .keyReusedWithOtherPayload: throw ServiceError.idempotencyKeyReused
        case .keyInProgress: throw ServiceError.idempotencyKeyInProgress
        }
    }

    /// A form has `media` parts where a JSON body has `media_ids`.
    private static func formPointer(_ pointer: String) -> String {
        pointer.hasPrefix("/media_ids") ? "/media" + pointer.dropFirst("/media_ids".count) : pointer
    }

    /// Issues sorted by field in the order of the request's fields, then by index within `media_ids`.
    static func ordered(_ issues: [ValidationIssue]) -> [ValidationIssue] {
        issues.enumerated().sorted { lhs, rhs in
            let left = fieldOrder(lhs.element.pointer)
            let right = fieldOrder(rhs.element.pointer)
            return left != right ? left < right : lhs.offset < rhs.offset
        }.map(\.element)
    }

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

    // MARK: Idempotency

    /// The SHA-256 (hex) of the request's canonical form: its method, path and sorted-key JSON of the validated payload.
    static func requestHash(_ request: PostRequest, files: [PostForm.File]?) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let json = (try? encoder.encode(CanonicalPost(request, files: files))).map(Array.init) ?? []
        var hasher = SHA256()
        hasher.update(data: Array("POST /v1/posts\n".utf8))
        hasher.update(data: json)
        return hasher.finalize().hexString
    }
}

/// What an `Idempotency-Key` binds: the validated values, so key order, whitespace, an explicit `"priority": "normal"`
/// or another spelling of the same instant do not make a different payload. A form's files count by type and bytes.
struct CanonicalPost: Encodable {
    struct File: Encodable {
        var contentType: String
        var size: Int
        var sha256: String
    }

    var text: String
    var mediaIDs: [String]?
    var media: [File]?
    var scheduledAt: String?
    var priority: String

    init(_ request: PostRequest, files: [PostForm.File]?) {
        text = request.text
        mediaIDs = files == nil ? request.mediaIDs.map(\.rawValue) : nil
        media = files?.map { File(contentType: $0.type.rawValue, size: $0.staged.size, sha256: $0.staged.sha256) }
        scheduledAt = request.scheduledAt?.rfc3339
        priority = request.priority.rawValue
    }
}

/// A post form as read: plain fields, and the files staged (ids made here) in the order of their parts.
struct PostForm: Sendable {
    struct File: Sendable {
        var id: MediaID
        var type: MediaType
        var staged: StagingArea.Staged
    }

    var fields: [String: String] = [:]
    var files: [File] = []
    /// `media` parts sent, including those beyond the limit (not staged).
    var mediaParts = 0

    /// The draft the form's fields and files make.
    var draft: PostDraft {
        PostDraft(
            text: fields["text"] ?? "",
            mediaIDs: files.map(\.id.rawValue),
            scheduledAt: fields["scheduled_at"],
            priority: fields["priority"]
        )
    }

    func removeFiles(from staging: StagingArea) async {
        for file in files { await staging.remove(file.staged.relativePath) }
    }
}
