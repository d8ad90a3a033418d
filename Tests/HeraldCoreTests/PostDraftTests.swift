import Foundation
import HeraldCore
import Testing

@Suite("PostDraft validation")
struct PostDraftTests {
    static let id1 = "01a202c0-f64b-7d41-9e6f-0a1b2c3d4e51"
    static let id2 = "01a202c0-f64b-7d41-9e6f-0a1b2c3d4e52"
    static let id3 = "01a202c0-f64b-7d41-9e6f-0a1b2c3d4e53"

    private func decode(_ json: String) throws -> PostDraft {
        try JSONDecoder().decode(PostDraft.self, from: Data(json.utf8))
    }

    @Test("decodes the request body, keeping scheduled_at and priority raw")
    func decodes() throws {
        let draft = try decode(
            #"{"text": "Hello", "media_ids": ["\#(Self.id1)"], "scheduled_at": "2026-11-22T12:00:00+02:00", "priority": "urgent"}"#)
        #expect(draft == PostDraft(text: "Hello", mediaIDs: [Self.id1], scheduledAt: "2026-11-22T12:00:00+02:00", priority: "urgent"))
    }

    @Test("missing text or media_ids read as empty, null optionals as absent")
    func missingFields() throws {
        #expect(try decode(#"{"media_ids": ["\#(Self.id1)"]}"#) == PostDraft(mediaIDs: [Self.id1]))
        #expect(try decode(#"{"text": "Hi", "scheduled_at": null, "priority": null}"#) == PostDraft(text: "Hi"))
        #expect(try decode("{}") == PostDraft())
    }

    @Test(
        "values of the wrong JSON type fail decoding (a 400, not a 422)",
        arguments: [#"{"text": 5}"#, #"{"media_ids": "x"}"#, #"{"media_ids": [1]}"#, #"{"priority": 1}"#, #"{"scheduled_at": 0}"#, "[]"]
    )
    func wrongTypes(json: String) {
        #expect(throws: DecodingError.self) { try decode(json) }
    }

    @Test("a valid draft becomes a typed request")
    func valid() throws {
        let draft = PostDraft(text: "Hello", mediaIDs: [Self.id1, Self.id2], scheduledAt: "2026-11-22T12:00:00+02:00", priority: "high")
        #expect(draft.validate(maxMediaPerPost: 10).isEmpty)
        let request = try draft.validated(maxMediaPerPost: 10)
        #expect(request.text == "Hello")
        #expect(request.mediaIDs.map(\.rawValue) == [Self.id1, Self.id2])
        #expect(request.scheduledAt?.rfc3339 == "2026-11-22T10:00:00.000Z")
        #expect(request.priority == .high)

        let plain = try PostDraft(text: "Hi").validated(maxMediaPerPost: 10)
        #expect(plain == PostRequest(text: "Hi", mediaIDs: [], scheduledAt: nil, priority: .normal))
        #expect(try PostDraft(mediaIDs: [Self.id1]).validated(maxMediaPerPost: 1).mediaIDs == [MediaID(Self.id1)])
    }

    @Test("every problem is reported at once, each with its pointer")
    func everyIssue() throws {
        let ids = [Self.id1, Self.id2, Self.id3, Self.id1, "a", "b", "c", Self.id2, "d", "e", "f", "g"]
        let draft = PostDraft(
            text: String(repeating: "x", count: 5001), mediaIDs: ids, scheduledAt: "2026-02-30T10:00:00Z", priority: "urgent")
        let issues = draft.validate(maxMediaPerPost: 10)
        #expect(issues.map(\.pointer) == ["/text", "/media_ids", "/media_ids/3", "/media_ids/7", "/scheduled_at", "/priority"])
        #expect(issues.allSatisfy { !$0.detail.isEmpty })
        #expect(issues[0].detail.contains("5000"))
        #expect(issues[2].detail.contains("/media_ids/0"))

        let failure = #expect(throws: ValidationFailure.self) { try draft.validated(maxMediaPerPost: 10) }
        #expect(failure?.issues == issues)
    }

    @Test(
        "a post needs text or media; whitespace is not text",
        arguments: [PostDraft(), PostDraft(text: " \n\t"), PostDraft(text: "\u{3000}")]
    )
    func empty(draft: PostDraft) {
        #expect(draft.validate(maxMediaPerPost: 10) == [ValidationIssue(pointer: "", detail: "A post needs text or at least one medium.")])
    }

    @Test("the media limit is configurable and inclusive")
    func mediaLimit() {
        let three = PostDraft(mediaIDs: [Self.id1, Self.id2, Self.id3])
        #expect(three.validate(maxMediaPerPost: 3).isEmpty)
        #expect(three.validate(maxMediaPerPost: 2).map(\.pointer) == ["/media_ids"])
    }

    @Test(
        "text length counts characters (grapheme clusters), up to 5,000 inclusive",
        arguments: [
            ("x", 5000, true),
            ("x", 5001, false),
            ("👍🏽", 5000, true),  // two scalars, one character
            ("👍🏽", 5001, false),
            ("e\u{301}", 5000, true),  // e + combining acute accent
            ("🇫🇷", 5000, true),
        ]
    )
    func textLength(unit: String, count: Int, accepted: Bool) {
        let draft = PostDraft(text: String(repeating: unit, count: count))
        #expect(draft.text.count == count)
        #expect(draft.validate(maxMediaPerPost: 10).isEmpty == accepted)
        #expect(draft.validate(maxMediaPerPost: 10).map(\.pointer) == (accepted ? [] : ["/text"]))
    }

    @Test(
        "scheduled_at accepts any RFC 3339 time and rejects others",
        arguments: [
            ("2026-11-22T10:15:30Z", true), ("2026-11-22t10:15:30.5+05:30", true), ("tomorrow", false), ("", false),
            ("2026-11-22T10:15:30", false), ("1795342530123", false),
        ])
    func scheduledAt(value: String, accepted: Bool) {
        let issues = PostDraft(text: "Hi", scheduledAt: value).validate(maxMediaPerPost: 10)
        #expect(issues.map(\.pointer) == (accepted ? [] : ["/scheduled_at"]))
    }

    @Test(
        "priority must be one of the three spellings",
        arguments: [
            ("low", true), ("normal", true), ("high", true), ("HIGH", false), ("", false), ("urgent", false),
        ])
    func priority(value: String, accepted: Bool) {
        let issues = PostDraft(text: "Hi", priority: value).validate(maxMediaPerPost: 10)
        #expect(issues.map(\.pointer) == (accepted ? [] : ["/priority"]))
    }

    @Test("a future scheduled_at schedules; none or a past one queues now")
    func initialSchedule() throws {
        let now = try #require(Timestamp(rfc3339: "2026-11-22T10:00:00.000Z"))
        let future = now.adding(milliseconds: 60_000)

        let scheduled = PostRequest(text: "Hi", mediaIDs: [], scheduledAt: future).initialSchedule(now: now)
        #expect(scheduled.step == .schedule && scheduled.step.post == .scheduled && scheduled.step.job == .scheduled && scheduled.runAt == future)

        let past = PostRequest(text: "Hi", mediaIDs: [], scheduledAt: now.adding(milliseconds: -1)).initialSchedule(now: now)
        #expect(past.step == .enqueue && past.step.post == .queued && past.step.job == .queued && past.runAt == now)

        let immediate = PostRequest(text: "Hi", mediaIDs: []).initialSchedule(now: now)
        #expect(immediate.step == .enqueue && immediate.runAt == now)

        let exactlyNow = PostRequest(text: "Hi", mediaIDs: [], scheduledAt: now).initialSchedule(now: now)
        #expect(exactlyNow.step == .enqueue && exactlyNow.runAt == now)
    }

    @Test("validation issues encode as the problem document's errors members")
    func issueJSON() throws {
        let json = try jsonObject(ValidationIssue(pointer: "/media_ids/1", detail: "Duplicate."))
        #expect(json as? [String: String] == ["pointer": "/media_ids/1", "detail": "Duplicate."])
    }
}
