import Testing

@testable import HeraldClient

@Suite("Reading text/event-stream")
struct EventStreamParserTests {
    static let stream = Array(": hello\n\nid: 1\nevent: job\ndata: {\"a\":1}\n\nid: 2\nevent: job\ndata: x\ndata: y\n\n: keep-alive\n\n".utf8)

    @Test func wholeStreamGivesEachEventWithItsID() {
        var parser = EventStreamParser()
        let events = parser.feed(Self.stream)
        #expect(
            events == [
                ServerSentEvent(id: "1", name: "job", data: "{\"a\":1}"),
                ServerSentEvent(id: "2", name: "job", data: "x\ny"),
            ])
    }

    /// Chunks cut anywhere, inside a line or a field name, give the same events as the stream whole.
    @Test(arguments: [1, 2, 3, 7, 13])
    func chunksCutAnywhereGiveTheSameEvents(size: Int) {
        var parser = EventStreamParser()
        var events: [ServerSentEvent] = []
        var offset = 0
        while offset < Self.stream.count {
            events += parser.feed(Self.stream[offset..<min(offset + size, Self.stream.count)])
            offset += size
        }
        var whole = EventStreamParser()
        #expect(events == whole.feed(Self.stream))
    }

    @Test func crLFAndBareCRAndFieldsWithoutSpaceAreLinesToo() {
        var parser = EventStreamParser()
        let events = parser.feed(Array("id:7\r\nevent:job\r\ndata:a\r\n\r\ndata: b\r\rdata\n\n".utf8))
        #expect(events.map(\.data) == ["a", "b", ""])
        #expect(events.map(\.id) == ["7", "7", "7"])
        #expect(events.map(\.name) == ["job", "message", "message"])
    }

    @Test func aCRAtTheEndOfAChunkAndALFStartingTheNextAreOneLineEnd() {
        var parser = EventStreamParser()
        #expect(parser.feed(Array("data: a\r".utf8)).isEmpty)
        #expect(parser.feed(Array("\n\r".utf8)).map(\.data) == ["a"])
    }

    @Test func anEventWithoutDataIsNotDispatched() {
        var parser = EventStreamParser()
        #expect(parser.feed(Array("event: job\nid: 3\n\n".utf8)).isEmpty)
        #expect(parser.feed(Array("data: z\n\n".utf8)) == [ServerSentEvent(id: "3", name: "message", data: "z")])
    }
}
