public import HTTPTypes
import Logging

/// An async handler for one route.
public typealias Handler = @Sendable (Request) async throws -> Response

/// A synchronous handler run on libmicrohttpd's thread for a request without a body; `nil` hands the request
/// to the route's async handler.
///
/// It saves the suspend/resume and task hand-offs of an async handler (the biggest cost of a small request),
/// so it must be quick and must not block for long: a read of a few rows, not a wait.
public typealias ImmediateHandler = @Sendable (Request) throws -> Response?

/// Maps method and path to handlers; path templates name parameters as `{name}`.
///
/// ``dispatch(_:declaredLength:defaultBodyLimit:)`` is the one request pipeline: the daemon runs it for every head,
/// and ``respond(to:defaultBodyLimit:)`` runs it for tests that call the routes without a socket.
public struct Router: Sendable {
    /// A registered route.
    public struct Route: Sendable {
        public let method: HTTPRequest.Method
        /// The template as registered, e.g. `/v1/jobs/{id}`: the label for logs and metrics.
        public let template: String
        /// Body bytes accepted; `nil` means the server's default.
        public let maxBodySize: Int?
        /// What a caller needs to be let in, in the gate's terms (say an OAuth-style scope); nil when none was declared.
        public let requirement: String?
        let handler: Handler
        let immediate: ImmediateHandler?
    }

    /// What a method and path resolve to.
    public enum Match: Sendable {
        case found(Route, Parameters)
        case notFound
        case methodNotAllowed(allow: [HTTPRequest.Method])
    }

    /// A path segment's place in the tree. A node has a handful of children and routes: scanned in order, compared by
    /// bytes, where a dictionary would hash every segment (and the method's name) of every request.
    private final class Node: @unchecked Sendable {
        // @unchecked Sendable: mutated only while the router is built (copy-on-write below), read-only after. For the
        // same reason no access needs the runtime's exclusivity check (five a request, each a call into the runtime).
        @exclusivity(unchecked) var literals: [(segment: [UInt8], node: Node)] = []
        @exclusivity(unchecked) var parameter: (name: String, node: Node)?
        /// At most one a method.
        @exclusivity(unchecked) var routes: [Route] = []

        func copy() -> Node {
            let node = Node()
            node.literals = literals.map { ($0.segment, $0.node.copy()) }
            node.parameter = parameter.map { ($0.name, $0.node.copy()) }
            node.routes = routes
            return node
        }

        func literal(_ segment: UnsafeBufferPointer<UInt8>) -> Node? {
            literals.first { $0.segment.count == segment.count && $0.segment.elementsEqual(segment) }?.node
        }

        func route(_ method: HTTPRequest.Method) -> Route? {
            routes.first { $0.method == method }
        }

        /// Adds `route`, replacing the one of its method if there is one.
        func set(_ route: Route) {
            if let index = routes.firstIndex(where: { $0.method == route.method }) {
                routes[index] = route
            } else {
                routes.append(route)
            }
        }
    }

    private var root = Node()

    /// Asked about every request before it is routed (authentication) and once its route is known (authorization).
    public var gate: (any Gate)?

    /// Fields added to the answers the router gives itself (the gate's refusals, 404, 405, 413) to a path at or under a
    /// prefix: a protocol spoken there that wants them on every answer (tus's `Tus-Resumable`). Handlers set their own.
    private var answerFields: [(prefix: String, fields: HTTPFields)] = []

    public init() {}

    /// Adds `fields` to every answer the router gives itself to `prefix` or a path under it (`prefix/...`).
    public mutating func addFields(_ fields: HTTPFields, toAnswersUnder prefix: String) {
        answerFields.append((prefix, fields))
    }

    /// Adds a route; a later one with the same method and template replaces the earlier.
    public mutating func on(
        _ method: HTTPRequest.Method,
        _ template: String,
        requires requirement: String? = nil,
        maxBodySize: Int? = nil,
        immediate: ImmediateHandler? = nil,
        use handler: @escaping Handler
    ) {
        if !isKnownUniquelyReferenced(&root) { root = root.copy() }
        var text = template
        // Split as requests are (``Path``): a template's segments are the ones a request's path is matched by.
        let node = text.withUTF8 { bytes in
            let path = Path(bytes: bytes)
            var node = root
            var offset = 0
            while let (range, end) = path.segment(from: offset) {
                offset = end
                let segment = UnsafeBufferPointer(rebasing: bytes[range])
                if segment.count > 1, segment.first == UInt8(ascii: "{"), segment.last == UInt8(ascii: "}") {
                    let name = String(decoding: UnsafeBufferPointer(rebasing: segment.dropFirst().dropLast()), as: UTF8.self)
                    if let parameter = node.parameter {
                        precondition(parameter.name == name, "conflicting parameter names at \(template)")
                        node = parameter.node
                    } else {
                        let child = Node()
                        node.parameter = (name, child)
                        node = child
                    }
                } else if let child = node.literal(segment) {
                    node = child
                } else {
                    let child = Node()
                    node.literals.append((Array(segment), child))
                    node = child
                }
            }
            return node
        }
        node.set(
            Route(method: method, template: template, maxBodySize: maxBodySize, requirement: requirement, handler: handler, immediate: immediate))
    }

    public mutating func get(_ template: String, immediate: ImmediateHandler? = nil, use handler: @escaping Handler) {
        on(.get, template, immediate: immediate, use: handler)
    }
    public mutating func post(_ template: String, maxBodySize: Int? = nil, use handler: @escaping Handler) {
        on(.post, template, maxBodySize: maxBodySize, use: handler)
    }
    public mutating func delete(_ template: String, use handler: @escaping Handler) { on(.delete, template, use: handler) }

    /// Resolves a decoded path (no query). Literal segments win over parameters; `HEAD` falls back to `GET`.
    public func match(_ method: HTTPRequest.Method, path: Substring) -> Match {
        var parameters = Parameters()
        var path = path
        let found = path.withUTF8 { Self.find(Path(bytes: $0), from: 0, in: root, &parameters) }
        guard let node = found else { return .notFound }
        if let route = node.route(method) ?? (method == .head ? node.route(.get) : nil) {
            return .found(route, parameters)
        }
        var allow = node.routes.map(\.method).sorted { $0.rawValue < $1.rawValue }
        if node.route(.get) != nil, node.route(.head) == nil { allow.append(.head) }
        return .methodNotAllowed(allow: allow)
    }

    /// The node with routes for the segments of `path` from `offset`, trying the literal child before the parameter
    /// (backtracking). Walks the bytes in place: no array of segments, no string but a parameter's value.
    private static func find(_ path: Path, from offset: Int, in node: Node, _ parameters: inout Parameters) -> Node? {
        guard let (segment, end) = path.segment(from: offset) else { return node.routes.isEmpty ? nil : node }
        let bytes = UnsafeBufferPointer(rebasing: path.bytes[segment])
        if let child = node.literal(bytes), let found = find(path, from: end, in: child, &parameters) {
            return found
        }
        guard let parameter = node.parameter else { return nil }
        let previous = parameters[parameter.name]
        parameters[parameter.name] = String(decoding: bytes, as: UTF8.self)
        if let found = find(path, from: end, in: parameter.node, &parameters) { return found }
        parameters[parameter.name] = previous
        return nil
    }

    /// A path's UTF-8 bytes, split on `/` (one byte: splitting by `Character` pays for grapheme breaking).
    private struct Path {
        let bytes: UnsafeBufferPointer<UInt8>

        /// The range of the first non-empty segment at or after `offset`, and where it ends; nil when none is left.
        func segment(from offset: Int) -> (range: Range<Int>, end: Int)? {
            var start = offset
            while start < bytes.count, bytes[start] == UInt8(ascii: "/") { start += 1 }
            guard start < bytes.count else { return nil }
            var end = start + 1
            while end < bytes.count, bytes[end] != UInt8(ascii: "/") { end += 1 }
            return (start..<end, end)
        }
    }

    /// Routes and runs `request` without a socket: what the server does after reading the head.
    public func respond(to request: Request, defaultBodyLimit: Int = ServerConfiguration().maxBodySize) async -> Response {
        var request = request
        let declaredLength = request.body.declaredLength
        switch dispatch(&request, declaredLength: declaredLength, defaultBodyLimit: defaultBodyLimit) {
        case .answer(let error, _):
            return error.response
        case .route(let route, _):
            if let response = Self.runImmediately(route, request) { return response }
            return await Self.run(route, request)
        }
    }

    /// Where a request goes once its head is read, before any body byte: the gate's refusal, a 404 or 405, a 413
    /// for a declared length over the route's limit, or the route with its body limit.
    public enum Dispatch: Sendable {
        /// Answered without a handler; `route` labels it in logs and metrics.
        case answer(HTTPError, route: String)
        /// Run `route`, reading at most `bodyLimit` body bytes.
        case route(Route, bodyLimit: Int)
    }

    /// The request pipeline's decisions, in order: the gate admits (authentication comes before routing and body
    /// limits, so an unknown path or a large body learns nothing of the routes), the path and method find a route,
    /// the gate authorizes it, the declared length fits its limit. The daemon and ``respond(to:defaultBodyLimit:)``
    /// both go through it.
    public func dispatch(_ request: inout Request, declaredLength: Int?, defaultBodyLimit: Int) -> Dispatch {
        if let refusal = gate?.admit(&request) { return answer(refusal, route: "refused", path: request.path) }
        switch match(request.method, path: request.path) {
        case .found(let route, let parameters):
            request.parameters = parameters
            if let refusal = gate?.authorize(request, route: route) { return answer(refusal, route: route.template, path: request.path) }
            let limit = route.maxBodySize ?? defaultBodyLimit
            if let declaredLength, declaredLength > limit {
                return answer(HTTPError.bodyTooLarge(limit: limit), route: route.template, path: request.path)
            }
            return .route(route, bodyLimit: limit)
        case .notFound:
            return answer(HTTPError.notFound(path: request.path), route: "unmatched", path: request.path)
        case .methodNotAllowed(let allow):
            return answer(HTTPError.methodNotAllowed(allow: allow), route: "unmatched", path: request.path)
        }
    }

    /// `error` as the router's answer to `path`, with the fields added to answers there.
    private func answer(_ error: HTTPError, route: String, path: Substring) -> Dispatch {
        var error = error
        for (prefix, fields) in answerFields where path == prefix || (path.hasPrefix(prefix) && path.dropFirst(prefix.count).first == "/") {
            for field in fields { error.headerFields[field.name] = field.value }
        }
        return .answer(error, route: route)
    }

    /// Runs a route's handler, turning thrown errors into problem responses.
    static func run(_ route: Route, _ request: Request) async -> Response {
        do {
            return try await route.handler(request)
        } catch {
            return problem(for: error, route: route.template, request: request)
        }
    }

    /// Runs a route's immediate handler, if it has one and takes the request; errors become problem responses.
    static func runImmediately(_ route: Route, _ request: Request) -> Response? {
        guard let immediate = route.immediate else { return nil }
        do {
            return try immediate(request)
        } catch {
            return problem(for: error, route: route.template, request: request)
        }
    }

    /// The problem response for what a handler threw; anything but an `HTTPError` or a cancellation is logged as a 500.
    public static func problem(for error: any Error, route: String, request: Request) -> Response {
        switch error {
        case let error as HTTPError:
            return error.response
        case let error as any HTTPErrorConvertible:
            return error.httpError.response
        case is CancellationError:
            return HTTPError(.serviceUnavailable, detail: "the request was cancelled").response
        default:
            request.logger.error("unhandled error", metadata: ["error": "\(error)", "route": "\(route)"])
            return HTTPError(.internalServerError, detail: "internal error; request id \(request.id)").response
        }
    }
}

extension HTTPError {
    /// 404 for a path no route matches.
    public static func notFound(path: Substring) -> HTTPError {
        HTTPError(.notFound, detail: "no resource at \(path)")
    }

    /// 405 with the `Allow` header.
    public static func methodNotAllowed(allow: [HTTPRequest.Method]) -> HTTPError {
        HTTPError(
            .methodNotAllowed,
            detail: "allowed: \(allow.map(\.rawValue).joined(separator: ", "))",
            headerFields: [.allow: allow.map(\.rawValue).joined(separator: ", ")]
        )
    }
}
