// swift-tools-version:6.2
import PackageDescription

/// One set of settings for every target of Herald's, as Hummingbird does.
let swiftSettings: [SwiftSetting] = [
    // https://github.com/apple/swift-evolution/blob/main/proposals/0335-existential-any.md
    .enableUpcomingFeature("ExistentialAny"),
    // https://github.com/swiftlang/swift-evolution/blob/main/proposals/0444-member-import-visibility.md
    .enableUpcomingFeature("MemberImportVisibility"),
    // Each function in a section of its own, so that the linker can place the ones a status poll runs side by side
    // (a frontend flag: the driver would warn that it does not know it).
    .unsafeFlags(["-Xfrontend", "-function-sections"], .when(platforms: [.linux], configuration: .release)),
]

/// The order the functions a status poll runs are linked in (gold's `--section-ordering-file`), hottest first, written
/// by `make layout` from a callgrind run of the polls: their code on about 70 pages instead of 180, about 4% more polls
/// a second on this machine (BENCHMARKS.md). Each function under the three names the profile may give its section
/// (`.text.hot.`, `.text.`, `.text.unlikely.`). A function the list no longer names (renamed, gone) is linked where it
/// would be anyway: a stale list costs speed, never correctness.
let hotFunctions = "\(Context.packageDirectory)/Sources/herald/hot-functions.txt"

let package = Package(
    name: "herald",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "herald", targets: ["herald"]),
        .library(name: "MicroHTTP", targets: ["MicroHTTP"]),
        // For the fuzz targets in Fuzz/, a package of their own.
        .library(name: "HeraldCore", targets: ["HeraldCore"]),
    ],
    traits: [
        .trait(
            name: "OTLP",
            description: """
                Traces exported over OTLP/HTTP by swift-otel (--otlp-endpoint). Without it the flag is refused: a smaller binary, \
                and a build that need not compile swift-otel (the ThreadSanitizer build cannot: Reliability/sanitizers.py).
                """),
        .default(enabledTraits: ["OTLP"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-crypto", from: "4.5.2"),
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.7.3"),
        .package(url: "https://github.com/apple/swift-http-types", from: "1.8.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.3"),
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/onevcat/Rainbow", from: "4.2.2"),
        .package(url: "https://github.com/vapor/console-kit", from: "4.16.2"),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        // OTLP over HTTP only: the gRPC exporter's dependencies would double the build for an option Herald does not offer.
        .package(url: "https://github.com/swift-otel/swift-otel", from: "1.6.0", traits: ["OTLPHTTP"]),
    ],
    targets: [
        // MARK: The C library

        /// libmicrohttpd, with shims for what Swift cannot call (variadic functions, va_list logging).
        .systemLibrary(
            name: "CMicroHTTPD",
            pkgConfig: "libmicrohttpd",
            providers: [.apt(["libmicrohttpd-dev"])]
        ),
        /// SQLite's process-wide settings, which Swift cannot set (`sqlite3_config` is variadic); GRDB's own module
        /// (`GRDBSQLite`) has the rest of the C API.
        .systemLibrary(
            name: "CSQLite",
            pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"])]
        ),

        // MARK: Libraries

        /// The system's C library (Glibc, Musl or Darwin), re-exported: one `import Platform` where a file calls it.
        .target(name: "Platform", swiftSettings: swiftSettings),
        /// `Synchronization.Mutex`'s stand-in in ThreadSanitizer builds (`-DHERALD_TSAN`), which TSan can see; empty otherwise.
        .target(name: "Locking", swiftSettings: swiftSettings),
        /// JSON string escaping and decimal numbers, one rule each for every text written by hand (responses, access log, problems).
        .target(name: "JSONText", swiftSettings: swiftSettings),

        /// What every traced part shares: a span's W3C `traceparent`, and the ids log lines carry.
        .target(
            name: "Telemetry",
            dependencies: [
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            swiftSettings: swiftSettings
        ),
        /// The HTTP server: libmicrohttpd driven from Swift concurrency. Knows nothing about posts.
        .target(
            name: "MicroHTTP",
            dependencies: [
                "JSONText",
                "Locking",
                "Platform",
                "Telemetry",
                "CMicroHTTPD",
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            swiftSettings: swiftSettings
        ),
        /// The domain: media, posts, jobs, their states and rules, and their JSON shapes. No HTTP, no SQL.
        .target(name: "HeraldCore", dependencies: ["JSONText", "Locking", "Platform"], swiftSettings: swiftSettings),
        /// Storage as protocols (the repositories, the status reader) and what every backend shares: the feed of
        /// committed changes, the uploads' live progress. No SQL.
        .target(
            name: "HeraldStorage",
            dependencies: ["Locking", "Platform", "HeraldCore", .product(name: "NIOPosix", package: "swift-nio")],
            swiftSettings: swiftSettings
        ),
        /// The SQLite backend through GRDB, the embedded default: the pool, the migrations in `Migrations/`, the
        /// repositories.
        .target(
            name: "SQLiteStorage",
            dependencies: [
                "CSQLite",
                "Locking",
                "Platform",
                "HeraldCore",
                "HeraldStorage",
                .product(name: "GRDB", package: "GRDB.swift"),
                // The SQLite C API, for the status poll's read (SQLiteJobStatusReader).
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
            ],
            swiftSettings: swiftSettings,
            plugins: ["EmbedFiles"]
        ),
        /// A file's bytes as a streamed request body, read off the cooperative pool: the S3 store's and the client's uploads.
        .target(
            name: "FileReading",
            dependencies: [
                "Platform",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        /// The PostgreSQL backend through postgres-nio, for replicas: the client (a Service), the migrations in
        /// `Migrations/PostgreSQL/`, the repositories, the change feed (LISTEN/NOTIFY).
        .target(
            name: "PostgresStorage",
            dependencies: [
                "Locking",
                "HeraldCore",
                "HeraldStorage",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings,
            plugins: ["EmbedFiles"]
        ),
        /// Publishing: the media stores (file, S3) and the job runner (a parent task per job, a task group of uploads).
        .target(
            name: "Publishing",
            dependencies: [
                "FileReading",
                "Locking",
                "Platform",
                "Telemetry",
                "HeraldCore",
                "HeraldStorage",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_NIOFileSystem", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            swiftSettings: swiftSettings
        ),
        /// Herald's HTTP API from the client's side (the `herald publish`, `jobs` and `posts` commands): uploads with
        /// progress, posts, jobs and their event streams.
        .target(
            name: "HeraldClient",
            dependencies: [
                "FileReading",
                "HeraldCore",
                "Platform",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        /// Herald itself: configuration, routes and handlers, the service group.
        .target(
            name: "HeraldApp",
            dependencies: [
                "FileReading",
                "Locking",
                "Platform",
                "MicroHTTP",
                "HeraldCore",
                "HeraldStorage",
                "PostgresStorage",
                "SQLiteStorage",
                "Publishing",
                "Telemetry",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "OTel", package: "swift-otel", condition: .when(traits: ["OTLP"])),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings,
            plugins: ["EmbedFiles"]
        ),

        // MARK: The executable

        .executableTarget(
            name: "herald",
            dependencies: [
                "HeraldApp",
                "Platform",
                "HeraldClient",
                "HeraldCore",
                "HeraldStorage",
                "SQLiteStorage",
                "MicroHTTP",
                "Publishing",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ConsoleKitTerminal", package: "console-kit"),
                .product(name: "Rainbow", package: "Rainbow"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            ],
            exclude: ["hot-functions.txt", "herald.profdata"],
            swiftSettings: swiftSettings,
            linkerSettings: [
                .unsafeFlags(["-Xlinker", "--section-ordering-file=\(hotFunctions)"], .when(platforms: [.linux], configuration: .release))
            ]
        ),

        // MARK: Build tooling

        /// Embeds `Migrations/*.sql` and `openapi.yaml` in the binary, so it runs from any directory.
        .plugin(name: "EmbedFiles", capability: .buildTool(), dependencies: ["EmbedFilesTool"]),
        .executableTarget(name: "EmbedFilesTool", swiftSettings: swiftSettings),

        // MARK: Tests

        /// What several test targets share: S3 servers to test against (moto, and a fake that misbehaves on demand).
        .target(
            name: "HeraldTestSupport",
            dependencies: [
                "Locking",
                "HeraldCore",
                "Publishing",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            path: "Tests/Support",
            exclude: ["moto_server.py", "otlp_receiver.py", "postgres_server.py", "tus_upload.py", "webhook_receiver.py"],
            swiftSettings: swiftSettings
        ),

        .testTarget(
            name: "MicroHTTPTests",
            dependencies: [
                "Locking",
                "MicroHTTP",
                "Platform",
                "Telemetry",
                "HeraldTestSupport",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(name: "HeraldClientTests", dependencies: ["HeraldClient", "HeraldCore"], swiftSettings: swiftSettings),
        .testTarget(
            name: "HeraldCoreTests", dependencies: ["HeraldCore", "HeraldTestSupport", "JSONText", "Platform"], swiftSettings: swiftSettings),
        .testTarget(
            name: "PublishingTests",
            dependencies: [
                "FileReading",
                "Locking",
                "Platform",
                "Publishing",
                "HeraldTestSupport",
                .product(name: "Crypto", package: "swift-crypto"),
                "HeraldCore",
                "HeraldStorage",
                "SQLiteStorage",
                .product(name: "_NIOFileSystem", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SQLiteStorageTests",
            dependencies: [
                "Locking",
                "HeraldStorage",
                "SQLiteStorage",
                "HeraldTestSupport",
                "HeraldCore",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "PostgresStorageTests",
            dependencies: [
                "HeraldCore",
                "HeraldStorage",
                "PostgresStorage",
                "HeraldTestSupport",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        /// The storage conformance suite: one set of tests, written against the protocols, run against every backend.
        .testTarget(
            name: "StorageConformanceTests",
            dependencies: [
                "HeraldCore",
                "HeraldStorage",
                "HeraldTestSupport",
                "PostgresStorage",
                "SQLiteStorage",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "HeraldAppTests",
            dependencies: [
                "Locking",
                "Platform",
                "HeraldApp",
                "HeraldTestSupport",
                "HeraldCore",
                "HeraldStorage",
                "PostgresStorage",
                "SQLiteStorage",
                .product(name: "GRDB", package: "GRDB.swift"),
                "MicroHTTP",
                "Publishing",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
    ]
)
