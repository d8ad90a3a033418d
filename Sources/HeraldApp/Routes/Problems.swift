import HTTPTypes
import HeraldCore
import HeraldStorage
import MicroHTTP
import Publishing

extension ServiceError: HTTPErrorConvertible {
    /// The one mapping from what a service refused to the API's problem documents.
    var httpError: HTTPError {
        switch self {
        case .notFound(let kind, let id):
            HTTPError.unknown(kind, id)
        case .invalid(let issues, let subject):
            HTTPError(
                .unprocessableContent,
                detail: issues.count == 1 ? "The \(subject) has 1 problem." : "The \(subject) has \(issues.count) problems.",
                errors: issues.map { HTTPError.FieldError(pointer: $0.pointer, detail: $0.detail) }
            )
        case .conflict(let reason):
            HTTPError(.conflict, detail: reason)
        case .idempotencyKeyReused:
            HTTPError(.unprocessableContent, detail: "this Idempotency-Key was already used with a different payload")
        case .idempotencyKeyInProgress:
            HTTPError(.conflict, detail: "a request with this Idempotency-Key is still being processed; retry later")
        }
    }
}

extension StorageUnavailable: HTTPErrorConvertible {
    /// 503 with `Retry-After`: the database is down or not answering, and the call may be tried again shortly.
    public var httpError: HTTPError { .databaseUnavailable("the database cannot be reached now; try again shortly") }
}

extension HTTPError {
    /// 503 for a call the database could not serve now (down, restarting, not answering): try again in a few seconds.
    static func databaseUnavailable(_ detail: String) -> HTTPError {
        HTTPError(.serviceUnavailable, detail: detail, headerFields: [.retryAfter: "5"])
    }

    /// 503 with `Retry-After` for bytes the media store could not take now (nothing of them was kept as counted): the
    /// client sends them again once the store answers.
    static func storeUnavailable(_ failure: MediaStoreError) -> HTTPError {
        HTTPError(.serviceUnavailable, detail: "the media store cannot take the bytes now: \(failure.message)", headerFields: [.retryAfter: "5"])
    }

    /// 404 for an id that names nothing (also for a malformed id).
    static func unknown(_ kind: String, _ id: String) -> HTTPError {
        HTTPError(.notFound, detail: "no \(kind) with id \(id)")
    }

    /// 415 naming the accepted types.
    static func unsupportedType(_ type: String) -> HTTPError {
        let accepted = MediaType.allCases.map(\.rawValue).joined(separator: ", ")
        return HTTPError(.unsupportedMediaType, detail: "'\(type)' is not accepted; send one of: \(accepted)")
    }
}
