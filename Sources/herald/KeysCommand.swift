import ArgumentParser
import Foundation
import HeraldApp
import HeraldCore
import HeraldStorage
import Logging
import SQLiteStorage

/// `herald keys create|list|revoke`: API keys, on the database `serve` would use (`--data-dir`, `--database`), while
/// the server runs or not.
///
/// They open (creating and migrating) the database like the server, never take the server's lock, print results
/// on stdout and log only to stderr.
struct Keys: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Create, list and revoke API keys.",
        subcommands: [Create.self, List.self, Revoke.self]
    )

    /// `--data-dir` and `--database`, as `serve` reads them.
    struct DataDirectory: ParsableArguments {
        @Option(help: "Database and staging files. [HERALD_DATA_DIR, default ./data]") var dataDir: String?
        @Option(help: "PostgreSQL's URL, as `serve` takes it. [HERALD_DATABASE_URL, default SQLite in <data-dir>]")
        var database: String?

        /// What the flags name, else their variables, else the defaults.
        func configuration() throws -> HeraldConfiguration {
            let environment = Environment()
            var configuration = HeraldConfiguration()
            configuration.dataDirectory = try dataDir ?? environment.string("HERALD_DATA_DIR") ?? configuration.dataDirectory
            configuration.database = try database ?? environment.string("HERALD_DATABASE_URL")
            return configuration
        }

        /// The database, created and migrated if need be, open while `body` runs; logs go to stderr, warnings and
        /// worse. A database that cannot be used exits 2 with the reason.
        func withStorage<T: Sendable>(_ body: (any Storage, HeraldConfiguration) async throws -> T) async throws -> T {
            Self.logToStandardError()
            let configuration = try configuration()
            do {
                return try await Application.withStorage(configuration, logger: Logger(label: "herald")) { storage in
                    try await body(storage, configuration)
                }
            } catch let error as ConfigurationError {
                FileHandle.standardError.write(Data("herald: \(error)\n".utf8))
                throw ExitCode(2)
            }
        }

        /// The data directory's SQLite database, created and migrated if need be (for what only SQLite does).
        func sqlite() throws -> SQLiteStorage {
            Self.logToStandardError()
            return try SQLiteStorage.open(directory: try configuration().dataDirectory, logger: Logger(label: "herald"))
        }

        private static func logToStandardError() {
            LoggingSystem.bootstrap { label in
                var handler = StreamLogHandler.standardError(label: label)
                handler.logLevel = .warning
                return handler
            }
        }
    }

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Make a key; prints the key alone on the first line (it is shown this once), then its record.")

        @OptionGroup var data: DataDirectory
        @Option(help: "What the key is for, e.g. the client's name.") var name: String
        @Option(help: "The tenant whose data the key reaches. [default: default]") var tenant: String?
        @Option(help: "read, publish or admin. [default: publish]") var scope: String?

        func run() async throws {
            try await data.withStorage { storage, _ in
                let service = KeyService(keys: storage.keys)
                do throws(KeyError) {
                    let created = try await service.create(name: name, tenant: tenant, scope: scope)
                    print(created.secret)
                    print("id=\(created.key.id) name=\(created.key.name) tenant=\(created.key.tenant) scope=\(created.key.scope.rawValue)")
                } catch .invalid(let issues) {
                    throw ValidationError(KeyError.invalid(issues).description)
                } catch .storage(let error) {
                    throw error
                }
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Every tenant's keys, newest first (never the keys themselves).")

        @OptionGroup var data: DataDirectory

        func run() async throws {
            let rows = try await data.withStorage { storage, _ in try await Self.rows(KeyService(keys: storage.keys)) }
            let widths = rows[0].indices.map { column in rows.map { $0[column].count }.max() ?? 0 }
            for row in rows {
                print(zip(row, widths).map { $0.padding(toLength: $1, withPad: " ", startingAt: 0) }.joined(separator: "  "))
            }
        }

        /// The table's rows, its header first.
        private static func rows(_ service: KeyService) async throws -> [[String]] {
            var rows: [[String]] = [["ID", "NAME", "TENANT", "SCOPE", "CREATED", "LAST USED", "REVOKED"]]
            var cursor: Cursor?
            repeat {
                let page = try await service.list(limit: 100, after: cursor)
                for key in page.data {
                    rows.append([
                        key.id.rawValue, key.name, key.tenant.rawValue, key.scope.rawValue, key.createdAt.rfc3339,
                        key.lastUsedAt?.rfc3339 ?? "-", key.revokedAt?.rfc3339 ?? "-",
                    ])
                }
                cursor = page.nextCursor
            } while cursor != nil
            return rows
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Revoke a key: every request with it is refused within a second.")

        @OptionGroup var data: DataDirectory
        @Argument(help: "The key's id (from `herald keys list`).") var id: String

        func run() async throws {
            let revoked = try await data.withStorage { storage, _ in try await KeyService(keys: storage.keys).revoke(id) }
            guard let key = revoked else {
                FileHandle.standardError.write(Data("herald: no key with id \(id)\n".utf8))
                throw ExitCode(1)
            }
            print("revoked id=\(key.id) name=\(key.name) at \(key.revokedAt?.rfc3339 ?? "-")")
        }
    }
}
