import Foundation
import HeraldCore
import Testing

/// `Job.json` (written by hand, for the status poll) must say what the `Encodable` form says.
@Suite("A job written by JSONWriter")
struct JobJSONTests {
    static let jobs: [Job] = [
        Job(
            id: Fixtures.jobID, postID: Fixtures.postID, state: .queued, runAt: Fixtures.created,
            uploads: [Job.Upload(mediaID: Fixtures.mediaID)], createdAt: Fixtures.created),
        Job(
            id: Fixtures.jobID, postID: Fixtures.postID, state: .failed, priority: .low, attempt: 2, runAt: Fixtures.created,
            cancelRequested: true,
            uploads: [
                Job.Upload(
                    mediaID: Fixtures.mediaID, state: .failed, attempts: 3, error: "PutObject failed: \"quoted\" \\ back\nline\t\u{1}é 🚀 </a>"),
                Job.Upload(mediaID: MediaID("01a202c0-f64b-7d41-9e6f-0a1b2c3d4e62"), state: .uploaded, attempts: 1),
            ],
            error: Job.Failure(code: .uploadFailed, message: "HTTP 403 \u{7}", mediaID: Fixtures.mediaID),
            createdAt: Fixtures.created, startedAt: Fixtures.created, finishedAt: Fixtures.later),
        Job(
            id: Fixtures.jobID, postID: Fixtures.postID, state: .cancelled, runAt: Fixtures.created, uploads: [],
            error: Job.Failure(code: .cancelled, message: "Cancelled by request."), createdAt: Fixtures.created,
            finishedAt: Fixtures.later),
    ]

    @Test("equals JSONEncoder's output, read back", arguments: jobs)
    func sameAsEncodable(job: Job) throws {
        let written = try #require(try JSONSerialization.jsonObject(with: Data(job.json)) as? NSDictionary)
        let encoded = try #require(try JSONSerialization.jsonObject(with: JSONEncoder().encode(job)) as? NSDictionary)
        #expect(written == encoded, "\(String(decoding: job.json, as: UTF8.self))")
        #expect(try JSONDecoder().decode(Job.self, from: Data(job.json)) == job)
    }
}
