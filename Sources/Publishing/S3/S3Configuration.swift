#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

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
    ///
    /// Foundation's `URLComponents` splits both URLs and percent-decodes the query values, so an endpoint may be
    /// written as is (`endpoint=http://HOST:PORT`) or encoded (`endpoint=http%3A%2F%2FHOST%3APORT`).
    public init(url: String, credentials: SigV4Signer.Credentials, publicBaseURL: String? = nil) throws(S3ConfigurationError) {
        let form = "s3://BUCKET?endpoint=http://HOST:PORT&region=REGION"
        guard url.hasPrefix("s3://") else {
            throw S3ConfigurationError("'\(url)' is not an S3 store URL: expected \(form)")
        }
        guard let components = URLComponents(string: url) else {
            throw S3ConfigurationError("'\(url)' is not a valid URL: expected \(form)")
        }
        let bucket = components.host ?? ""
        guard Self.isValidBucket(bucket) else {
            throw S3ConfigurationError(
                "'\(bucket)' is not a valid bucket name (3 to 63 lower-case letters, digits, '.' and '-'): expected \(form)"
            )
        }
        guard components.path.allSatisfy({ $0 == "/" }) else {
            throw S3ConfigurationError("'\(url)' has a path after the bucket; keys are chosen by Herald: expected \(form)")
        }
        guard components.user == nil, components.password == nil, components.port == nil, components.fragment == nil else {
            throw S3ConfigurationError("'\(url)' has a user, port or fragment around the bucket: expected \(form)")
        }
        var endpoint: String?
        var region = "us-east-1"
        var seen: Set<String> = []
        // `a&&b` holds an empty item between the two; nothing was written there.
        for item in components.queryItems ?? [] where !(item.name.isEmpty && item.value == nil) {
            guard seen.insert(item.name).inserted else {
                throw S3ConfigurationError("parameter '\(item.name)' is given twice in '\(url)': expected \(form)")
            }
            switch item.name {
            case "endpoint": endpoint = item.value ?? ""
            case "region": region = item.value ?? ""
            default: throw S3ConfigurationError("unknown parameter '\(item.name)' in '\(url)': expected \(form)")
            }
        }
        guard !region.isEmpty, region.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" }) else {
            throw S3ConfigurationError("'\(region)' is not a valid region, such as us-east-1")
        }
        let endpointURL = endpoint ?? "https://s3.\(region).amazonaws.com"
        let (scheme, host, port) = try Self.parseEndpoint(endpointURL)
        self.init(
            scheme: scheme,
            host: host,
            port: port,
            bucket: bucket,
            region: region,
            credentials: credentials,
            publicBaseURL: publicBaseURL
        )
    }

    /// The scheme, host (IPv6 in brackets) and port of `http[s]://HOST[:PORT]`, which must be nothing more.
    private static func parseEndpoint(_ endpoint: String) throws(S3ConfigurationError) -> (scheme: String, host: String, port: Int?) {
        let lowered = endpoint.lowercased()
        guard lowered.hasPrefix("http://") || lowered.hasPrefix("https://") else {
            throw S3ConfigurationError("endpoint '\(endpoint)' must start with http:// or https://")
        }
        guard let components = URLComponents(string: endpoint), let scheme = components.scheme?.lowercased() else {
            throw S3ConfigurationError("endpoint '\(endpoint)' is not a valid URL: expected http://HOST[:PORT]")
        }
        guard components.user == nil, components.password == nil else {
            throw S3ConfigurationError("endpoint '\(endpoint)' has credentials in it: use AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
        }
        guard let host = components.encodedHost, !host.isEmpty else {
            throw S3ConfigurationError("endpoint '\(endpoint)' has no host")
        }
        if let port = components.port, !(1...65535).contains(port) {
            throw S3ConfigurationError("endpoint '\(endpoint)' has an invalid port (1 to 65535)")
        }
        guard components.path.allSatisfy({ $0 == "/" }) else {
            throw S3ConfigurationError("endpoint '\(endpoint)' must not have a path: path-style addressing adds /BUCKET/KEY")
        }
        guard components.query == nil, components.fragment == nil else {
            throw S3ConfigurationError("endpoint '\(endpoint)' must not have a query or fragment: expected http://HOST[:PORT]")
        }
        return (scheme, host, components.port)
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
}

/// An `s3://` store URL that cannot be used; the description says why and what is expected.
public struct S3ConfigurationError: Error, Hashable, CustomStringConvertible {
    public let description: String

    init(_ description: String) {
        self.description = description
    }
}
