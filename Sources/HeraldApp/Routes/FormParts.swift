import HTTPTypes
import HeraldCore
import MicroHTTP
import Platform
import Publishing

/// Shares one multipart reader between the loop over parts and the reader of a part's bytes.
final class PartCursor: @unchecked Sendable {
    // @unchecked Sendable: used by the one task that handles the request.
    private var iterator: MultipartReader.AsyncIterator

    init(_ reader: MultipartReader) { iterator = reader.makeAsyncIterator() }

    func next() async throws -> MultipartEvent? { try await iterator.next() }
}

/// The bytes of the current part, up to its end.
struct PartBytes: AsyncSequence, Sendable {
    typealias Element = [UInt8]
    let parts: PartCursor

    func makeAsyncIterator() -> Iterator { Iterator(parts: parts) }

    struct Iterator: AsyncIteratorProtocol {
        let parts: PartCursor
        var ended = false

        mutating func next() async throws -> [UInt8]? {
            while !ended, let event = try await parts.next() {
                switch event {
                case .data(let bytes): return bytes
                case .partEnd: ended = true
                case .partStart: throw HTTPError(.badRequest, detail: "malformed multipart body")
                }
            }
            return nil
        }
    }
}

extension HTTPError {
    /// 507 with `Retry-After`: no room to stage a body.
    static func insufficientStorage(_ detail: String) -> HTTPError {
        HTTPError(
            HTTPResponse.Status(code: 507, reasonPhrase: "Insufficient Storage"), detail: detail,
            headerFields: [.retryAfter: "\(StagingArea.retryAfterFull)"])
    }
}

extension StagingArea {
    /// Stages bytes a client sent, answering the ways they can be wrong as problems (400, 413, 415).
    func stage<Chunks: AsyncSequence>(
        request chunks: Chunks,
        mediaID: MediaID,
        type: MediaType,
        maxBytes: Int,
        whenEmpty: String
    ) async throws -> Staged where Chunks.Element == [UInt8] {
        do {
            return try await stage(chunks, mediaID: mediaID.rawValue, type: type, maxBytes: maxBytes)
        } catch let error as StagingError {
            switch error {
            case .empty: throw HTTPError(.badRequest, detail: whenEmpty)
            case .tooLarge(let limit): throw HTTPError.bodyTooLarge(limit: limit)
            case .signatureMismatch(let type): throw HTTPError(.unsupportedMediaType, detail: "the bytes are not \(type.rawValue)")
            // The partial file is already removed; nothing else was written, and the server goes on serving.
            case .io(_, ENOSPC), .io(_, EDQUOT), .io(_, EFBIG): throw HTTPError.insufficientStorage("the data directory's disk is full")
            case .io: throw error
            case .store(let failure) where failure.errorCode == .insufficientStorage:
                throw HTTPError.insufficientStorage("the media store's disk is full")
            // Nothing was kept (a multipart upload is aborted): the client sends again once the store answers.
            case .store(let failure):
                throw HTTPError.storeUnavailable(failure)
            }
        }
    }
}
