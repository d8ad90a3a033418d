import HTTPTypes
import Testing

@testable import MicroHTTP

@Suite struct RequestFieldsTests {
    private static let fields = RequestFields([
        .init(name: HTTPField.Name("Host")!, value: "here"),
        .init(name: .accept, value: "text/plain"),
        .init(name: .cookie, value: "a=1"),
        .init(name: HTTPField.Name("ACCEPT")!, value: "application/json"),
        .init(name: .cookie, value: "b=2"),
        .init(name: HTTPField.Name("X-Custom")!, value: ""),
    ])

    /// Reads as swift-http-types' fields read: repeated fields joined the same way, names in any case, absent ones nil.
    @Test func readsAsHTTPFieldsRead() {
        let reference = Self.fields.httpFields
        let names: [HTTPField.Name] = [.accept, .cookie, HTTPField.Name("host")!, HTTPField.Name("x-custom")!, .authorization, .contentType]
        for name in names {
            #expect(Self.fields[name] == reference[name], "\(name)")
            #expect(Self.fields.values(name) == reference[values: name], "\(name)")
            #expect(Self.fields.first(name) == reference[values: name].first, "\(name)")
        }
        #expect(Self.fields[.accept] == "text/plain, application/json")
        #expect(Self.fields[.cookie] == "a=1; b=2")
        #expect(Self.fields.first(.accept) == "text/plain")
        #expect(Self.fields[HTTPField.Name("X-Custom")!] == "")
        #expect(Self.fields[.authorization] == nil)
    }

    /// The swift-http-types forms hold every field in order, and the head names the `Host` as its authority.
    @Test func convertsBothWays() {
        #expect(RequestFields(Self.fields.httpFields) == Self.fields)
        let request = Request(method: .post, path: "/v1/posts/ ", fields: Self.fields)
        #expect(request.head.method == .post)
        #expect(request.head.authority == "here")
        #expect(request.head.headerFields == Self.fields.httpFields)
        // The path as sent, even where swift-http-types' field value would lose its trailing space.
        #expect(request.path == "/v1/posts/ ")
        #expect(Request(head: request.head).fields == Self.fields)
    }
}
