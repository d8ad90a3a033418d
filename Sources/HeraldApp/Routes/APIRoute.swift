import HTTPTypes
import HeraldCore
import MicroHTTP

/// A `/v1/` handler: the request, and the caller the gate admitted.
typealias APIHandler = @Sendable (Request, Caller) async throws -> Response
/// A `/v1/` handler run on libmicrohttpd's thread (``ImmediateHandler``), with the caller.
typealias ImmediateAPIHandler = @Sendable (Request, Caller) throws -> Response?

extension Router {
    /// Registers a `/v1/` route with the scope its callers need, where the route is: the gate checks it once the route
    /// is known, before the body is read (403). A `/v1/` route registered without one needs `admin` (fails closed).
    /// The handler gets the caller as a typed value: the one place it is taken from the request is here.
    mutating func api(
        _ method: HTTPRequest.Method, _ template: String, scope: Scope, maxBodySize: Int? = nil, immediate: ImmediateAPIHandler? = nil,
        use handler: @escaping APIHandler
    ) {
        var withCaller: ImmediateHandler?
        if let immediate {
            withCaller = { request in try immediate(request, try request.caller()) }
        }
        on(method, template, requires: scope.rawValue, maxBodySize: maxBodySize, immediate: withCaller) { request in
            try await handler(request, try request.caller())
        }
    }
}
