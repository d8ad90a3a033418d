import ArgumentParser
import AsyncHTTPClient
import CoreMetrics
import Foundation
import HeraldApp
import HeraldCore
import Logging
import MicroHTTP
import NIOCore
import NIOHTTP1
import NIOSSL
import Prometheus
import Publishing

@main
struct HeraldCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "herald",
        abstract: "Herald: uploads media and publishes posts, each publish a job you can watch and cancel.",
        version: HeraldConfiguration.version,
        subcommands: [Serve.self, Publish.self, Jobs.self, Posts.self, Keys.self, Backup.self, Check.self, Healthcheck.self, StatusStatement.self],
        defaultSubcommand: Serve.self
    )
}

/// `herald serve`: every flag also reads a `HERALD_*` environment variable; the flag wins.
///
/// The options are ``HeraldConfiguration/options``: one table parses them, writes this help, and is checked against
/// the README's.
struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the HTTP service (the default).",
        usage: "herald serve [--name value | --name=value]...",
        discussion: "OPTIONS (each also read from its HERALD_* variable; the flag wins):\n" + HeraldConfiguration.optionsHelp
    )

    @Argument(parsing: .allUnrecognized, help: .hidden) var options: [String] = []

    func run() async throws {
        let configuration = try resolve(ProcessInfo.processInfo.environment)
        // A file-size limit (RLIMIT_FSIZE) reached while staging is then EFBIG, answered 507, not a signal that kills.
        signal(SIGXFSZ, SIG_IGN)
        LoggingSystem.bootstrap { label in
            var handler: any LogHandler =
                switch configuration.logFormat {
                case .text: StreamLogHandler.standardOutput(label: label)
                case .json: JSONLogHandler(label: label)
                }
            handler.logLevel = configuration.logLevel
            return handler
        }
        // Once per process, as logging: the routes, the server and the runner record into this registry.
        let metrics = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: metrics))
        var logger = Logger(label: "herald")
        logger.logLevel = configuration.logLevel
        let application: Application
        do {
            application = try await Application.build(configuration: configuration, logger: logger, metrics: metrics)
        } catch let error as ConfigurationError {
            FileHandle.standardError.write(Data("herald: \(error)\n".utf8))
            throw ExitCode(2)
        }
        if let key = application.initialKey { announce(key, format: configuration.logFormat) }
        try await application.run()
    }

    /// The one log line that holds a key: the initial admin key, on stderr whatever the log level, shown this once.
    ///
    /// Written by the handler `--log-format` names, on stderr and at `notice` whatever `--log-level` says.
    private func announce(_ created: CreatedKey, format: LogFormat) {
        var handler: any LogHandler =
            switch format {
            case .text: StreamLogHandler.standardError(label: "herald")
            case .json: JSONLogHandler(label: "herald", output: LineWriter(descriptor: STDERR_FILENO))
            }
        handler.logLevel = .notice
        Logger(label: "herald") { _ in handler }.notice(
            "initial admin key (shown once; keep it): \(created.secret) ; make more with `herald keys create --name NAME` or POST /v1/keys",
            metadata: ["key_id": "\(created.key.id)"])
    }

    /// Flags first, then the environment, then the defaults; the AWS variables for an `s3://` store.
    func resolve(_ environment: [String: String]) throws -> HeraldConfiguration {
        do {
            var configuration = try HeraldConfiguration.resolve(arguments: options, environment: environment)
            configuration.storeCredentials = try Environment(values: environment).awsCredentials()
            return configuration
        } catch let error as ConfigurationError {
            throw ValidationError(error.description)
        }
    }
}

/// `herald healthcheck`: exit 0 when `/healthz` answers 200 (the container's HEALTHCHECK; no curl needed).
struct Healthcheck: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Exit 0 if the service answers GET /healthz with 200, else 1.")

    @Option(help: "URL to probe. [default http(s)://127.0.0.1:$HERALD_PORT/healthz: https when HERALD_TLS_CERT is set]") var url: String?
    @Option(help: "Seconds to wait for the answer.") var timeout: Int = 3

    func run() async throws {
        let environment = Environment()
        let port = (try? environment.int("HERALD_PORT")) ?? nil
        let tls = ((try? environment.string("HERALD_TLS_CERT")) ?? nil) != nil
        let target = url ?? "\(tls ? "https" : "http")://127.0.0.1:\(port ?? 8080)/healthz"
        // The probe asks this machine's own server whether it lives: its certificate names the public host, not
        // 127.0.0.1, so it is not verified here (nothing secret is sent).
        var configuration = HTTPClient.Configuration()
        var tlsConfiguration = TLSConfiguration.makeClientConfiguration()
        tlsConfiguration.certificateVerification = .none
        configuration.tlsConfiguration = tlsConfiguration
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        let verdict: String?
        do {
            let response = try await client.execute(HTTPClientRequest(url: target), timeout: .seconds(Int64(timeout)))
            verdict = response.status == .ok ? nil : "answered \(response.status.code)"
        } catch {
            verdict = "\(error)"
        }
        try? await client.shutdown()
        guard let verdict else {
            print("healthy: \(target)")
            return
        }
        print("unhealthy: \(target): \(verdict)")
        throw ExitCode(1)
    }
}

/// The process environment, parsed with errors that name the variable.
struct Environment {
    var values = ProcessInfo.processInfo.environment

    func string(_ name: String) throws -> String? {
        guard let value = values[name], !value.isEmpty else { return nil }
        return value
    }

    /// The standard AWS variables, for an `s3://` store; `nil` unless both the key id and the secret are set.
    func awsCredentials() throws -> SigV4Signer.Credentials? {
        guard let id = try string("AWS_ACCESS_KEY_ID"), let secret = try string("AWS_SECRET_ACCESS_KEY") else { return nil }
        return SigV4Signer.Credentials(accessKeyID: id, secretAccessKey: secret, sessionToken: try string("AWS_SESSION_TOKEN"))
    }

    func int(_ name: String) throws -> Int? {
        guard let text = try string(name) else { return nil }
        guard let value = Int(text) else { throw ValidationError("\(name)='\(text)' is not an integer") }
        return value
    }
}
