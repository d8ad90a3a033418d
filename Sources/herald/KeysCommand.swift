import ArgumentParser
import Foundation
import HeraldApp
import HeraldCore
import Logging
import SQLiteStorage

/// `herald keys create|list|revoke`: API keys, on the `--data-dir` database, while the server runs or not.
///
/// They open (creating and migrating) the database like the server, never take the server's lock, print results
/// on stdout and log only to stderr.
struct Keys: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Create, list and revoke API keys.",
        subcommands: [Create.self, List.self, Revoke.self]
    )

    /// `--data-dir`, as `serve` reads it.
    struct DataDirectory: ParsableArguments {
        @Option(help: "Database and staging files. [HERALD_DATA_DIR, default ./data]") var dataDir: String?

        /// The key service on the data directory's database.
        func service() throws -> KeyService {
            KeyService(keys: try storage().keys)
        }

        /// The data directory's database, created and migrated if need be; logs go to stderr, warnings and worse.
        func storage() throws -> SQLiteStorage {
            LoggingSystem.bootstrap { label in
                var handler = StreamLogHandler.standardError(label: label)
                handler.logLevel = .warning
                return handler
            }
            let directory = try dataDir ?? Environment().string("HERALD_DATA_DIR") ?? HeraldConfiguration().dataDirectory
            return try SQLiteStorage.open(directory: directory, logger: Logger(label: "herald"))
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
            let service = try data.service()
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

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Every tenant's keys, newest first (never the keys themselves).")

        @OptionGroup var data: DataDirectory

        func run() async throws {
            let service = try data.service()
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
            let widths = rows[0].indices.map { column in rows.map { $0[column].count }.max() ?? 0 }
            for row in rows {
                print(zip(row, widths).map { $0.padding(toLength: $1, withPad: " ", startingAt: 0) }.joined(separator: "  "))
            }
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Revoke a key: every request with it is refused within a second.")

        @OptionGroup var data: DataDirectory
        @Argument(help: "The key's id (from `herald keys list`).") var id: String

        func run() async throws {
            let service = try data.service()
            guard let key = try await service.revoke(id) else {
                FileHandle.standardError.write(Data("herald: no key with id \(id)\n".utf8))
                throw ExitCode(1)
            }
            print("revoked id=\(key.id) name=\(key.name) at \(key.revokedAt?.rfc3339 ?? "-")")
        }
    }
}
