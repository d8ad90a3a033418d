import FuzzSupport
import HeraldCore

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Fuzzes a `POST /v1/posts` JSON body as HeraldApp reads it (`JSONSyntax`, then Foundation's `JSONDecoder`) and validates
/// the draft; checks that `validated` passes exactly the drafts `validate` finds nothing wrong with, keeps their values,
/// and that a draft survives a JSON round trip that `JSONSyntax` accepts.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    let body = Array(UnsafeRawBufferPointer(start: start, count: count))
    let problem = JSONSyntax.problem(in: body)
    if problem == nil {
        check(JSONSyntax.problem(in: Array(" \n".utf8) + body + Array("\t\r".utf8)) == nil, "padding \(shown(body)) makes it invalid")
        // One JSON text is a member value too: only the nesting limit may refuse it there.
        let wrapped = JSONSyntax.problem(in: Array(#"{"text":"#.utf8) + body + Array("}".utf8))
        check(wrapped == nil || wrapped!.hasPrefix("nested deeper"), "\(shown(body)) is refused as a member: \(wrapped!)")
    }
    guard problem == nil else { return 0 }

    let draft: PostDraft
    do {
        draft = try JSONDecoder().decode(PostDraft.self, from: Data(body))
    } catch {
        return 0  // a 400: wrong JSON types, or what Foundation refuses
    }

    let maxMedia = 4
    let maxText = 64
    let issues = draft.validate(maxMediaPerPost: maxMedia, maxTextLength: maxText)
    for issue in issues {
        let pointer = issue.pointer
        let index = pointer.hasPrefix("/media_ids/") ? Int(pointer.dropFirst("/media_ids/".count)) : nil
        check(
            ["", "/text", "/media_ids", "/scheduled_at", "/priority"].contains(pointer) || index.map { draft.mediaIDs.indices.contains($0) } == true,
            "issue pointer \(pointer) names no field of \(draft)")
    }
    let request: PostRequest
    do {
        request = try draft.validated(maxMediaPerPost: maxMedia, maxTextLength: maxText)
    } catch {
        check(!issues.isEmpty, "validated refused \(draft), validate found nothing")
        check(error.issues == issues, "validated and validate disagree about \(draft)")
        return 0
    }
    check(issues.isEmpty, "validated passed \(draft) despite \(issues)")
    check(request.text == draft.text && request.text.count <= maxText, "the request's text is not the draft's, or too long")
    check(!(request.mediaIDs.isEmpty && request.text.allSatisfy(\.isWhitespace)), "a request with neither text nor media: \(draft)")
    check(request.mediaIDs.map(\.rawValue) == draft.mediaIDs, "the request's media are not the draft's")
    check(Set(draft.mediaIDs).count == draft.mediaIDs.count && draft.mediaIDs.count <= maxMedia, "repeated or too many media: \(draft)")
    check((request.scheduledAt == nil) == (draft.scheduledAt == nil), "scheduled_at lost or invented: \(draft)")
    if let scheduledAt = request.scheduledAt {
        check(Timestamp(rfc3339: scheduledAt.rfc3339) == scheduledAt, "\(scheduledAt.rfc3339) does not read back as itself")
    }
    check(request.priority.rawValue == (draft.priority ?? "normal"), "the priority is not the draft's: \(draft)")

    // What Herald would write for this draft, it must read back, through its own check first.
    do {
        let json = [UInt8](try JSONEncoder().encode(draft))
        check(JSONSyntax.problem(in: json) == nil, "JSONSyntax refuses Foundation's encoding \(shown(json))")
        let again = try JSONDecoder().decode(PostDraft.self, from: Data(json))
        check(again == draft, "\(draft) reads back as \(again)")
    } catch {
        fatalError("property violated: \(draft) fails its JSON round trip: \(error)")
    }
    return 0
}
