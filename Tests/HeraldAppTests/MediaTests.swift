import AsyncHTTPClient
import Crypto
import Foundation
import HeraldApp
import NIOCore
import NIOHTTP1
import Testing

/// The first bytes of a real PNG, then filler.
let pngBytes: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 0x0D, 0x49, 0x48, 0x44, 0x52] + (0..<5000).map { UInt8($0 % 251) }
let jpegBytes: [UInt8] = [0xFF, 0xD8, 0xFF, 0xE0, 0, 0x10, 0x4A, 0x46, 0x49, 0x46, 0, 1] + (0..<3000).map { UInt8($0 % 13) }

func send(
    _ method: HTTPMethod,
    _ url: String,
    contentType: String? = nil,
    body: [UInt8]? = nil
) async throws -> (status: HTTPResponseStatus, headers: HTTPHeaders, json: [String: Any]) {
    var request = HTTPClientRequest(url: url)
    request.method = method
    request.authorize()
    if let contentType { request.headers.add(name: "Content-Type", value: contentType) }
    if let body { request.body = .bytes(ByteBuffer(bytes: body)) }
    let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
    let bytes = try await response.body.collect(upTo: 1 << 20)
    let json = bytes.readableBytes == 0 ? [:] : (try JSONSerialization.jsonObject(with: Data(bytes.readableBytesView)) as? [String: Any] ?? [:])
    return (response.status, response.headers, json)
}

func sha256(_ bytes: [UInt8]) -> String {
    SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined()
}

func multipart(_ parts: [(name: String, filename: String?, type: String?, body: [UInt8])], boundary: String = "HeraldBoundary") -> [UInt8] {
    var body: [UInt8] = []
    for part in parts {
        var head = "--\(boundary)\r\nContent-Disposition: form-data; name=\"\(part.name)\""
        if let filename = part.filename { head += "; filename=\"\(filename)\"" }
        head += "\r\n"
        if let type = part.type { head += "Content-Type: \(type)\r\n" }
        head += "\r\n"
        body += Array(head.utf8) + part.body + Array("\r\n".utf8)
    }
    return body + Array("--\(boundary)--\r\n".utf8)
}

/// The names of the files waiting in the staging folder.
func stagedFiles(_ application: Application) -> [String] {
    (try? FileManager.default.contentsOfDirectory(atPath: application.configuration.dataDirectory + "/staging")) ?? []
}

@Suite("Media endpoints", .serialized, .timeLimit(.minutes(1)))
struct MediaTests {
    @Test func rawUploadIsStagedHashedAndCanBeReadAndDeleted() async throws {
        try await withHerald { base, _, application in
            let created = try await send(.POST, "\(base)/v1/media?description=a%20cat", contentType: "image/png", body: pngBytes)
            #expect(created.status == .created)
            let id = try #require(created.json["id"] as? String)
            #expect(created.headers["Location"] == ["/v1/media/\(id)"])
            #expect(created.json["content_type"] as? String == "image/png")
            #expect(created.json["size"] as? Int == pngBytes.count)
            #expect(created.json["sha256"] as? String == sha256(pngBytes))
            #expect(created.json["description"] as? String == "a cat")
            #expect(created.json["state"] as? String == "staged")
            #expect(created.json["url"] is NSNull)
            #expect(created.json["post_id"] is NSNull)
            #expect(stagedFiles(application) == ["\(id).png"])
            let staged = try Data(contentsOf: URL(fileURLWithPath: application.configuration.dataDirectory + "/staging/\(id).png"))
            #expect(Array(staged) == pngBytes)

            let fetched = try await send(.GET, "\(base)/v1/media/\(id)")
            #expect(fetched.status == .ok)
            #expect(fetched.json["sha256"] as? String == sha256(pngBytes))

            #expect(try await send(.DELETE, "\(base)/v1/media/\(id)").status == .noContent)
            #expect(try await send(.GET, "\(base)/v1/media/\(id)").status == .notFound)
            #expect(try await send(.DELETE, "\(base)/v1/media/\(id)").status == .notFound)
            #expect(stagedFiles(application).isEmpty)
        }
    }

    @Test func multipartUploadTakesTheFilePartsType() async throws {
        try await withHerald { base, _, _ in
            let form = multipart([
                ("description", nil, nil, Array("sunrise".utf8)),
                ("file", "IMG_0001.JPG", "image/jpeg", jpegBytes),
            ])
            let created = try await send(.POST, "\(base)/v1/media", contentType: "multipart/form-data; boundary=HeraldBoundary", body: form)
            #expect(created.status == .created)
            #expect(created.json["content_type"] as? String == "image/jpeg")
            #expect(created.json["size"] as? Int == jpegBytes.count)
            #expect(created.json["sha256"] as? String == sha256(jpegBytes))
            #expect(created.json["description"] as? String == "sunrise")
        }
    }

    @Test func badUploadsAreProblemsAndKeepNothing() async throws {
        try await withHerald(configure: { $0.maxMediaBytes = 4096 }) { base, _, application in
            let form = "multipart/form-data; boundary=HeraldBoundary"
            let cases: [(String, String?, [UInt8], HTTPResponseStatus)] = [
                ("jpeg bytes declared as png", "image/png", jpegBytes.prefix(2000).map { $0 }, .unsupportedMediaType),
                ("a type not accepted", "text/plain", Array("hello".utf8), .unsupportedMediaType),
                ("no content type", nil, pngBytes.prefix(100).map { $0 }, .unsupportedMediaType),
                ("an empty body", "image/png", [], .badRequest),
                ("over max-media-bytes", "image/png", pngBytes, .payloadTooLarge),
                ("a form without a file", form, multipart([("description", nil, nil, Array("x".utf8))]), .badRequest),
                ("a form file of another type", form, multipart([("file", "a.txt", "text/plain", Array("x".utf8))]), .unsupportedMediaType),
                ("a form with an unknown part", form, multipart([("other", nil, nil, Array("x".utf8))]), .badRequest),
                (
                    "a form with an unknown part after both known ones", form,
                    multipart([
                        ("description", nil, nil, Array("x".utf8)), ("file", "a.png", "image/png", pngBytes.prefix(100).map { $0 }),
                        ("other", nil, nil, Array("x".utf8)),
                    ]), .badRequest
                ),
                (
                    "a form with two descriptions", form,
                    multipart([
                        ("description", nil, nil, Array("x".utf8)), ("description", nil, nil, Array("y".utf8)),
                        ("file", "a.png", "image/png", pngBytes.prefix(100).map { $0 }),
                    ]), .badRequest
                ),
                (
                    "a form with two files", form,
                    multipart([
                        ("file", "a.png", "image/png", pngBytes.prefix(100).map { $0 }),
                        ("file", "b.png", "image/png", pngBytes.prefix(100).map { $0 }),
                    ]),
                    .badRequest
                ),
            ]
            for (name, type, body, expected) in cases {
                let answer = try await send(.POST, "\(base)/v1/media", contentType: type, body: body)
                #expect(answer.status == expected, "\(name)")
                #expect(answer.headers["Content-Type"] == ["application/problem+json"], "\(name)")
                #expect(answer.json["status"] as? Int == Int(expected.code), "\(name)")
            }
            let long = String(repeating: "a", count: 1501)
            let tooLong = try await send(
                .POST, "\(base)/v1/media?description=\(long)", contentType: "image/png", body: pngBytes.prefix(100).map { $0 })
            #expect(tooLong.status == .unprocessableEntity)
            #expect((tooLong.json["errors"] as? [[String: String]])?.first?["pointer"] == "/description")
            // The form's description wins over the query's, but a query description over the limit is still refused.
            let overridden = try await send(
                .POST, "\(base)/v1/media?description=\(long)", contentType: form,
                body: multipart([("description", nil, nil, Array("short".utf8)), ("file", "a.png", "image/png", pngBytes.prefix(100).map { $0 })]))
            #expect(overridden.status == .unprocessableEntity)
            #expect(stagedFiles(application).isEmpty)
        }
    }

    @Test func malformedAndUnknownIdsAre404() async throws {
        try await withHerald { base, _, _ in
            let malformed = try await send(.GET, "\(base)/v1/media/not-an-id")
            let unknown = try await send(.GET, "\(base)/v1/media/0190f5e2-3c4d-7a1b-8c2d-1234567890ab")
            let unknownDelete = try await send(.DELETE, "\(base)/v1/media/0190f5e2-3c4d-7a1b-8c2d-1234567890ab")
            #expect(malformed.status == .notFound)
            #expect(unknown.status == .notFound)
            #expect(unknownDelete.status == .notFound)
        }
    }
}
