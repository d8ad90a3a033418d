// swift-tools-version:6.2
import PackageDescription

/// libFuzzer targets for the code that parses untrusted bytes: a package of its own, so Herald's builds never see it.
///
/// Build and run them with `Fuzz/run.sh` (it passes `--sanitize=fuzzer -Xswiftc -sanitize=fuzzer,address`; without
/// libFuzzer the targets have no `main` and do not link). Internal declarations are reached through `@testable import`,
/// which debug builds allow, and `route` calls libmicrohttpd through Herald's `CMicroHTTPD` module, which MicroHTTP brings.
let package = Package(
    name: "HeraldFuzz",
    platforms: [.macOS(.v15)],
    dependencies: [
        // Named, so that the product references below hold whatever the checkout's folder is called.
        .package(name: "herald", path: ".."),
        // Herald's own dependencies, at its versions: the harness names their types too.
        .package(url: "https://github.com/apple/swift-http-types", from: "1.8.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
    ],
    targets: [
        .target(
            name: "FuzzSupport",
            dependencies: [.product(name: "MicroHTTP", package: "herald"), .product(name: "Logging", package: "swift-log")]
        ),
        .executableTarget(
            name: "route",
            dependencies: [
                "FuzzSupport",
                .product(name: "MicroHTTP", package: "herald"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
            ]
        ),
        .executableTarget(
            name: "query",
            dependencies: ["FuzzSupport", .product(name: "MicroHTTP", package: "herald"), .product(name: "HeraldCore", package: "herald")]
        ),
        .executableTarget(name: "multipart", dependencies: ["FuzzSupport", .product(name: "MicroHTTP", package: "herald")]),
        .executableTarget(
            name: "headers",
            dependencies: [
                "FuzzSupport",
                .product(name: "MicroHTTP", package: "herald"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
            ]
        ),
        .executableTarget(name: "draft", dependencies: ["FuzzSupport", .product(name: "HeraldCore", package: "herald")]),
        .executableTarget(name: "cursor", dependencies: ["FuzzSupport", .product(name: "HeraldCore", package: "herald")]),
        .executableTarget(name: "media", dependencies: ["FuzzSupport", .product(name: "HeraldCore", package: "herald")]),
        .executableTarget(name: "idempotency", dependencies: ["FuzzSupport", .product(name: "HeraldCore", package: "herald")]),
        .executableTarget(name: "tus", dependencies: ["FuzzSupport", .product(name: "HeraldCore", package: "herald")]),
    ]
)
