import Publishing
import Testing

/// Parsing `--store s3://BUCKET?endpoint=URL&region=REGION`: what is taken, and what each mistake is told.
@Suite("S3Configuration from a store URL")
struct S3ConfigurationTests {
    static let credentials = SigV4Signer.Credentials(accessKeyID: "AKID", secretAccessKey: "secret")

    static func parse(_ url: String) throws(S3ConfigurationError) -> S3Configuration {
        try S3Configuration(url: url, credentials: credentials)
    }

    @Test("takes the bucket, the endpoint's scheme, host and port, and the region")
    func endpointAndRegion() throws {
        let configuration = try Self.parse("s3://herald-media?endpoint=http://127.0.0.1:9000&region=eu-west-1")
        #expect(configuration.bucket == "herald-media")
        #expect(configuration.scheme == "http")
        #expect(configuration.host == "127.0.0.1")
        #expect(configuration.port == 9000)
        #expect(configuration.region == "eu-west-1")
        #expect(configuration.endpoint == "http://127.0.0.1:9000")
    }

    @Test("defaults: AWS's regional endpoint, us-east-1; a trailing slash after the bucket or the endpoint is fine")
    func defaults() throws {
        let bare = try Self.parse("s3://herald-media")
        #expect(bare.region == "us-east-1")
        #expect(bare.endpoint == "https://s3.us-east-1.amazonaws.com")
        #expect(bare.port == nil)
        let regional = try Self.parse("s3://herald-media/?region=ap-south-1")
        #expect(regional.endpoint == "https://s3.ap-south-1.amazonaws.com")
        let slashed = try Self.parse("s3://herald-media?endpoint=https://S3.Example.com/")
        #expect(slashed.host == "s3.example.com")
        #expect(slashed.scheme == "https")
        #expect(slashed.port == nil)
    }

    @Test("query values may be percent-encoded, in any order")
    func percentEncodedValues() throws {
        let configuration = try Self.parse("s3://herald-media?region=us-west-2&endpoint=http%3A%2F%2Fminio.local%3A9000")
        #expect(configuration.endpoint == "http://minio.local:9000")
        #expect(configuration.region == "us-west-2")
    }

    @Test("an IPv6 endpoint keeps its brackets, with or without a port")
    func ipv6() throws {
        let withPort = try Self.parse("s3://herald-media?endpoint=http://[::1]:9000")
        #expect(withPort.host == "[::1]")
        #expect(withPort.port == 9000)
        #expect(withPort.endpoint == "http://[::1]:9000")
        let withoutPort = try Self.parse("s3://herald-media?endpoint=http://[::1]")
        #expect(withoutPort.endpoint == "http://[::1]")
    }

    @Test(
        "refuses what it cannot use, saying what is wrong",
        arguments: [
            ("file:///tmp", "is not an S3 store URL"),
            ("s3://", "is not a valid bucket name"),
            ("s3://Herald_Media?region=us-east-1", "is not a valid bucket name"),
            ("s3://ab", "is not a valid bucket name"),
            ("s3://-herald", "is not a valid bucket name"),
            ("s3://herald-media/media/x.png", "has a path after the bucket"),
            ("s3://herald-media?bucket=other", "unknown parameter 'bucket'"),
            ("s3://herald-media?region=", "is not a valid region"),
            ("s3://herald-media?region=us_east", "is not a valid region"),
            ("s3://herald-media?endpoint=ftp://host", "must start with http:// or https://"),
            ("s3://herald-media?endpoint=127.0.0.1:9000", "must start with http:// or https://"),
            ("s3://herald-media?endpoint=http://host:9000/prefix", "must not have a path"),
            ("s3://herald-media?endpoint=http://host:0", "has an invalid port"),
            ("s3://herald-media?endpoint=http://host:99999", "has an invalid port"),
            ("s3://herald-media?endpoint=http://host:port", "is not a valid URL"),
            ("s3://herald-media?endpoint=http://host:9000?x=1", "must not have a query"),
            ("s3://herald-media?region=us-east-1&region=eu-west-1", "given twice"),
            ("s3://user@herald-media", "has a user, port or fragment"),
            ("s3://herald-media?endpoint=http://", "has no host"),
            ("s3://herald-media?endpoint=http://user:pass@host", "has credentials in it"),
        ]
    )
    func refuses(url: String, reason: String) {
        #expect {
            try Self.parse(url)
        } throws: { error in
            let description = (error as? S3ConfigurationError)?.description ?? ""
            return description.contains(reason)
        }
    }
}
