import HeraldCore
import Testing

@Suite("JSON syntax (RFC 8259)")
struct JSONSyntaxTests {
    @Test(
        "documents RFC 8259 allows pass",
        arguments: [
            #"{}"#, #"[]"#, #" { "text" : "a" , "media_ids" : [ ] } "#, #"{"a":[1,-0,0.5,1e10,-2.5E-3,1E+2]}"#,
            #"{"s":"\" \\ \/ \b \f \n \r \t \u00e9 \uD83D\uDE80"}"#, #"{"t":true,"f":false,"n":null}"#, "\"caf\u{e9} 🚀\"", #"0"#,
            "{\n\t\"a\": 1\r\n}",
        ]
    )
    func valid(_ text: String) {
        #expect(JSONSyntax.problem(in: Array(text.utf8)) == nil)
    }

    @Test(
        "what a lenient parser would take is refused",
        arguments: [
            (#"{"text": "a",}"#, "unexpected '}' at byte 13"),
            (#"{"media_ids": ["x",]}"#, "unexpected ']' at byte 19"),
            (#"{"text": "a" /* c */}"#, "unexpected '/' at byte 13"),
            (#"{"text": "a"} // c"#, "unexpected '/' at byte 14"),
            (#"{"n": NaN}"#, "unexpected 'N' at byte 6"),
            (#"{"n": Infinity}"#, "unexpected 'I' at byte 6"),
            (#"{"n": 01}"#, "unexpected '1' at byte 7"),
            (#"{"n": +1}"#, "unexpected '+' at byte 6"),
            (#"{"n": .5}"#, "unexpected '.' at byte 6"),
            (#"{"n": 1.}"#, "unexpected '}' at byte 8"),
            (#"{'text': 'a'}"#, "unexpected ''' at byte 1"),
            (#"{text: "a"}"#, "unexpected 't' at byte 1"),
            (#"{"s": "\x41"}"#, "unexpected 'x' at byte 8"),
            (#"{"s": "\u12"}"#, "unexpected '\"' at byte 11"),
            ("{\"s\": \"a\tb\"}", "unexpected byte 0x9 at byte 8"),
            (#"{"a": 1} {"#, "unexpected '{' at byte 9"),
            (#"{"a": tru}"#, "unexpected '}' at byte 9"),
            (#"{"a": "#, "unexpected end at byte 6"),
            ("", "unexpected end at byte 0"),
        ]
    )
    func invalid(_ text: String, _ problem: String) {
        #expect(JSONSyntax.problem(in: Array(text.utf8)) == problem)
    }

    @Test("bytes that are not UTF-8, and nesting past the bound, are refused")
    func limits() {
        #expect(JSONSyntax.problem(in: [0x22, 0xC3, 0x28, 0x22]) == "it is not UTF-8")
        let deep = String(repeating: "[", count: JSONSyntax.maxDepth + 1) + String(repeating: "]", count: JSONSyntax.maxDepth + 1)
        #expect(JSONSyntax.problem(in: Array(deep.utf8))?.hasPrefix("nested deeper than") == true)
        let allowed = String(repeating: "[", count: JSONSyntax.maxDepth) + String(repeating: "]", count: JSONSyntax.maxDepth)
        #expect(JSONSyntax.problem(in: Array(allowed.utf8)) == nil)
    }
}
