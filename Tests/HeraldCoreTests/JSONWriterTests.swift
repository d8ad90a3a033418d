import Foundation
import HeraldCore
import Platform
import Testing

@Suite("JSONWriter")
struct JSONWriterTests {
    @Test("numbers, literals, nesting and commas read back as written")
    func valuesAndStructure() throws {
        var writer = JSONWriter(capacity: 8)
        writer.beginObject()
        writer.key("ints")
        writer.beginArray()
        for value in [0, 7, -7, 1_000_000, Int.max, Int.min] { writer.int(value) }
        writer.endArray()
        writer.key("flags")
        writer.beginArray()
        writer.bool(true)
        writer.bool(false)
        writer.null()
        writer.string(nil)
        writer.endArray()
        writer.key("empty")
        writer.beginObject()
        writer.endObject()
        writer.key("at")
        writer.timestamp(Timestamp(millisecondsSinceEpoch: 1_795_000_000_123))
        writer.endObject()
        let text = String(decoding: writer.bytes, as: UTF8.self)
        #expect(
            text
                == #"{"ints":[0,7,-7,1000000,9223372036854775807,-9223372036854775808],"flags":[true,false,null,null],"empty":{},"at":"2026-11-18T11:06:40.123Z"}"#
        )
    }

    @Test("strings: escapes where JSON needs them, and the buffer grows past its first capacity")
    func stringsAndGrowth() throws {
        let plain = String(repeating: "0123456789abcdef", count: 40)
        let awkward = "quote \" back \\ newline\n tab\t bell\u{07} é 🚀 </a>"
        var writer = JSONWriter(capacity: 16)
        writer.beginArray()
        writer.string(plain)
        writer.string(awkward)
        writer.string("")
        writer.endArray()
        let read = try JSONSerialization.jsonObject(with: Data(writer.bytes)) as? [String]
        #expect(read == [plain, awkward, ""])
        #expect(String(decoding: writer.bytes, as: UTF8.self).contains(#"\u0007"#))
        // Handed over: the same text, in the buffer it grew into.
        let copied = writer.bytes
        let finished = writer.finish()
        #expect(Array(finished.buffer) == copied)
        #expect(finished.count > 16)
    }

    /// The check that skips escaping reads eight bytes at a time: every ASCII byte, at every place of a string long
    /// enough for two words and a tail, beside bytes beyond ASCII, must read back as itself.
    @Test("every byte at every place of a string is escaped when JSON needs it, whatever its place in a word")
    func escapesAtEveryPlace() throws {
        for length in [7, 8, 9, 17] {
            for place in 0..<length {
                var writer = JSONWriter(capacity: 64)
                writer.beginArray()
                var expected: [String] = []
                for byte in UInt8(0)..<0x80 {
                    var bytes = Array(repeating: UInt8(ascii: "a"), count: length)
                    bytes[place] = byte
                    if place + 1 < length { bytes[place + 1] = 0xC3 }  // é around it: bytes of 0x80 and above
                    if place + 2 < length { bytes[place + 2] = 0xA9 }
                    if place + 1 == length - 1 { bytes[place + 1] = UInt8(ascii: "z") }  // never half of é at the end
                    let text = String(decoding: bytes, as: UTF8.self)
                    expected.append(text)
                    writer.string(text)
                }
                writer.endArray()
                let read = try JSONSerialization.jsonObject(with: Data(writer.bytes)) as? [String]
                #expect(read == expected, "length \(length), place \(place)")
            }
        }
    }

    /// Plain text of 8 to 32 bytes is copied a word at a time, the last word overlapping: every length around those
    /// bounds, each byte distinct, must read back as itself, and what follows it in its place.
    @Test("strings of every length around the word copy's bounds read back as written")
    func everyLengthOfPlainText() throws {
        for length in 0...41 {
            let alphabet = Array("abcdefghijklmnopqrstuvwxyz0123456789ABCDEF".utf8)
            let text = String(decoding: alphabet.prefix(length), as: UTF8.self)
            var writer = JSONWriter(capacity: 64)
            writer.beginArray()
            writer.string(text)
            writer.string(utf8: Array(text.utf8).withUnsafeBufferPointer { UnsafeBufferPointer(rebasing: $0[...]) })
            writer.int(length)
            writer.endArray()
            #expect(String(decoding: writer.bytes, as: UTF8.self) == "[\"\(text)\",\"\(text)\",\(length)]", "length \(length)")
        }
    }
}
