import Foundation
import Logging
import MicroHTTP

/// One `herald serve` option: its flag, its `HERALD_*` variable, its help line, and how a value is taken.
///
/// ``HeraldConfiguration/options`` lists them all: `herald serve` parses flags and the environment through it, its
/// `--help` is written from it, and a test checks the README's option table against it. The defaults are
/// ``HeraldConfiguration``'s own.
public struct ServeOption: Sendable {
    /// The flag without its dashes: `workers` for `--workers`.
    public let name: String
    /// What the option does, for `--help`.
    public let help: String
    /// The default as `--help` and the README show it; nil when there is none.
    public let defaultText: String?
    /// A switch (`--webhook-allow-private`) takes no value; its variable takes `1`, `true`, `yes`, `on` or their opposites.
    public let isSwitch: Bool
    private let parse: @Sendable (inout HeraldConfiguration, String) throws(ConfigurationError) -> Void

    /// The environment variable read when the flag is not given: `HERALD_` and the name in capitals, unless the
    /// contract names another (``variable(_:)``).
    public var variable: String { namedVariable ?? "HERALD_" + name.uppercased().replacing("-", with: "_") }
    private var namedVariable: String? = nil

    /// This option, read from the variable `name` (`HERALD_DATABASE_URL`, as the contract spells it).
    func variable(_ name: String) -> ServeOption {
        var option = self
        option.namedVariable = name
        return option
    }

    /// Sets the option's value, given as `text` by `source` (`--workers`, `HERALD_WORKERS`), in `configuration`.
    func apply(_ text: String, from source: String, to configuration: inout HeraldConfiguration) throws(ConfigurationError) {
        do {
            try parse(&configuration, text)
        } catch {
            throw ConfigurationError("\(source) \(error.description)")
        }
    }

    /// The configuration's defaults, which the options show.
    private static let defaults = HeraldConfiguration()

    /// An integer of at least `minimum` (and at most `maximum`).
    static func integer(
        _ name: String, _ keyPath: any WritableKeyPath<HeraldConfiguration, Int> & Sendable, minimum: Int, maximum: Int = .max,
        unit: String = "", help: String
    ) -> ServeOption {
        ServeOption(name: name, help: help, defaultText: "\(defaults[keyPath: keyPath])", isSwitch: false) {
            configuration, text throws(ConfigurationError) in
            guard let value = Int(text) else { throw ConfigurationError("'\(text)' is not an integer") }
            guard value >= minimum, value <= maximum else {
                throw ConfigurationError(
                    maximum == .max ? "must be at least \(minimum), not \(value)" : "must be \(minimum) to \(maximum), not \(value)")
            }
            configuration[keyPath: keyPath] = value
        }
    }

    /// Any text; `defaultText` for an optional one, which has no default of the configuration's.
    static func text(
        _ name: String, _ keyPath: any WritableKeyPath<HeraldConfiguration, String> & Sendable, help: String
    ) -> ServeOption {
        ServeOption(name: name, help: help, defaultText: defaults[keyPath: keyPath], isSwitch: false) {
            configuration, text throws(ConfigurationError) in configuration[keyPath: keyPath] = text
        }
    }

    /// Text that is absent by default; `defaultText` says what absent means.
    static func optionalText(
        _ name: String, _ keyPath: any WritableKeyPath<HeraldConfiguration, String?> & Sendable, defaultText: String? = nil, help: String
    ) -> ServeOption {
        ServeOption(name: name, help: help, defaultText: defaultText, isSwitch: false) {
            configuration, text throws(ConfigurationError) in configuration[keyPath: keyPath] = text
        }
    }

    /// One of an enumeration's names, in any case.
    static func choice<Value: RawRepresentable & CaseIterable & Sendable>(
        _ name: String, _ keyPath: any WritableKeyPath<HeraldConfiguration, Value> & Sendable, help: String
    ) -> ServeOption where Value.RawValue == String {
        ServeOption(name: name, help: help, defaultText: defaults[keyPath: keyPath].rawValue, isSwitch: false) {
            configuration, text throws(ConfigurationError) in
            guard let value = Value(rawValue: text.lowercased()) else {
                throw ConfigurationError("'\(text)' is not one of \(Value.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            configuration[keyPath: keyPath] = value
        }
    }

    /// On when the flag is given, or its variable says so.
    static func onOff(_ name: String, _ keyPath: any WritableKeyPath<HeraldConfiguration, Bool> & Sendable, help: String) -> ServeOption {
        ServeOption(name: name, help: help, defaultText: defaults[keyPath: keyPath] ? "on" : "off", isSwitch: true) {
            configuration, text throws(ConfigurationError) in
            switch text.lowercased() {
            case "1", "true", "yes", "on": configuration[keyPath: keyPath] = true
            case "0", "false", "no", "off": configuration[keyPath: keyPath] = false
            default: throw ConfigurationError("'\(text)' is not 1/true/yes/on or 0/false/no/off")
            }
        }
    }

    /// A custom value, parsed by `parse`.
    static func custom(
        _ name: String, defaultText: String?, help: String,
        _ parse: @escaping @Sendable (inout HeraldConfiguration, String) throws(ConfigurationError) -> Void
    ) -> ServeOption {
        ServeOption(name: name, help: help, defaultText: defaultText, isSwitch: false, parse: parse)
    }
}

extension HeraldConfiguration {
    /// Every `herald serve` option, in the order `--help` and the README list them.
    public static let options: [ServeOption] = [
        .text("host", \.host, help: "Address to listen on."),
        .integer("port", \.port, minimum: 0, maximum: 65535, help: "Port to listen on; 0 picks a free one."),
        .text("data-dir", \.dataDirectory, help: "Database and staging files (with --database: this replica's lock and temporary files)."),
        .optionalText(
            "database", \.database, defaultText: "SQLite in <data-dir>",
            help: "postgres://USER[:PASSWORD]@HOST[:PORT]/DB[?sslmode=disable|prefer|require]: the rows in PostgreSQL, for replicas."
        ).variable("HERALD_DATABASE_URL"),
        .integer(
            "database-pool", \.databasePool, minimum: 1, maximum: 100,
            help: "Pooled connections to PostgreSQL per replica, besides 5 of its own: keep replicas x (pool + 5) under its max_connections."),
        .custom("replica-id", defaultText: "HOST-PID", help: "This replica's name: the runner of the jobs it runs.") {
            configuration, text throws(ConfigurationError) in
            guard !text.isEmpty, text.count <= 200 else { throw ConfigurationError("must be 1 to 200 characters") }
            configuration.replicaID = text
        },
        .integer("lease-timeout", \.leaseTimeout, minimum: 2, help: "Seconds a running job's lease lasts unrenewed before another replica takes it."),
        .integer("lease-renew", \.leaseRenew, minimum: 1, help: "Seconds between a replica's renewals of its running jobs' leases."),
        .optionalText(
            "store", \.store, defaultText: "file://<data-dir>/objects",
            help: """
                Media store: file://PATH, or s3://BUCKET?endpoint=http://HOST:PORT&region=REGION (path-style, signed with \
                AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN).
                """),
        .optionalText("public-base-url", \.publicBaseURL, help: "Base URL for media URLs instead of the store's own."),
        .integer("workers", \.workers, minimum: 1, help: "Jobs running at once."),
        .integer(
            "tenant-concurrency", \.tenantConcurrency, minimum: 0,
            help: "Most jobs of one tenant running at once, over every replica; 0: no cap (tenants still take turns)."),
        .integer("upload-concurrency", \.uploadConcurrency, minimum: 1, help: "Uploads at once within one job."),
        .integer("upload-attempts", \.uploadAttempts, minimum: 1, help: "Tries per upload for transient errors."),
        .integer("upload-timeout", \.uploadTimeout, minimum: 1, help: "Seconds per upload attempt."),
        .integer("max-media-bytes", \.maxMediaBytes, minimum: 1, help: "Largest media body in bytes."),
        .integer("max-media-per-post", \.maxMediaPerPost, minimum: 1, help: "Media per post."),
        .integer("shutdown-grace", \.shutdownGrace, minimum: 0, help: "Seconds running jobs get on shutdown."),
        .choice("log-level", \.logLevel, help: "trace, debug, info, notice, warning, error or critical."),
        .choice("log-format", \.logFormat, help: "text, or json for one JSON object a line."),
        .integer("http-threads", \.httpThreads, minimum: 1, help: "libmicrohttpd polling threads."),
        .integer(
            "max-connections", \.maxConnections, minimum: 1, help: "Open connections at most; past it an idle one is closed for a new one."),
        .integer("max-connections-per-ip", \.maxConnectionsPerIP, minimum: 1, help: "Open connections per client address."),
        .integer(
            "connection-timeout", \.connectionTimeout, minimum: 1,
            help: "Idle seconds before a connection is closed; also the time a whole head may take."),
        .choice("auth", \.auth, help: "keys: /v1/ calls need an API key; off: none (loopback hosts only)."),
        .integer("rate-limit", \.rateLimit, minimum: 0, help: "Requests a second per key, burst twice that; 0: no limit."),
        .integer(
            "auth-failure-limit", \.authFailureLimit, minimum: 0, help: "Failed authentications a minute per client address; 0: no limit."),
        .optionalText("tls-cert", \.tlsCertificatePath, help: "PEM certificate chain: serve HTTPS (with --tls-key)."),
        .optionalText("tls-key", \.tlsKeyPath, help: "PEM private key of --tls-cert."),
        .custom("trusted-proxies", defaultText: nil, help: "Comma-separated CIDRs of proxies whose X-Forwarded-For names the client.") {
            configuration, text throws(ConfigurationError) in
            configuration.trustedProxies = try text.split(separator: ",").map { item throws(ConfigurationError) in
                let range = item.trimmingCharacters(in: .whitespaces)
                guard let parsed = AddressRange(range) else { throw ConfigurationError("'\(range)' is not an address or CIDR") }
                return parsed
            }
        },
        .integer(
            "staged-media-ttl", \.stagedMediaTTL, minimum: 1,
            help: "Seconds an uploaded medium that no post uses is kept, and an incomplete resumable upload."),
        .integer("max-streams", \.maxStreams, minimum: 1, help: "Server-Sent Events streams open at once; more get 503."),
        .integer("webhook-timeout", \.webhookTimeout, minimum: 1, help: "Seconds a webhook attempt may take; a 2xx within it delivers."),
        .integer("webhook-attempts", \.webhookAttempts, minimum: 1, help: "Attempts before a webhook delivery fails for good."),
        .onOff("webhook-allow-private", \.webhookAllowPrivate, help: "Let webhook URLs reach loopback, private and link-local addresses."),
        .integer(
            "min-free-disk", \.minFreeDisk, minimum: 0,
            help:
                "Bytes kept free on the disk that holds staged uploads (the data directory's; with --database, a file:// store's); uploads that would use them get 507."
        ),
        .custom(
            "otlp-endpoint", defaultText: "unset: no tracing",
            help: "OTLP/HTTP collector (http://HOST:4318): every request, job, upload and webhook delivery traced to URL/v1/traces."
        ) { configuration, text throws(ConfigurationError) in
            guard text.hasPrefix("http://") || text.hasPrefix("https://") else { throw ConfigurationError("must be an http:// or https:// URL") }
            configuration.otlpEndpoint = text
        }.variable("OTEL_EXPORTER_OTLP_ENDPOINT"),
    ]

    /// The configuration `arguments` (flags: `--name value`, `--name=value`, a switch alone) and `environment` give:
    /// a flag wins over its variable, a variable over the default. Empty variables count as unset.
    public static func resolve(arguments: [String], environment: [String: String]) throws(ConfigurationError) -> HeraldConfiguration {
        var configuration = HeraldConfiguration()
        var given: [String: String] = [:]
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            guard argument.hasPrefix("--") else { throw ConfigurationError("unexpected argument '\(argument)'") }
            let (name, inline) = split(argument.dropFirst(2))
            guard let option = options.first(where: { $0.name == name }) else { throw ConfigurationError("unknown option '--\(name)'") }
            guard given[name] == nil else { throw ConfigurationError("--\(name) is given twice") }
            if option.isSwitch {
                given[name] = inline ?? "on"
            } else if let inline {
                given[name] = inline
            } else {
                guard index < arguments.count else { throw ConfigurationError("--\(name) needs a value") }
                given[name] = arguments[index]
                index += 1
            }
        }
        for option in options {
            if let text = given[option.name] {
                try option.apply(text, from: "--\(option.name)", to: &configuration)
            } else if let text = environment[option.variable], !text.isEmpty {
                try option.apply(text, from: option.variable, to: &configuration)
            }
        }
        guard configuration.leaseRenew < configuration.leaseTimeout else {
            throw ConfigurationError(
                "--lease-renew (\(configuration.leaseRenew)) must be shorter than --lease-timeout (\(configuration.leaseTimeout)): a lease would end before its renewal"
            )
        }
        return configuration
    }

    /// `name=value` into its parts; the value is nil without `=`.
    private static func split(_ flag: Substring) -> (String, String?) {
        guard let equals = flag.firstIndex(of: "=") else { return (String(flag), nil) }
        return (String(flag[..<equals]), String(flag[flag.index(after: equals)...]))
    }

    /// `herald serve --help`'s list: each option with its help, variable and default, in lines of at most 79
    /// characters (the argument parser wraps longer ones without their indent).
    public static var optionsHelp: String {
        options.map { option in
            let flag = option.isSwitch ? "--\(option.name)" : "--\(option.name) <value>"
            let fallback = option.defaultText.map { ", default \($0)" } ?? ""
            var lines = ["  \(flag)"]
            for word in "\(option.help) [\(option.variable)\(fallback)]".split(separator: " ") {
                if lines.count > 1, lines[lines.count - 1].count + 1 + word.count <= 79 {
                    lines[lines.count - 1] += " " + word
                } else {
                    lines.append("        " + word)
                }
            }
            return lines.joined(separator: "\n")
        }.joined(separator: "\n")
    }
}
