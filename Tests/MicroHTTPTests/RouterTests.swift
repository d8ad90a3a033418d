import Foundation
import HTTPTypes
import MicroHTTP
import Testing

@Suite("Router without sockets")
struct RouterTests {
    struct Failure: Error {}

    let router: Router = {
        var router = Router()
        router.get("/v1/jobs/{id}") { request in .text("job \(try request.parameters.require("id"))") }
        router.get("/v1/jobs/latest") { _ in .text("latest") }
        router.post("/v1/jobs/{id}/cancel") { request in .text("cancel \(request.parameters["id"] ?? "")") }
        router.delete("/v1/jobs/{id}") { _ in Response(status: .noContent) }
        router.get("/teapot") { _ in throw HTTPError(.init(code: 418), detail: "short and stout") }
        router.get("/boom") { _ in throw Failure() }
        return router
    }()

    func respond(_ method: HTTPRequest.Method, _ path: String) async -> Response {
        await router.respond(to: Request(head: HTTPRequest(method: method, scheme: nil, authority: nil, path: path)))
    }

    func problem(_ response: Response) throws -> [String: Any] {
        #expect(response.headerFields[.contentType] == "application/problem+json")
        let bytes = try #require(response.body.bytes)
        return try #require(try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any])
    }

    @Test func pathParameters() async throws {
        let response = await respond(.get, "/v1/jobs/abc")
        #expect(response.status == .ok)
        #expect(response.body.bytes == Array("job abc".utf8))
    }

    @Test func literalSegmentsWinOverParameters() async {
        #expect(await respond(.get, "/v1/jobs/latest").body.bytes == Array("latest".utf8))
        #expect(await respond(.post, "/v1/jobs/latest/cancel").body.bytes == Array("cancel latest".utf8))
    }

    /// Segments are compared as whole byte strings: a prefix, a longer name or a different case is another segment.
    @Test func segmentsMatchByTheirWholeBytes() async {
        #expect(await respond(.get, "//v1///jobs/é-ü/").body.bytes == Array("job é-ü".utf8))
        #expect(await respond(.get, "/v1/jobs/lates").body.bytes == Array("job lates".utf8))
        #expect(await respond(.get, "/v1/jobs/latestx").body.bytes == Array("job latestx".utf8))
        #expect(await respond(.get, "/v1/Jobs/x").status == .notFound)
        #expect(await respond(.get, "/v1/job/x").status == .notFound)
        #expect(await respond(.get, "/v1/jobs").status == .notFound)
        #expect(await respond(.get, "/").status == .notFound)
    }

    @Test func aLaterRouteReplacesTheEarlierOne() async {
        var router = router
        router.get("/v1/jobs/{id}") { _ in .text("replaced") }
        let response = await router.respond(to: Request(head: HTTPRequest(method: .get, scheme: nil, authority: nil, path: "/v1/jobs/x")))
        #expect(response.body.bytes == Array("replaced".utf8))
        // The copy made on write: the original router still answers as it did.
        #expect(await respond(.get, "/v1/jobs/x").body.bytes == Array("job x".utf8))
        let other = await router.respond(to: Request(head: HTTPRequest(method: .put, scheme: nil, authority: nil, path: "/v1/jobs/x")))
        #expect(other.headerFields[.allow] == "DELETE, GET, HEAD")
    }

    /// Refuses the requests whose path ends in `/refused`, as a gate refuses a request without a key.
    final class Refusing: MicroHTTP.Gate {
        func admit(_ request: inout Request) -> HTTPError? {
            request.path.hasSuffix("/refused") ? HTTPError(.unauthorized, detail: "no key") : nil
        }
        func authorize(_ request: Request, route: Router.Route) -> HTTPError? { nil }
    }

    /// Fields added under a prefix go on the router's own answers there (the gate's refusal, a 404, a 405, a 413), not
    /// on a handler's (it sets its own), nor on a path that only begins with the same letters.
    @Test func fieldsAddedUnderAPrefixGoOnTheRoutersOwnAnswersThere() async {
        var router = Router()
        router.gate = Refusing()
        router.post("/v1/uploads", maxBodySize: 10) { _ in .text("created") }
        router.get("/v1/uploads/{id}") { _ in .text("found") }
        router.addFields([HTTPField.Name("Tus-Resumable")!: "1.0.0"], toAnswersUnder: "/v1/uploads")
        func answer(_ method: HTTPRequest.Method, _ path: String, body: RequestBody = .empty) async -> Response {
            await router.respond(to: Request(head: HTTPRequest(method: method, scheme: nil, authority: nil, path: path), body: body))
        }
        let marked: [(Response, HTTPResponse.Status)] = [
            (await answer(.get, "/v1/uploads/refused"), .unauthorized),
            (await answer(.get, "/v1/uploads/a/b"), .notFound),
            (await answer(.delete, "/v1/uploads/a"), .methodNotAllowed),
            (await answer(.post, "/v1/uploads", body: RequestBody(bytes: Array(repeating: 0, count: 11))), .contentTooLarge),
        ]
        for (response, status) in marked {
            #expect(response.status == status)
            #expect(response.headerFields[HTTPField.Name("Tus-Resumable")!] == "1.0.0", "\(status)")
        }
        let unmarked: [(Response, HTTPResponse.Status)] = [
            (await answer(.get, "/v1/uploads/a"), .ok),
            (await answer(.get, "/v1/uploadsx/refused"), .unauthorized),
            (await answer(.get, "/v1/uploadsx"), .notFound),
            (await answer(.get, "/v1/refused"), .unauthorized),
        ]
        for (response, status) in unmarked {
            #expect(response.status == status)
            #expect(response.headerFields[HTTPField.Name("Tus-Resumable")!] == nil, "\(status)")
        }
    }

    @Test func parametersAreEqualWhateverTheOrderTheyWereSetIn() {
        var set = Parameters()
        set["kind"] = "jobs"
        set["id"] = "x"
        #expect(set == Parameters(["id": "x", "kind": "jobs"]))
        #expect(set.hashValue == Parameters(["id": "x", "kind": "jobs"]).hashValue)
        #expect(set != Parameters(["id": "x", "kind": "posts"]))
        #expect(set != Parameters(["id": "x"]))
        set["kind"] = nil
        #expect(set == Parameters(["id": "x"]))
    }

    @Test func parametersBeyondTwoAreKeptChangedAndRemovedAlike() {
        var set = Parameters()
        for (name, value) in [("a", "1"), ("b", "2"), ("c", "3"), ("d", "4")] { set[name] = value }
        #expect(["a", "b", "c", "d", "e"].map { set[$0] } == ["1", "2", "3", "4", nil])
        set["c"] = "30"
        set["b"] = "20"
        set["a"] = nil
        #expect(["a", "b", "c", "d"].map { set[$0] } == [nil, "20", "30", "4"])
        #expect(set == Parameters(["b": "20", "c": "30", "d": "4"]))
        set["e"] = "5"
        set["d"] = nil
        set["b"] = nil
        #expect(set == Parameters(["c": "30", "e": "5"]))
        set["zzz"] = nil
        #expect(set == Parameters(["c": "30", "e": "5"]))
    }

    @Test func headFallsBackToGet() async {
        #expect(await respond(.head, "/v1/jobs/x").status == .ok)
    }

    @Test func unknownPathIs404Problem() async throws {
        let response = await respond(.get, "/v1/nothing")
        #expect(response.status == .notFound)
        let body = try problem(response)
        #expect(body["status"] as? Int == 404)
        #expect(body["title"] as? String == "Not Found")
        #expect(body["type"] as? String == "about:blank")
    }

    @Test func wrongMethodIs405WithAllow() async throws {
        let response = await respond(.put, "/v1/jobs/x")
        #expect(response.status == .methodNotAllowed)
        #expect(response.headerFields[.allow] == "DELETE, GET, HEAD")
        #expect(try problem(response)["status"] as? Int == 405)
    }

    @Test func thrownHTTPErrorBecomesItsProblem() async throws {
        let response = await respond(.get, "/teapot")
        #expect(response.status.code == 418)
        #expect(try problem(response)["detail"] as? String == "short and stout")
    }

    @Test func unknownErrorIs500ProblemNamingTheRequest() async throws {
        let request = Request(head: HTTPRequest(method: .get, scheme: nil, authority: nil, path: "/boom"), id: "req-42")
        let response = await router.respond(to: request)
        #expect(response.status == .internalServerError)
        let detail = try #require(try problem(response)["detail"] as? String)
        #expect(detail.contains("req-42"))
    }

    /// Without a socket the router runs the daemon's pipeline (``Router/dispatch``): the body limits included.
    @Test func aDeclaredBodyOverTheRouteLimitIs413BeforeTheHandler() async throws {
        var router = Router()
        router.post("/small", maxBodySize: 10) { request in .text("\(try await request.body.collect(upTo: 10).count)") }
        router.post("/default") { _ in .text("ran") }
        func post(_ path: String, _ count: Int) async -> Response {
            await router.respond(
                to: Request(
                    head: HTTPRequest(method: .post, scheme: nil, authority: nil, path: path),
                    body: RequestBody(bytes: Array(repeating: 1, count: count))),
                defaultBodyLimit: 100)
        }
        #expect(await post("/small", 11).status == .contentTooLarge)
        #expect(await post("/small", 10).body.bytes == Array("10".utf8))
        #expect(await post("/default", 101).status == .contentTooLarge)
        #expect(await post("/default", 100).body.bytes == Array("ran".utf8))
    }

    @Test func validationErrorsAreListed() throws {
        let error = HTTPError(.unprocessableContent, errors: [.init(pointer: "/media_ids/1", detail: "unknown media")])
        let body = try problem(error.response)
        let errors = try #require(body["errors"] as? [[String: String]])
        #expect(errors == [["pointer": "/media_ids/1", "detail": "unknown media"]])
    }

    @Test(arguments: ["abc-123", "A.b_c:d"]) func saneRequestIDsAreAccepted(_ id: String) {
        #expect(RequestID.accept(id) == id)
    }

    @Test(arguments: ["", "has space", "x\r\ny", String(repeating: "a", count: 129)]) func otherRequestIDsAreReplaced(_ id: String) {
        #expect(RequestID.accept(id) == nil)
        #expect(RequestID.generate().count == 32)
    }
}
