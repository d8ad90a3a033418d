import ArgumentParser
import AsyncHTTPClient
import HeraldClient
import NIOCore
import Platform

/// Where the server is and how to speak to it: the options every client command takes.
struct ClientOptions: ParsableArguments {
    @Option(help: "Herald's base URL. [HERALD_URL, default http://127.0.0.1:8080]") var server: String?
    @Option(help: "API key (Authorization: Bearer). [HERALD_KEY]") var key: String?
    @Flag(help: "Print the server's JSON objects, one a line, instead of text.") var json = false

    /// The flag, else the variable, else the default: the same rule as `herald serve`'s flags.
    func makeClient(http: HTTPClient) -> APIClient {
        let environment = Environment()
        return APIClient(
            server: server ?? (try? environment.string("HERALD_URL")) ?? "http://127.0.0.1:8080",
            key: key ?? (try? environment.string("HERALD_KEY")),
            http: http
        )
    }

    /// How to show what happens: bars on a terminal, a line per event otherwise, JSON when asked.
    var output: OutputMode {
        if json { return .json }
        let term = (try? Environment().string("TERM")) ?? ""
        return isatty(STDOUT_FILENO) == 1 && term != "dumb" ? .terminal : .lines
    }
}

/// How a command shows its progress.
enum OutputMode {
    /// Progress bars redrawn in place (stdout is a terminal).
    case terminal
    /// One plain line per event.
    case lines
    /// The server's JSON objects, one a line.
    case json
}

/// The exit statuses of the client commands: the outcome of the job, else whether the call worked.
enum ExitStatus {
    /// The job succeeded, or the call did what it asked.
    static let succeeded: Int32 = 0
    /// The job failed.
    static let failed: Int32 = 1
    /// The call could not be made or was refused (server unreachable, a problem answer, a bad file).
    static let error: Int32 = 2
    /// The job was cancelled.
    static let cancelled: Int32 = 3
    /// Left with a second Ctrl-C, or interrupted before a job existed.
    static let interrupted: Int32 = 130
}

/// Runs a client command's body with an HTTP client it shuts down after, turning ``ClientError`` into one line on
/// stderr and exit status 2.
func withAPIClient(_ options: ClientOptions, _ body: (APIClient) async throws -> Int32) async throws -> Never {
    var configuration = HTTPClient.Configuration()
    // Event streams send a comment at least every 15 s; 45 s of silence is a dead connection.
    configuration.timeout = .init(connect: .seconds(10), read: .seconds(45))
    // A refused connection is an answer: say so at once rather than retry until the connect timeout.
    configuration.connectionPool.retryConnectionEstablishment = false
    let http = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    let status: Int32
    do {
        status = try await body(options.makeClient(http: http))
    } catch let error as ClientError {
        printError("herald: \(error)")
        status = ExitStatus.error
    } catch {
        try? await http.shutdown()
        throw error
    }
    try? await http.shutdown()
    throw ExitCode(status)
}

/// One line on stderr.
func printError(_ line: String) {
    writeAll(STDERR_FILENO, line + "\n")
}

/// One line on stdout, written at once (never left in a buffer behind a later line on stderr).
func printLine(_ line: String) {
    writeAll(STDOUT_FILENO, line + "\n")
}

private func writeAll(_ descriptor: Int32, _ text: String) {
    var text = text
    text.withUTF8 { bytes in
        var offset = 0
        while offset < bytes.count {
            let written = write(descriptor, bytes.baseAddress! + offset, bytes.count - offset)
            if written < 0 && errno == EINTR { continue }
            guard written > 0 else { return }
            offset += written
        }
    }
}

/// Whether to colour: yes unless `NO_COLOR` is set to something other than "" or "0" (https://no-color.org, as Rainbow reads it).
let colourEnabled: Bool = {
    guard let value = getenv("NO_COLOR") else { return true }
    let text = String(cString: value)
    return text.isEmpty || text == "0"
}()
