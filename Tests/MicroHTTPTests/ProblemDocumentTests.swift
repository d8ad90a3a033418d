import Foundation
import HTTPTypes
import MicroHTTP
import Testing

/// The RFC 9457 problem document: `type, title, status, detail, errors[{pointer, detail}]`, in that order.
@Suite("Problem documents")
struct ProblemDocumentTests {
    static func body(_ error: HTTPError) -> String {
        String(decoding: error.response.body.bytes ?? [], as: UTF8.self)
    }

    @Test("members in the documented order, byte for byte")
    func order() {
        let error = HTTPError(
            .unprocessableContent,
            detail: "the post is not valid",
            errors: [
                .init(pointer: "/media_ids/1", detail: "unknown media"),
                .init(pointer: "/text", detail: "at most 5000 characters"),
            ]
        )
        #expect(
            Self.body(error)
                == #"{"type":"about:blank","title":"Unprocessable Content","status":422,"detail":"the post is not valid","#
                + #""errors":[{"pointer":"/media_ids/1","detail":"unknown media"},{"pointer":"/text","detail":"at most 5000 characters"}]}"#
        )
        #expect(error.response.headerFields[.contentType] == "application/problem+json")
    }

    @Test("no detail and no errors: both left out")
    func minimal() {
        #expect(Self.body(HTTPError(.notFound)) == #"{"type":"about:blank","title":"Not Found","status":404}"#)
        #expect(
            Self.body(HTTPError(.init(code: 418), title: "I'm a teapot", type: "https://example.com/teapot"))
                == #"{"type":"https://example.com/teapot","title":"I'm a teapot","status":418}"#
        )
    }

    @Test("quotes, backslashes, newlines and control characters are escaped; the text reads back as given")
    func escaping() throws {
        let awkward = "no \"media\" \\ here\nline\r\ttab \u{0}\u{1F} é 🚀 </a>"
        let error = HTTPError(.badRequest, title: awkward, detail: awkward, errors: [.init(pointer: "/a\"b", detail: awkward)])
        let text = Self.body(error)
        #expect(text.utf8.allSatisfy { $0 >= 0x20 })
        let object = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
        #expect(object["title"] as? String == awkward)
        #expect(object["detail"] as? String == awkward)
        #expect(object["status"] as? Int == 400)
        let errors = try #require(object["errors"] as? [[String: String]])
        #expect(errors == [["pointer": "/a\"b", "detail": awkward]])
    }
}
