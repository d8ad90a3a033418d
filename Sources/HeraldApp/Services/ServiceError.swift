import HeraldCore

/// Why a service did not do what it was asked: each case is one kind of answer the API gives (no HTTP here).
enum ServiceError: Error, Equatable {
    /// No such thing, or an id that cannot name one (404).
    case notFound(kind: String, id: String)
    /// Every problem with the request, in field order (422); `subject` names what was sent ("post", "webhook").
    case invalid([ValidationIssue], subject: String = "post")
    /// The thing is not in a state that allows it (409).
    case conflict(String)
    /// The `Idempotency-Key` was used for a different payload (422).
    case idempotencyKeyReused
    /// The first request with this `Idempotency-Key` is still being processed (409).
    case idempotencyKeyInProgress
}
