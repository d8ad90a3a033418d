import Foundation
import HeraldCore
import Testing

/// `Job.json` (the status poll's answer) has every member, in ``Job/Member`` order, and reads back as the same job.
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
            id: Fixtures.jobID, postID: Fixtures.postID, state: .running, attempt: 1, runAt: Fixtures.created, createdAt: Fixtures.created,
            startedAt: Fixtures.later, runner: "web-2 \"east\""),
        Job(
            id: Fixtures.jobID, postID: Fixtures.postID, state: .cancelled, runAt: Fixtures.created, uploads: [],
            error: Job.Failure(code: .cancelled, message: "Cancelled by request."), createdAt: Fixtures.created,
            finishedAt: Fixtures.later),
    ]

    static let queuedJSON =
        #"{"id":"01a202c0-f64b-7d41-9e6f-0a1b2c3d4e61","post_id":"01a202c0-f64b-7d41-9e6f-0a1b2c3d4e60","state":"queued","#
        + #""done":false,"priority":"normal","attempt":0,"run_at":"2026-11-22T10:15:30.123Z","cancel_requested":false,"#
        + #""progress":{"total":1,"uploaded":0,"failed":0,"percent":0,"bytes_total":0,"bytes_uploaded":0},"#
        + #""uploads":[{"media_id":"01a202c0-f64b-7d41-9e6f-0a1b2c3d4e5f","state":"pending","attempts":0,"error":null,"#
        + #""size":0,"bytes_sent":0}],"error":null,"created_at":"2026-11-22T10:15:30.123Z","started_at":null,"finished_at":null,"#
        + #""runner":null}"#
    static let cancelledJSON =
        #"{"id":"01a202c0-f64b-7d41-9e6f-0a1b2c3d4e61","post_id":"01a202c0-f64b-7d41-9e6f-0a1b2c3d4e60","state":"cancelled","#
        + #""done":true,"priority":"normal","attempt":0,"run_at":"2026-11-22T10:15:30.123Z","cancel_requested":false,"#
        + #""progress":{"total":0,"uploaded":0,"failed":0,"percent":0,"bytes_total":0,"bytes_uploaded":0},"uploads":[],"#
        + #""error":{"code":"cancelled","message":"Cancelled by request."},"created_at":"2026-11-22T10:15:30.123Z","#
        + #""started_at":null,"finished_at":"2026-11-22T10:16:00.000Z","runner":null}"#

    @Test("exact bytes: every member in Job.Member order, nulls written, media_id left out of an error about no medium")
    func exactBytes() {
        #expect(String(decoding: Self.jobs[0].json, as: UTF8.self) == Self.queuedJSON)
        #expect(String(decoding: Self.jobs[3].json, as: UTF8.self) == Self.cancelledJSON)
        #expect(String(decoding: Self.jobs[2].json, as: UTF8.self).hasSuffix(#","runner":"web-2 \"east\""}"#))
    }

    @Test("read back as the same job", arguments: jobs)
    func readBack(job: Job) throws {
        #expect(try JSONDecoder().decode(Job.self, from: Data(job.json)) == job)
    }
}
