import HeraldCore
import Testing

@Suite("States and enums")
struct StatesTests {
    @Test("raw values are exactly the API's spellings")
    func spellings() {
        #expect(MediaState.allCases.map(\.rawValue) == ["staged", "uploading", "uploaded", "failed"])
        #expect(
            PostState.allCases.map(\.rawValue) == ["queued", "scheduled", "publishing", "published", "failed", "cancelled"])
        #expect(JobState.allCases.map(\.rawValue) == ["queued", "scheduled", "running", "succeeded", "failed", "cancelled"])
        #expect(UploadState.allCases.map(\.rawValue) == ["pending", "uploading", "uploaded", "failed", "cancelled"])
        #expect(Set(Priority.allCases.map(\.rawValue)) == ["low", "normal", "high"])
        #expect(JobErrorCode.allCases.map(\.rawValue) == ["upload_failed", "cancelled", "media_missing", "internal"])
    }

    @Test("a job is done exactly in the three terminal states", arguments: JobState.allCases)
    func isDone(state: JobState) {
        #expect(state.isDone == [JobState.succeeded, .failed, .cancelled].contains(state))
    }

    @Test("priority ranks are the schema's: high 0, normal 1, low 2, and round-trip", arguments: Priority.allCases)
    func rank(priority: Priority) {
        #expect(priority.rank == ["high": 0, "normal": 1, "low": 2][priority.rawValue])
        #expect(Priority(rank: priority.rank) == priority)
    }

    @Test("ranks outside 0...2 are not priorities", arguments: [-1, 3, 100])
    func invalidRank(rank: Int) {
        #expect(Priority(rank: rank) == nil)
    }

    @Test("ordering by rank claims high, then normal, then low")
    func rankOrder() {
        #expect(Priority.allCases.sorted { $0.rank < $1.rank } == [.high, .normal, .low])
    }
}
