import ArgumentParser
import Foundation
import GRDB
import Hummingbird
import Logging

/// `GET /v1/jobs/{id}` over Herald's database, written the plain Hummingbird 2 + GRDB way, to measure Herald against.
@main
struct HummingbirdBaseline: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "hummingbird-baseline",
        abstract: "Serves Herald's GET /v1/jobs/{id} from Herald's SQLite database with Hummingbird."
    )

    @Option(help: "Herald's database file (herald.sqlite in its data directory); opened read-only.")
    var db: String

    @Option(help: "The address to listen on.")
    var host = "127.0.0.1"

    @Option(help: "The port to listen on.")
    var port = 8081

    func run() async throws {
        var configuration = GRDB.Configuration()
        configuration.readonly = true
        let pool = try DatabasePool(path: db, configuration: configuration)

        let router = Router(context: APIRequestContext.self)
        router.get("/v1/jobs/{id}") { _, context -> EditedResponse<Job> in
            let id = try context.parameters.require("id")
            guard let job = try await Job.find(id: id, in: pool) else {
                throw Problem(status: .notFound, detail: "no job with id \(id)")
            }
            // As Herald: poll again in a second while the job is not done.
            return EditedResponse(headers: job.done ? [:] : [.retryAfter: "1"], response: job)
        }

        let app = Application(
            router: router,
            configuration: .init(address: .hostname(host, port: port)),
            logger: Logger(label: "hummingbird-baseline")
        )
        try await app.runService()
    }
}

/// Hummingbird's basic context, with Herald's JSON spelling (`/` not escaped) for responses.
struct APIRequestContext: RequestContext {
    var coreContext: CoreRequestContextStorage

    init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
    }

    var responseEncoder: JSONEncoder { Self.encoder }

    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes]
        return encoder
    }()
}
