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

@Suite("The publish state machine")
struct TransitionTests {
    @Test("only new jobs start from nothing; every other step starts from an active job", arguments: Transition.allCases)
    func startingStates(_ step: Transition) {
        switch step {
        case .enqueue, .schedule: #expect(step.jobFrom.isEmpty)
        default: #expect(!step.jobFrom.isEmpty && step.jobFrom.allSatisfy { !$0.isDone })
        }
    }

    @Test("a job and its post move together: done jobs leave a post done, active ones an active post", arguments: Transition.allCases)
    func jobAndPostAgree(_ step: Transition) {
        let postDone: Set<PostState> = [.published, .failed, .cancelled]
        #expect(step.job.isDone == postDone.contains(step.post))
        // Only a commit publishes, and it publishes exactly when every upload is uploaded.
        #expect((step.post == .published) == (step == .commit))
        if step == .commit { #expect(step.media == .uploaded && step.uploads?.to == .uploaded) }
    }

    @Test("a step that stops the job leaves its media staged for a re-publish, and nothing uploaded is called cancelled")
    func stopsKeepMediaStaged() {
        for step in [Transition.fail, .cancel, .putBack] {
            #expect(step.media == .staged)
            if let uploads = step.uploads, uploads.to == .cancelled {
                #expect(!uploads.from.isEmpty && !uploads.from.contains(.uploaded), "\(step)")
            }
        }
        #expect(Transition.cancel.jobFrom == JobState.active)
        #expect(PostState.allCases.filter(\.canRepublish) == [.failed, .cancelled])
    }
}
