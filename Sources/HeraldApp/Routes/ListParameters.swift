import HTTPTypes
import HeraldCore
import MicroHTTP

/// `?state=`, `?limit=` and `?cursor=` of a list, checked (400 for a bad value).
struct ListParameters<State: RawRepresentable & CaseIterable & Sendable>: Sendable where State.RawValue == String {
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

extension ListParameters where State == NoState {
    /// A list without a `state` filter (keys, webhooks, deliveries): `?state=` is a 400 naming what is listed.
    init(unfiltered request: Request, of things: String) throws {
        if request.queryValue("state") != nil { throw HTTPError(.badRequest, detail: "\(things) have no state to filter by") }
        try self.init(request, states: NoState.self)
    }
}

/// The state type of a list with no `state` filter (refused before ``ListParameters`` looks): never used.
enum NoState: String, CaseIterable, Sendable {
    case none
}
