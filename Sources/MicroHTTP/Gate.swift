/// Decides who may make a request before it reaches a handler: authentication, authorization, rate limits.
///
/// The server asks it right after a request's head is read and checked, before routing and body limits, so a
/// refused request costs no routing, no body and no handler; ``Router/respond(to:)`` asks it the same way.
/// A class: the router holds one, and every request reads it (a reference to retain, not a value to copy).
public protocol Gate: AnyObject, Sendable {
    /// Before routing: refuse (say 401 or 429), or let the request through, noting who sent it in
    /// ``Request/principal``.
    func admit(_ request: inout Request) -> HTTPError?

    /// Once the route is known, before the body is read: refuse (say 403), or let it through.
    func authorize(_ request: Request, route: Router.Route) -> HTTPError?
}
