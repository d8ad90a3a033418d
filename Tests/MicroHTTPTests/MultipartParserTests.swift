import Testing

@testable import MicroHTTP

@Suite("Multipart parser")
struct MultipartParserTests {
    /// What the parser made of libmicrohttpd's calls, as text: `start(name)`, `data(bytes)`, `end`.
    private func events(_ parser: MultipartParser) -> [String] {
        var events: [String] = []
        while let event = parser.popEvent() {
            switch event {
            case .partStart(let name, _, _): events.append("start(\(name))")
            case .data(let bytes): events.append("data(\(String(decoding: bytes, as: UTF8.self)))")
            case .partEnd: events.append("end")
            }
        }
        return events
    }

    private func receive(_ parser: MultipartParser, name: String, filename: String?, contentType: String?, data: [UInt8], offset: UInt64) -> Bool {
        data.withUnsafeBytes { parser.receive(name: name, filename: filename, contentType: contentType, data: $0, offset: offset) }
    }

    @Test func aPartWhoseStartIsReportedTwiceIsOnePart() throws {
        // When a body chunk ends a few bytes into a part's value, libmicrohttpd 0.9.75 reports the part at offset 0 with
        // no bytes, then at offset 0 again with them (found by Fuzz/multipart; seen with a C program too).
        let parser = MultipartParser()
        #expect(receive(parser, name: "text", filename: nil, contentType: nil, data: [], offset: 0))
        #expect(receive(parser, name: "text", filename: nil, contentType: nil, data: Array("he".utf8), offset: 0))
        #expect(receive(parser, name: "text", filename: nil, contentType: nil, data: Array("llo".utf8), offset: 2))
        #expect(events(parser) == ["start(text)", "data(he)", "data(llo)"])
    }

    @Test func aNewNameOrBytesAlreadyReceivedStartANewPart() throws {
        let parser = MultipartParser()
        #expect(receive(parser, name: "a", filename: nil, contentType: nil, data: Array("1".utf8), offset: 0))
        // The same name again from offset 0 after bytes: a second part (a repeated field).
        #expect(receive(parser, name: "a", filename: nil, contentType: nil, data: Array("2".utf8), offset: 0))
        #expect(receive(parser, name: "b", filename: nil, contentType: nil, data: [], offset: 0))
        #expect(events(parser) == ["start(a)", "data(1)", "end", "start(a)", "data(2)", "end", "start(b)"])
    }
}
