import Foundation
import HeraldCore
import Testing

@Suite("MediaType")
struct MediaTypeTests {
    @Test(
        "reads Content-Type values, ignoring case, parameters and blanks",
        arguments: [
            ("image/jpeg", MediaType.jpeg),
            ("image/png", .png),
            ("IMAGE/PNG", .png),
            ("image/png; charset=x", .png),
            ("  image/png ;charset=x", .png),
            ("image/png\t", .png),
            ("image/gif", .gif),
            ("image/webp", .webp),
            ("video/mp4", .mp4),
            ("Video/QuickTime", .quickTime),
            ("video/webm;codecs=vp9", .webm),
        ]
    )
    func contentType(value: String, expected: MediaType) {
        #expect(MediaType(contentType: value) == expected)
    }

    @Test(
        "rejects other types",
        arguments: [
            "", ";", "image/svg+xml", "image/png2", "image", "image/", "text/plain", "application/octet-stream", "image /png",
            "image/jpg",
        ]
    )
    func unsupported(value: String) {
        #expect(MediaType(contentType: value) == nil)
    }

    /// A file start of each type, as real files begin.
    static let samples: [(MediaType, [UInt8])] = [
        (.jpeg, [0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10] + Array("JFIF".utf8) + [0, 1, 1, 0]),
        (.png, [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 0x0D] + Array("IHDR".utf8)),
        (.gif, Array("GIF89a".utf8) + [1, 0, 1, 0, 0x80, 0, 0]),
        (.gif, Array("GIF87a".utf8) + [1, 0, 1, 0]),
        (.webp, Array("RIFF".utf8) + [0x24, 0, 0, 0] + Array("WEBPVP8 ".utf8)),
        (.mp4, [0, 0, 0, 0x20] + Array("ftypisom".utf8) + [0, 0, 2, 0]),
        (.mp4, [0, 0, 0, 0x18] + Array("ftypmp42".utf8)),
        (.quickTime, [0, 0, 0, 0x14] + Array("ftypqt  ".utf8) + [0, 0, 0, 0]),
        (.quickTime, [0, 0, 0, 0x08] + Array("wide".utf8) + [0, 0, 0, 0]),
        (.quickTime, [0, 0, 0x10, 0] + Array("mdat".utf8)),
        (.quickTime, [0, 0, 0x10, 0] + Array("moov".utf8)),
        (.quickTime, [0, 0, 0x10, 0] + Array("free".utf8)),
        (.webm, [0x1A, 0x45, 0xDF, 0xA3, 0x9F, 0x42, 0x86, 0x81, 0x01, 0x42, 0xF7, 0x81, 0x01]),
    ]

    @Test("each type's signature matches that type and no other", arguments: samples)
    func signatures(type: MediaType, bytes: [UInt8]) {
        for candidate in MediaType.allCases {
            #expect(candidate.matches(signature: bytes) == (candidate == type), "\(candidate.rawValue)")
        }
    }

    @Test("PNG bytes declared as image/jpeg do not match")
    func mismatch() throws {
        let png: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 0x0D]
        let declared = try #require(MediaType(contentType: "image/jpeg"))
        #expect(!declared.matches(signature: png))
        #expect(MediaType.png.matches(signature: png))
    }

    /// Prefixes that must not match the paired type.
    static let nearMissPrefixes: [(MediaType, [UInt8])] = [
        (.jpeg, [UInt8]()),
        (.jpeg, [0xFF, 0xD8]),
        (.png, [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A]),
        (.gif, Array("GIF88a".utf8)),
        (.webp, Array("RIFF".utf8)),
        (.webp, Array("RIFF".utf8) + [0x24, 0, 0, 0] + Array("WAVE".utf8)),
        (.mp4, [0, 0, 0, 0x20] + Array("ftyp".utf8)),  // brand missing
        (.mp4, [0, 0, 0, 0x20] + Array("ftypis".utf8)),  // brand cut off
        (.mp4, Array("ftypisom".utf8) + [0, 0, 0, 0]),  // ftyp at 0, not 4
        (.quickTime, [0, 0, 0, 0x20] + Array("ftypisom".utf8)),
        (.quickTime, [0, 0, 0, 0x08] + Array("skip".utf8)),
        (.webm, [0x1A, 0x45, 0xDF]),
    ]

    @Test("too short or near-miss prefixes do not match", arguments: nearMissPrefixes)
    func nearMisses(type: MediaType, bytes: [UInt8]) {
        #expect(!type.matches(signature: bytes))
    }

    @Test("the check needs no more than signatureLength bytes, and extra bytes change nothing")
    func signatureLength() {
        for (type, bytes) in Self.samples {
            let padded = bytes + [UInt8](repeating: 0xEE, count: 64)
            #expect(type.matches(signature: padded.prefix(MediaType.signatureLength)))
            #expect(type.matches(signature: padded))
        }
    }

    @Test("other byte collections work as well as arrays")
    func collections() {
        let data = Data([0x00, 0xFF, 0xD8, 0xFF, 0xE0]).dropFirst()  // a slice whose indices do not start at 0
        #expect(MediaType.jpeg.matches(signature: data))
        #expect(!MediaType.png.matches(signature: data))
    }

    @Test("each type has its own file extension")
    func fileExtensions() {
        let extensions = MediaType.allCases.map(\.fileExtension)
        #expect(Set(extensions).count == MediaType.allCases.count)
        #expect(MediaType.jpeg.fileExtension == "jpg")
        #expect(MediaType.quickTime.fileExtension == "mov")
        #expect(extensions.allSatisfy { !$0.isEmpty && !$0.contains(".") && $0 == $0.lowercased() })
    }

    @Test("the raw values are the API's seven accepted types")
    func accepted() {
        #expect(
            Set(MediaType.allCases.map(\.rawValue)) == [
                "image/jpeg", "image/png", "image/gif", "image/webp", "video/mp4", "video/quicktime", "video/webm",
            ])
    }
}
