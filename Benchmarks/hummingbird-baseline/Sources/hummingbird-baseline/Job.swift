import Foundation
import GRDB
import Hummingbird

// Herald's job object (`GET /v1/jobs/{id}`), read from Herald's schema with GRDB records and written the way
// Herald writes it: every key in the API's order, `null` for absent values.

enum JobState: String, Codable {
    case queued, scheduled, running, succeeded, failed, cancelled

    var isDone: Bool { self == .succeeded || self == .failed || self == .cancelled }
}

enum UploadState: String, Codable {
    case pending, uploading, uploaded, failed, cancelled
}

/// Stored as a sortable rank (0 = high), spelled as a name in the API.
enum Priority: Int, Codable {
    case high = 0
    case normal = 1
    case low = 2

    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .high: try container.encode("high")
        case .normal: try container.encode("normal")
        case .low: try container.encode("low")
        }
    }
}

/// A `jobs` row. Timestamps stay `String`: Herald stores them in the API's exact RFC 3339 form, and a `Date`
/// would round-trip the milliseconds through a `Double`.
struct JobRecord: Decodable, FetchableRecord, TableRecord {
    static let databaseTableName = "jobs"

    var id: String
    var postID: String
    var state: JobState
    var priority: Priority
    var attempt: Int
    var runAt: String
    var cancelRequested: Bool
    var errorCode: String?
    var errorMessage: String?
    var errorMediaID: String?
    var createdAt: String
    var startedAt: String?
    var finishedAt: String?
    var lockedBy: String?

    enum CodingKeys: String, CodingKey {
        case id, state, priority, attempt
        case postID = "post_id"
        case runAt = "run_at"
        case cancelRequested = "cancel_requested"
        case errorCode = "error_code"
        case errorMessage = "error_message"
        case errorMediaID = "error_media_id"
        case createdAt = "created_at"
        case startedAt = "started_at"
        case finishedAt = "finished_at"
        case lockedBy = "locked_by"
    }
}

/// One medium's upload within a job: an `uploads` row, and its API object.
struct Upload: Codable, FetchableRecord {
    var mediaID: String
    var state: UploadState
    var attempts: Int
    var error: String?
    /// The medium's size, and the bytes of it the store has taken (all once uploaded).
    var size: Int
    var bytesSent: Int

    enum CodingKeys: String, CodingKey {
        case mediaID = "media_id"
        case state, attempts, error, size
        case bytesSent = "bytes_sent"
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(mediaID, forKey: .mediaID)
        try container.encode(state, forKey: .state)
        try container.encode(attempts, forKey: .attempts)
        try container.encode(error, forKey: .error)  // `null`, not left out
        try container.encode(size, forKey: .size)
        try container.encode(bytesSent, forKey: .bytesSent)
    }
}

/// The API's job object.
struct Job: ResponseEncodable {
    var record: JobRecord
    var uploads: [Upload]

    var done: Bool { record.state.isDone }

    struct Progress: Encodable {
        var total: Int
        var uploaded: Int
        var failed: Int
        var percent: Int
        var bytesTotal: Int
        var bytesUploaded: Int

        enum CodingKeys: String, CodingKey {
            case total, uploaded, failed, percent
            case bytesTotal = "bytes_total"
            case bytesUploaded = "bytes_uploaded"
        }
    }

    /// `media_id` is left out (not `null`) when the failure is not about one medium, as in Herald.
    struct Failure: Encodable {
        var code: String
        var message: String
        var mediaID: String?

        enum CodingKeys: String, CodingKey {
            case code, message
            case mediaID = "media_id"
        }
    }

    /// As Herald counts: bytes when the media have sizes, held below 100 until every medium is uploaded.
    var progress: Progress {
        let total = uploads.count
        let uploaded = uploads.count(where: { $0.state == .uploaded })
        let failed = uploads.count(where: { $0.state == .failed })
        let bytesTotal = uploads.reduce(0) { $0 + $1.size }
        let bytesUploaded = uploads.reduce(0) { $0 + ($1.state == .uploaded ? $1.size : min($1.bytesSent, $1.size)) }
        let percent =
            switch (total, bytesTotal) {
            case (0, _): record.state == .succeeded ? 100 : 0
            case _ where uploaded == total: 100
            case (_, 0): uploaded * 100 / total
            default: min(99, bytesUploaded * 100 / bytesTotal)
            }
        return Progress(
            total: total, uploaded: uploaded, failed: failed, percent: percent, bytesTotal: bytesTotal, bytesUploaded: bytesUploaded)
    }

    var failure: Failure? {
        record.errorCode.map { Failure(code: $0, message: record.errorMessage ?? "", mediaID: record.errorMediaID) }
    }

    enum CodingKeys: String, CodingKey {
        case id
        case postID = "post_id"
        case state, done, priority, attempt
        case runAt = "run_at"
        case cancelRequested = "cancel_requested"
        case progress, uploads, error
        case createdAt = "created_at"
        case startedAt = "started_at"
        case finishedAt = "finished_at"
        case runner
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(record.id, forKey: .id)
        try container.encode(record.postID, forKey: .postID)
        try container.encode(record.state, forKey: .state)
        try container.encode(done, forKey: .done)
        try container.encode(record.priority, forKey: .priority)
        try container.encode(record.attempt, forKey: .attempt)
        try container.encode(record.runAt, forKey: .runAt)
        try container.encode(record.cancelRequested, forKey: .cancelRequested)
        try container.encode(progress, forKey: .progress)
        try container.encode(uploads, forKey: .uploads)
        try container.encode(failure, forKey: .error)
        try container.encode(record.createdAt, forKey: .createdAt)
        try container.encode(record.startedAt, forKey: .startedAt)
        try container.encode(record.finishedAt, forKey: .finishedAt)
        try container.encode(record.lockedBy, forKey: .runner)
    }
}

extension Job {
    /// The job and its uploads in the post's media order, from one snapshot: the two queries Herald runs.
    static func find(id: String, in database: some DatabaseReader) async throws -> Job? {
        try await database.read { db in
            guard let record = try JobRecord.fetchOne(db, key: id) else { return nil }
            let uploads = try Upload.fetchAll(
                db,
                sql: """
                    SELECT uploads.media_id, uploads.state, uploads.attempts, uploads.error, media.size,
                        CASE WHEN uploads.state = 'uploaded' THEN media.size ELSE uploads.bytes_sent END AS bytes_sent
                    FROM uploads JOIN media ON media.id = uploads.media_id
                    WHERE uploads.job_id = ?
                    ORDER BY media.position, media.id
                    """,
                arguments: [id]
            )
            return Job(record: record, uploads: uploads)
        }
    }
}
