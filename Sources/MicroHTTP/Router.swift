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
public struct Router: Sendable {
    /// A registered route.
    public struct Route: Sendable {
        public let method: HTTPRequest.Method
        /// The template as registered, e.g. `/v1/jobs/{id}`: the label for logs and metrics.
        public let template: String
        /// Body bytes accepted; `nil` means the server's default.
        public let maxBodySize: Int?
        let handler: Handler
        let immediate: ImmediateHandler?
    }

    /// What a method and path resolve to.
    public enum Match: Sendable {
        case found(Route, Parameters)
        case notFound
        case methodNotAllowed(allow: [HTTPRequest.Method])
    }

    private final class Node: @unchecked Sendable {
        // @unchecked Sendable: mutated only while the router is built (copy-on-write below), read-only after.
        var literals: [Substring: Node] = [:]
        var parameter: (name: String, node: Node)?
        var routes: [HTTPRequest.Method: Route] = [:]

        func copy() -> Node {
            let node = Node()
            node.literals = literals.mapValues { $0.copy() }
            node.parameter = parameter.map { ($0.name, $0.node.copy()) }
            node.routes = routes
            return node
        }
    }

    private var root = Node()

    /// Asked about every request before it is routed (authentication) and once its route is known (authorization).
    public var gate: (any Gate)?

    public init() {}

    /// Adds a route; a later one with the same method and template replaces the earlier.
    public mutating func on(
        _ method: HTTPRequest.Method,
        _ template: String,
        maxBodySize: Int? = nil,
        immediate: ImmediateHandler? = nil,
        use handler: @escaping Handler
    ) {
        if !isKnownUniquelyReferenced(&root) { root = root.copy() }
        var node = root
        var rest = Substring(template)
        while let (segment, after) = Self.firstSegment(of: rest) {
            rest = after
            if segment.hasPrefix("{"), segment.hasSuffix("}") {
                let name = String(segment.dropFirst().dropLast())
                if let parameter = node.parameter {
                    precondition(parameter.name == name, "conflicting parameter names at \(template)")
                    node = parameter.node
                } else {
                    let child = Node()
                    node.parameter = (name, child)
                    node = child
                }
            } else if let child = node.literals[segment] {
                node = child
            } else {
                let child = Node()
                node.literals[segment] = child
                node = child
            }
        }
        node.routes[method] = Route(method: method, template: template, maxBodySize: maxBodySize, handler: handler, immediate: immediate)
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
        guard let node = Self.find(path, in: root, &parameters) else { return .notFound }
        if let route = node.routes[method] ?? (method == .head ? node.routes[.get] : nil) {
            return .found(route, parameters)
        }
        var allow = node.routes.keys.sorted { $0.rawValue < $1.rawValue }
        if node.routes[.get] != nil, node.routes[.head] == nil { allow.append(.head) }
        return .methodNotAllowed(allow: allow)
    }

    /// The node with routes for the segments of `path`, trying the literal child before the parameter (backtracking).
    /// Walks the path in place: no array of segments per request.
    private static func find(_ path: Substring, in node: Node, _ parameters: inout Parameters) -> Node? {
        guard let (segment, rest) = firstSegment(of: path) else { return node.routes.isEmpty ? nil : node }
        if let child = node.literals[segment], let found = find(rest, in: child, &parameters) {
            return found
        }
        guard let parameter = node.parameter else { return nil }
        let previous = parameters[parameter.name]
        parameters[parameter.name] = String(segment)
        if let found = find(rest, in: parameter.node, &parameters) { return found }
        parameters[parameter.name] = previous
        return nil
    }

    /// Routes and runs `request` without a socket: what the server does after reading the head.
    public func respond(to request: Request) async -> Response {
        var request = request
        if let refusal = gate?.admit(&request) { return refusal.response }
        switch match(request.head.method, path: request.path) {
        case .found(let route, let parameters):
            request.parameters = parameters
            if let refusal = gate?.authorize(request, route: route) { return refusal.response }
            if let response = Self.runImmediately(route, request) { return response }
            return await Self.run(route, request)
        case .notFound:
            return HTTPError.notFound(path: request.path).response
        case .methodNotAllowed(let allow):
            return HTTPError.methodNotAllowed(allow: allow).response
        }
    }

    /// Runs a route's handler, turning thrown errors into problem responses.
    static func run(_ route: Route, _ request: Request) async -> Response {
        do {
            return try await route.handler(request)
        } catch {
            return problem(for: error, route: route, request: request)
        }
    }

    /// Runs a route's immediate handler, if it has one and takes the request; errors become problem responses.
    static func runImmediately(_ route: Route, _ request: Request) -> Response? {
        guard let immediate = route.immediate else { return nil }
        do {
            return try immediate(request)
        } catch {
            return problem(for: error, route: route, request: request)
        }
    }

    /// The problem response for what a handler threw; anything but an `HTTPError` or a cancellation is logged as a 500.
    private static func problem(for error: any Error, route: Route, request: Request) -> Response {
        switch error {
        case let error as HTTPError:
            return error.response
        case let error as any HTTPErrorConvertible:
            return error.httpError.response
        case is CancellationError:
            return HTTPError(.serviceUnavailable, detail: "the request was cancelled").response
        default:
            request.logger.error("unhandled error", metadata: ["error": "\(error)", "route": "\(route.template)"])
            return HTTPError(.internalServerError, detail: "internal error; request id \(request.id)").response
        }
    }

    /// The first non-empty segment of `path` and what follows it; nil when none is left. Split on the UTF-8 view: `/`
    /// is one byte, and splitting by `Character` pays for grapheme breaking.
    private static func firstSegment(of path: Substring) -> (segment: Substring, rest: Substring)? {
        let utf8 = path.utf8
        guard let start = utf8.firstIndex(where: { $0 != UInt8(ascii: "/") }) else { return nil }
        let end = utf8[start...].firstIndex(of: UInt8(ascii: "/")) ?? utf8.endIndex
        return (Substring(utf8[start..<end]), Substring(utf8[end...]))
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
