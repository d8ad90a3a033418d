import Crypto
import HeraldCore

/// AWS Signature Version 4: signs an HTTP request with an access key, for S3 and any other AWS-style API.
///
/// The algorithm of <https://docs.aws.amazon.com/IAM/latest/UserGuide/create-signed-request.html>:
/// a canonical request (method, URI, sorted query, sorted lower-cased headers, signed header names,
/// payload hash) is hashed into a string to sign, which is signed with a key derived from the secret
/// through the date, region and service. The unit tests check it against AWS's published test suite.
public struct SigV4Signer: Sendable {
    /// An access key, with the token of temporary credentials.
    public struct Credentials: Sendable, Hashable {
        public var accessKeyID: String
        public var secretAccessKey: String
        /// Sent as `x-amz-security-token` (and signed) when set.
        public var sessionToken: String?

        public init(accessKeyID: String, secretAccessKey: String, sessionToken: String? = nil) {
            self.accessKeyID = accessKeyID
            self.secretAccessKey = secretAccessKey
            self.sessionToken = sessionToken
        }
    }

    /// What a signature covers, computed along the way (the test suite checks each step).
    public struct Signature: Sendable {
        /// The canonical request, whose SHA-256 the string to sign holds.
        public var canonicalRequest: String
        /// `AWS4-HMAC-SHA256`, the time, the scope and the canonical request's hash, one per line.
        public var stringToSign: String
        /// The value of the `Authorization` header.
        public var authorization: String
        /// Every header the request must carry to match the signature: the ones given, plus
        /// `x-amz-date` and `x-amz-security-token` when they were added.
        public var headers: [(name: String, value: String)]
    }

    /// The SHA-256 of an empty payload, for requests without a body.
    public static let emptyPayloadHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

    /// The SHA-256 of a body held in memory, in the lowercase hex that `x-amz-content-sha256` carries.
    public static func payloadHash(_ body: some Sequence<UInt8>) -> String {
        // In place when the bytes are contiguous (an array, a ByteBuffer's view): a part is 8 MiB.
        let digest = body.withContiguousStorageIfAvailable { bytes in
            var hasher = SHA256()
            hasher.update(bufferPointer: UnsafeRawBufferPointer(bytes))
            return hasher.finalize()
        }
        return Hex.encode(digest ?? SHA256.hash(data: Array(body)))
    }

    public var credentials: Credentials
    public var region: String
    public var service: String
    /// Whether the canonical URI is the path normalized (`.`/`..` and duplicate slashes removed) and
    /// encoded again, as every AWS service but S3 expects. S3 signs the path exactly as sent.
    public var normalizesPath: Bool

    public init(credentials: Credentials, region: String, service: String, normalizesPath: Bool = false) {
        self.credentials = credentials
        self.region = region
        self.service = service
        self.normalizesPath = normalizesPath
    }

    /// Signs a request.
    ///
    /// - Parameters:
    ///   - method: The HTTP method, such as `PUT`.
    ///   - path: The path as sent on the request line (percent-encoded where it needs to be).
    ///   - query: The query parameters, not encoded; any order.
    ///   - headers: The headers to sign (at least `host`); names in any case, values as sent. A name given
    ///     twice is signed as one header whose values are joined by commas, as HTTP allows.
    ///   - payloadHash: The body's SHA-256 in lowercase hex (``emptyPayloadHash`` for none), or
    ///     `UNSIGNED-PAYLOAD`. For S3 it must also be sent as `x-amz-content-sha256`.
    ///   - date: When the request is signed; servers refuse signatures more than 15 minutes off.
    public func sign(
        method: String,
        path: String,
        query: [(name: String, value: String)] = [],
        headers: [(name: String, value: String)],
        payloadHash: String,
        date: Timestamp
    ) -> Signature {
        let amzDate = Self.amzDate(date)
        var headers = headers
        if !headers.contains(where: { $0.name.lowercased() == "x-amz-date" }) {
            headers.append(("x-amz-date", amzDate))
        }
        if let token = credentials.sessionToken, !headers.contains(where: { $0.name.lowercased() == "x-amz-security-token" }) {
            headers.append(("x-amz-security-token", token))
        }

        let canonicalHeaders = Self.canonicalHeaders(headers)
        let signedHeaders = canonicalHeaders.map(\.name).joined(separator: ";")
        let canonicalRequest = [
            method,
            canonicalURI(path),
            Self.canonicalQuery(query),
            canonicalHeaders.map { "\($0.name):\($0.value)\n" }.joined(),
            signedHeaders,
            payloadHash,
        ].joined(separator: "\n")

        let day = String(amzDate.prefix(8))
        let scope = "\(day)/\(region)/\(service)/aws4_request"
        let stringToSign = [
            "AWS4-HMAC-SHA256",
            amzDate,
            scope,
            Hex.encode(SHA256.hash(data: Array(canonicalRequest.utf8))),
        ].joined(separator: "\n")

        let signature = Hex.encode(HMAC<SHA256>.authenticationCode(for: Array(stringToSign.utf8), using: signingKey(day: day)))
        let authorization =
            "AWS4-HMAC-SHA256 Credential=\(credentials.accessKeyID)/\(scope), SignedHeaders=\(signedHeaders), Signature=\(signature)"
        return Signature(canonicalRequest: canonicalRequest, stringToSign: stringToSign, authorization: authorization, headers: headers)
    }

    /// The key that signs requests of one day: HMACs of the date, region, service and `aws4_request`.
    func signingKey(day: String) -> SymmetricKey {
        func hmac(_ key: SymmetricKey, _ data: String) -> SymmetricKey {
            SymmetricKey(data: HMAC<SHA256>.authenticationCode(for: Array(data.utf8), using: key))
        }
        let secret = SymmetricKey(data: Array("AWS4\(credentials.secretAccessKey)".utf8))
        return hmac(hmac(hmac(hmac(secret, day), region), service), "aws4_request")
    }

    // MARK: - Canonical forms

    /// The path for signing: as sent for S3; otherwise normalized and encoded a second time.
    func canonicalURI(_ path: String) -> String {
        guard !path.isEmpty else { return "/" }
        guard normalizesPath else { return path }
        var segments: [Substring] = []
        for segment in path.split(separator: "/", omittingEmptySubsequences: true) {
            switch segment {
            case ".": continue
            case "..": _ = segments.popLast()
            default: segments.append(segment)
            }
        }
        let trailingSlash = path.hasSuffix("/") && !segments.isEmpty
        return "/" + segments.map { percentEncoded($0, keeping: .unreserved) }.joined(separator: "/") + (trailingSlash ? "/" : "")
    }

    /// `name=value` pairs, each encoded, sorted by name then value, joined by `&`.
    static func canonicalQuery(_ query: [(name: String, value: String)]) -> String {
        query.map { (name: percentEncoded($0.name, keeping: .unreserved), value: percentEncoded($0.value, keeping: .unreserved)) }
            .sorted { $0.name == $1.name ? $0.value < $1.value : $0.name < $1.name }
            .map { "\($0.name)=\($0.value)" }
            .joined(separator: "&")
    }

    /// Lower-cased names sorted; values trimmed with inner runs of spaces collapsed; repeated names joined by commas.
    static func canonicalHeaders(_ headers: [(name: String, value: String)]) -> [(name: String, value: String)] {
        var merged: [String: [String]] = [:]
        for (name, value) in headers {
            merged[name.lowercased(), default: []].append(collapsingSpaces(value))
        }
        return merged.keys.sorted().map { ($0, merged[$0]!.joined(separator: ",")) }
    }

    private static func collapsingSpaces(_ value: String) -> String {
        value.split(whereSeparator: { $0 == " " || $0 == "\t" }).joined(separator: " ")
    }

    /// `YYYYMMDDTHHMMSSZ` in UTC, the form of `x-amz-date`.
    public static func amzDate(_ date: Timestamp) -> String {
        // RFC 3339 `YYYY-MM-DDTHH:MM:SS.SSSZ` with the separators and the fraction left out.
        let rfc3339 = Array(date.rfc3339.utf8)
        let picked = rfc3339[0..<4] + rfc3339[5..<7] + rfc3339[8..<13] + rfc3339[14..<16] + rfc3339[17..<19] + [UInt8(ascii: "Z")]
        return String(decoding: picked, as: UTF8.self)
    }

}
