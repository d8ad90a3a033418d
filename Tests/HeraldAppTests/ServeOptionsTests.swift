import Foundation
import HeraldApp
import Logging
import Testing

/// `herald serve`'s one table of options: flags, variables and defaults, and the README's table checked against it.
@Suite("herald serve options")
struct ServeOptionsTests {
    @Test func aFlagWinsOverItsVariableWhichWinsOverTheDefault() throws {
        let environment = ["HERALD_WORKERS": "3", "HERALD_UPLOAD_CONCURRENCY": "2", "HERALD_PORT": "", "HERALD_LOG_LEVEL": "DEBUG"]
        let configuration = try HeraldConfiguration.resolve(arguments: ["--workers", "5", "--host=::1"], environment: environment)
        #expect(configuration.workers == 5)
        #expect(configuration.host == "::1")
        #expect(configuration.uploadConcurrency == 2)
        #expect(configuration.port == HeraldConfiguration().port, "an empty variable counts as unset")
        #expect(configuration.logLevel == .debug)
        #expect(configuration.maxStreams == HeraldConfiguration().maxStreams)
    }

    @Test func switchesChoicesListsAndOptionalTexts() throws {
        let flags = try HeraldConfiguration.resolve(
            arguments: ["--webhook-allow-private", "--auth", "off", "--trusted-proxies", "10.0.0.0/8, 192.168.1.1", "--store", "s3://b"],
            environment: ["HERALD_LOG_FORMAT": "json"])
        #expect(flags.webhookAllowPrivate)
        #expect(flags.auth == .off)
        #expect(flags.trustedProxies.count == 2)
        #expect(flags.store == "s3://b")
        #expect(flags.logFormat == .json)
        let variables = try HeraldConfiguration.resolve(arguments: [], environment: ["HERALD_WEBHOOK_ALLOW_PRIVATE": "yes"])
        #expect(variables.webhookAllowPrivate)
        #expect(variables.store == nil)
        #expect(try !HeraldConfiguration.resolve(arguments: ["--webhook-allow-private=off"], environment: [:]).webhookAllowPrivate)
    }

    @Test(
        arguments: [
            (["--workers", "0"], [:], "--workers must be at least 1, not 0"),
            (["--port", "70000"], [:], "--port must be 0 to 65535, not 70000"),
            ([], ["HERALD_WORKERS": "many"], "HERALD_WORKERS 'many' is not an integer"),
            (["--log-format", "xml"], [:], "--log-format 'xml' is not one of text, json"),
            (["--log-level", "loud"], [:], "--log-level 'loud' is not one of trace, debug, info, notice, warning, error, critical"),
            (["--trusted-proxies", "10.0.0.0/8,nowhere"], [:], "--trusted-proxies 'nowhere' is not an address or CIDR"),
            ([], ["HERALD_WEBHOOK_ALLOW_PRIVATE": "maybe"], "HERALD_WEBHOOK_ALLOW_PRIVATE 'maybe' is not 1/true/yes/on or 0/false/no/off"),
            (["--nope", "1"], [:], "unknown option '--nope'"),
            (["--workers", "2", "--workers=3"], [:], "--workers is given twice"),
            (["--workers"], [:], "--workers needs a value"),
            (["stray"], [:], "unexpected argument 'stray'"),
        ] as [([String], [String: String], String)])
    func badValuesAreRefusedNamingWhereTheyCameFrom(_ arguments: [String], _ environment: [String: String], _ message: String) {
        #expect {
            _ = try HeraldConfiguration.resolve(arguments: arguments, environment: environment)
        } throws: { error in
            (error as? ConfigurationError)?.description == message
        }
    }

    @Test func everyOptionHasItsOwnVariable() {
        let names = HeraldConfiguration.options.map(\.name)
        #expect(Set(names).count == names.count)
        #expect(HeraldConfiguration.options.first { $0.name == "max-connections-per-ip" }?.variable == "HERALD_MAX_CONNECTIONS_PER_IP")
    }

    /// The README's option table names each option with its variable and its default first, and no other.
    @Test func theREADMEsTableIsTheOptionTable() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let readme = try String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8)
        // Rows of the table: | `--flag`[, `--flag`] | `VARIABLE`[, `VARIABLE`] | default and notes |
        var rows: [(flags: [String], variables: [String], text: String)] = []
        for line in readme.split(separator: "\n") where line.hasPrefix("| `--") {
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count >= 4 else { continue }
            func quoted(_ cell: String) -> [String] { cell.split(separator: ",").map { $0.trimmingCharacters(in: CharacterSet(charactersIn: " `")) } }
            rows.append((quoted(cells[1]), quoted(cells[2]), cells[3]))
        }
        let options = HeraldConfiguration.options
        for option in options {
            let row = rows.first { $0.flags.contains("--\(option.name)") }
            #expect(row?.variables.contains(option.variable) == true, "README row for --\(option.name) names \(option.variable)")
            guard let row, row.flags.count == 1 else { continue }
            let expected = option.defaultText.map { option.isSwitch ? $0 : "`\($0)`" } ?? "none"
            #expect(row.text.hasPrefix(expected), "README's default for --\(option.name): '\(row.text)' should start with \(expected)")
        }
        let documented = rows.flatMap(\.flags)
        #expect(documented.sorted() == options.map { "--\($0.name)" }.sorted(), "every README row is an option and every option has a row")
    }
}
