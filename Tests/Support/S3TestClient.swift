import AsyncHTTPClient
import Foundation
import HeraldCore
import NIOCore
import NIOHTTP1
import Publishing

/// Just enough of S3 for the tests to arrange and inspect buckets: signed path-style requests.
public struct S3TestClient: Sendable {
    public let endpoint: String
    public let signer: SigV4Signer

    public init(endpoint: String, credentials: SigV4Signer.Credentials, region: String = "us-east-1") {
        self.endpoint = endpoint
        self.signer = SigV4Signer(credentials: credentials, region: region, service: "s3")
    }

    /// A new bucket with a unique name.
    public func makeBucket(prefix: String = "herald-test") async throws -> String {
        let name = "\(prefix)-\(String(UInt64.random(in: 0..<UInt64.max), radix: 36))"
        let answer = try await send("PUT", "/\(name)")
        guard answer.status == 200 else { throw S3TestError(answer: answer) }
        return name
    }

    /// The object's bytes, or `nil` when there is none.
    public func get(bucket: String, key: String) async throws -> [UInt8]? {
        let answer = try await send("GET", "/\(bucket)/\(key)")
        if answer.status == 404 { return nil }
        guard answer.status == 200 else { throw S3TestError(answer: answer) }
        return answer.body
    }

    /// Every key in the bucket (up to 1000, plenty for a test).
    public func keys(bucket: String) async throws -> [String] {
        let answer = try await send("GET", "/\(bucket)", query: [("list-type", "2")])
        guard answer.status == 200 else { throw S3TestError(answer: answer) }
        let xml = String(decoding: answer.body, as: UTF8.self)
        return xml.split(separator: "<Key>").dropFirst().map { String($0.prefix { $0 != "<" }) }
    }

    /// The multipart uploads under way in the bucket: each one's key and upload id.
    public func multipartUploads(bucket: String) async throws -> [(key: String, id: String)] {
        let answer = try await send("GET", "/\(bucket)", query: [("uploads", "")])
        guard answer.status == 200 else { throw S3TestError(answer: answer) }
        let xml = String(decoding: answer.body, as: UTF8.self)
        return xml.components(separatedBy: "<Upload>").dropFirst().map { upload in
            func element(_ name: String) -> String {
                guard let start = upload.range(of: "<\(name)>"), let end = upload.range(of: "</\(name)>", range: start.upperBound..<upload.endIndex)
                else { return "" }
                return String(upload[start.upperBound..<end.lowerBound])
            }
            return (element("Key"), element("UploadId"))
        }
    }

    /// The part numbers a multipart upload holds.
    public func parts(bucket: String, key: String, uploadID: String) async throws -> [Int] {
        let answer = try await send("GET", "/\(bucket)/\(key)", query: [("uploadId", uploadID)])
        guard answer.status == 200 else { throw S3TestError(answer: answer) }
        let xml = String(decoding: answer.body, as: UTF8.self)
        return xml.split(separator: "<PartNumber>").dropFirst().compactMap { Int($0.prefix { $0 != "<" }) }
    }

    public struct Answer: Sendable {
        public var status: Int
        public var body: [UInt8]
    }

    public func send(
        _ method: String,
        _ path: String,
        query: [(name: String, value: String)] = [],
        body: [UInt8] = []
    ) async throws -> Answer {
        let host = String(endpoint.dropFirst("http://".count))
        let payloadHash = SigV4Signer.payloadHash(body)
        let signature = signer.sign(
            method: method,
            path: path,
            query: query,
            headers: [("host", host), ("x-amz-content-sha256", payloadHash)],
            payloadHash: payloadHash,
            date: .now()
        )
        // Encoded as SigV4 signs it (an upload id holds `+`, `/` and `=`).
        let unreserved = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
        let queryString = query.map { "\($0.name)=\($0.value.addingPercentEncoding(withAllowedCharacters: unreserved) ?? $0.value)" }
            .joined(separator: "&")
        var request = HTTPClientRequest(url: endpoint + path + (queryString.isEmpty ? "" : "?" + queryString))
        request.method = HTTPMethod(rawValue: method)
        for (name, value) in signature.headers { request.headers.add(name: name, value: value) }
        request.headers.add(name: "authorization", value: signature.authorization)
        if !body.isEmpty { request.body = .bytes(body) }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        let bytes = try await response.body.collect(upTo: 64 << 20)
        return Answer(status: Int(response.status.code), body: Array(buffer: bytes))
    }
}

public struct S3TestError: Error, CustomStringConvertible {
    public let answer: S3TestClient.Answer
    public var description: String {
        "S3 answered \(answer.status): \(String(decoding: answer.body, as: UTF8.self))"
    }
}
