import Foundation
import PackagePlugin

/// Generates Swift source that embeds the package's text assets, so the binary needs no files beside it.
///
/// - `SQLiteStorage` gets `Migrations/*.sql` (sorted by name: the order they are applied in), `PostgresStorage`
///   `Migrations/PostgreSQL/*.sql`.
/// - `HeraldApp` gets `openapi.yaml`, and `Dashboard/*` (the web page at `/`).
@main
struct EmbedFiles: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: any Target) throws -> [Command] {
        let root = context.package.directoryURL
        switch target.name {
        case "SQLiteStorage":
            return [try command(context, "EmbeddedMigrations", files(in: root.appending(path: "Migrations"), suffix: ".sql"))]
        case "PostgresStorage":
            return [
                try command(context, "EmbeddedMigrations", files(in: root.appending(path: "Migrations/PostgreSQL"), suffix: ".sql"))
            ]
        case "HeraldApp":
            return [
                try command(context, "EmbeddedOpenAPI", [root.appending(path: "openapi.yaml")]),
                try command(context, "EmbeddedDashboard", files(in: root.appending(path: "Dashboard"), suffix: nil)),
            ]
        default:
            return []
        }
    }

    /// The files of `folder` (ending in `suffix`, when given), sorted by name: the order migrations are applied in.
    private func files(in folder: URL, suffix: String?) throws -> [URL] {
        let names = try FileManager.default.contentsOfDirectory(atPath: folder.path(percentEncoded: false))
        return names.filter { !$0.hasPrefix(".") && (suffix.map($0.hasSuffix) ?? true) }.sorted().map { folder.appending(path: $0) }
    }

    private func command(_ context: PluginContext, _ typeName: String, _ inputs: [URL]) throws -> Command {
        let output = context.pluginWorkDirectoryURL.appending(path: "\(typeName).swift")
        return .buildCommand(
            displayName: "Embedding \(inputs.count) file(s) as \(typeName)",
            executable: try context.tool(named: "EmbedFilesTool").url,
            arguments: [typeName, output.path(percentEncoded: false)] + inputs.map { $0.path(percentEncoded: false) },
            inputFiles: inputs,
            outputFiles: [output]
        )
    }
}
