import Foundation
import JSONText
import Testing

@Suite("JSONEscaping: the one JSON string escaper")
struct JSONEscapingTests {
    @Test("every ASCII byte, alone and amid text, reads back as itself; controls use the short forms or \\u00xx")
    func everyASCIIByteRoundTrips() throws {
        for byte in UInt8(0)..<0x80 {
            var json: [UInt8] = []
            JSONEscaping.appendString([UInt8(ascii: "a"), byte, UInt8(ascii: "z")], to: &json)
            let decoded = try JSONDecoder().decode(String.self, from: Data(json))
            #expect(Array(decoded.utf8) == [UInt8(ascii: "a"), byte, UInt8(ascii: "z")], "byte \(byte)")
            #expect(json.allSatisfy { $0 >= 0x20 }, "byte \(byte) left a control character in the text")
        }
        var json: [UInt8] = []
        JSONEscaping.appendString("\u{1}\n\"\\é".utf8, to: &json)
        #expect(String(decoding: json, as: UTF8.self) == #""\u0001\n\"\\é""#)
    }
}
