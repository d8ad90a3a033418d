import ArgumentParser
import Foundation
import HeraldApp
import HeraldStorage
import Logging
import SQLiteStorage
import ServiceLifecycle

/// `herald backup --data-dir D FILE`: a consistent copy of the database, while the server runs.
struct Backup: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Write a consistent copy of the database to FILE (SQLite's online backup), while the server runs.")

    @OptionGroup var data: Keys.DataDirectory
    @Argument(help: "The copy to write; must not exist.") var file: String

    func run() async throws {
        guard try data.configuration().database == nil else {
            FileHandle.standardError.write(
                Data("herald: backup copies SQLite's database; the rows are in PostgreSQL (--database): back it up with pg_dump\n".utf8))
            throw ExitCode(2)
        }
        let storage = try data.sqlite()
        try storage.backup(to: file)
        print("backed up \(storage.path) to \(file)")
    }
}

/// `herald status-statement`: the status poll's SQL, for the benchmark's C server (`Benchmarks/run.py`); not in the help.
struct StatusStatement: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status-statement", abstract: "Print the SQL of the status poll's read.", shouldDisplay: false)

    func run() {
        print(SQLiteStorage.statusStatement)
    }
}

/// `herald check --data-dir D [--database URL]`: the database, the staging folder and the store against one another.
struct Check: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract:
            "Check the database (integrity, foreign keys, schema version), the staging files and the store against the rows; exit 0 only if all is well."
    )

    @OptionGroup var data: Keys.DataDirectory
    @Option(help: "The media store, as `serve` takes it. [HERALD_STORE, default file://<data-dir>/objects]") var store: String?

    func run() async throws {
        let report = try await data.withStorage { storage, configuration in try await check(storage, configuration) }
        for problem in report.problems { print("problem: \(problem)") }
        print(
            "\(report.isClean ? "ok" : "\(report.problems.count) problem(s)"): \(report.mediaChecked) media, \(report.stagedFiles) staged files checked"
        )
        if !report.isClean { throw ExitCode(1) }
    }

    private func check(_ storage: any Storage, _ configuration: HeraldConfiguration) async throws -> ConsistencyCheck.Report {
        let environment = Environment()
        var configuration = configuration
        configuration.store = try store ?? environment.string("HERALD_STORE")
        configuration.storeCredentials = try environment.awsCredentials()
        let mediaStore = try Application.makeStore(configuration, logger: Logger(label: "herald"))
        let report = try await ConsistencyCheck.run(storage: storage, store: mediaStore, staging: configuration.stagedBytes)
        if let service = mediaStore as? any Service {
            // The S3 store owns an HTTP client that must be shut down: run it just long enough to stop it.
            let group = ServiceGroup(services: [service], logger: Logger(label: "herald"))
            try await withThrowingTaskGroup(of: Void.self) { tasks in
                tasks.addTask { try await group.run() }
                await group.triggerGracefulShutdown()
                try await tasks.waitForAll()
            }
        }
        return report
    }
}
