import Foundation
import Hummingbird

/// An RFC 9457 `application/problem+json` error, spelled as Herald spells it (keys sorted, `type` `about:blank`).
///
/// Hummingbird's own `HTTPError` answers `{"error": {"message": ...}}`, so the contract needs its own error type.
struct Problem: HTTPResponseError {
    var status: HTTPResponse.Status
    var detail: String

    private struct Body: Encodable {
        var type = "about:blank"
        var title: String
        var status: Int
        var detail: String
    }

    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    func response(from request: Request, context: some RequestContext) throws -> Response {
        let body = Body(title: status.reasonPhrase, status: status.code, detail: detail)
        let data = try Self.encoder.encode(body)
        return Response(
            status: status,
            headers: [.contentType: "application/problem+json", .contentLength: String(data.count)],
            body: .init(byteBuffer: ByteBuffer(bytes: data))
        )
    }
}
