/// Where an ``S3MediaStore`` puts objects: the bucket, the endpoint, the region and the key to sign with.
///
/// Written on the command line as `s3://BUCKET?endpoint=http://HOST:PORT&region=REGION`: path-style
/// addressing (`{endpoint}/{bucket}/{key}`), which every S3-compatible server (MinIO, Ceph, R2, moto) and
/// AWS itself accept. Without `endpoint`, AWS's regional endpoint is used; without `region`, `us-east-1`.
public struct S3Configuration: Sendable, Hashable {
    /// The endpoint's scheme, `http` or `https`.
    public var scheme: String
    /// The endpoint's host, lower-cased.
    public var host: String
    /// The endpoint's port when written out (`nil` for the scheme's default).
    public var port: Int?
    public var bucket: String
    public var region: String
    public var credentials: SigV4Signer.Credentials
    /// When set, object URLs are `publicBaseURL/KEY` instead of `{endpoint}/{bucket}/KEY`.
    public var publicBaseURL: String?

    public init(
        scheme: String = "https",
        host: String,
        port: Int? = nil,
        bucket: String,
        region: String = "us-east-1",
        credentials: SigV4Signer.Credentials,
        publicBaseURL: String? = nil
    ) {
        self.scheme = scheme
        self.host = host.lowercased()
        self.port = port
        self.bucket = bucket
        self.region = region
        self.credentials = credentials
        self.publicBaseURL = publicBaseURL.map { String($0.reversed().drop(while: { $0 == "/" }).reversed()) }.flatMap {
            $0.isEmpty ? nil : $0
        }
    }

    /// Parses `s3://BUCKET?endpoint=URL&region=REGION`; the error says what is wrong and how it should look.
    public init(url: String, credentials: SigV4Signer.Credentials, publicBaseURL: String? = nil) throws(S3ConfigurationError) {
        let form = "s3://BUCKET?endpoint=http://HOST:PORT&region=REGION"
        guard url.hasPrefix("s3://") else {
            throw S3ConfigurationError("'\(url)' is not an S3 store URL: expected \(form)")
        }
        let rest = url.dropFirst("s3://".count)
        let bucket = String(rest.prefix { $0 != "?" && $0 != "/" })
        guard Self.isValidBucket(bucket) else {
            throw S3ConfigurationError(
                "'\(bucket)' is not a valid bucket name (3 to 63 lower-case letters, digits, '.' and '-'): expected \(form)"
            )
        }
        var remainder = rest.dropFirst(bucket.count)
        if remainder.first == "/" { remainder = remainder.drop { $0 == "/" } }
        if !remainder.isEmpty && remainder.first != "?" {
            throw S3ConfigurationError("'\(url)' has a path after the bucket; keys are chosen by Herald: expected \(form)")
        }
        var endpoint: String?
        var region = "us-east-1"
        for pair in remainder.dropFirst().split(separator: "&") {
            let name = pair.prefix { $0 != "=" }
            let value = Self.percentDecoded(pair.dropFirst(name.count + 1))
            switch name {
            case "endpoint": endpoint = value
            case "region": region = value
            default: throw S3ConfigurationError("unknown parameter '\(name)' in '\(url)': expected \(form)")
            }
        }
        guard !region.isEmpty, region.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" }) else {
            throw S3ConfigurationError("'\(region)' is not a valid region, such as us-east-1")
        }

        let endpointURL = endpoint ?? "https://s3.\(region).amazonaws.com"
        let scheme = String(endpointURL.prefix { $0 != ":" }).lowercased()
        guard scheme == "http" || scheme == "https", endpointURL.dropFirst(scheme.count).hasPrefix("://") else {
            throw S3ConfigurationError("endpoint '\(endpointURL)' must start with http:// or https://")
        }
        let authority = endpointURL.dropFirst(scheme.count + 3).prefix { $0 != "/" }
        guard endpointURL.dropFirst(scheme.count + 3 + authority.count).allSatisfy({ $0 == "/" }) else {
            throw S3ConfigurationError("endpoint '\(endpointURL)' must not have a path: path-style addressing adds /BUCKET/KEY")
        }
        let host: Substring
        var port: Int?
        if let colon = authority.lastIndex(of: ":"), !authority.hasSuffix("]") {
            host = authority[..<colon]
            guard let number = Int(authority[authority.index(after: colon)...]), (1...65535).contains(number) else {
                throw S3ConfigurationError("endpoint '\(endpointURL)' has an invalid port")
            }
            port = number
        } else {
            host = authority
        }
        guard !host.isEmpty, !host.contains("@") else {
            throw S3ConfigurationError("endpoint '\(endpointURL)' has no host (or has credentials in it: use AWS_ACCESS_KEY_ID)")
        }
        self.init(
            scheme: scheme,
            host: String(host),
            port: port,
            bucket: bucket,
            region: region,
            credentials: credentials,
            publicBaseURL: publicBaseURL
        )
    }

    /// `scheme://host[:port]`, as written.
    public var endpoint: String {
        "\(scheme)://\(hostHeader)"
    }

    /// The `Host` header: the host, with the port when one was written.
    var hostHeader: String {
        port.map { "\(host):\($0)" } ?? host
    }

    /// S3's rules for new buckets, which path-style URLs also need.
    static func isValidBucket(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        guard (3...63).contains(bytes.count) else { return false }
        let allowed = bytes.allSatisfy { byte in
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
                || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "-")
        }
        let edges = [bytes.first!, bytes.last!].allSatisfy { $0 != UInt8(ascii: ".") && $0 != UInt8(ascii: "-") }
        return allowed && edges
    }

    private static func percentDecoded(_ text: Substring) -> String {
        var bytes: [UInt8] = []
        var iterator = Array(text.utf8).makeIterator()
        while let byte = iterator.next() {
            if byte == UInt8(ascii: "%"), let high = iterator.next(), let low = iterator.next(),
                let value = UInt8(String(decoding: [high, low], as: UTF8.self), radix: 16)
            {
                bytes.append(value)
            } else {
                bytes.append(byte)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// An `s3://` store URL that cannot be used; the description says why and what is expected.
public struct S3ConfigurationError: Error, Hashable, CustomStringConvertible {
    public let description: String

    init(_ description: String) {
        self.description = description
    }
}
