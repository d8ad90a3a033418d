import Foundation
import PackagePlugin

/// Generates Swift source that embeds the package's text assets, so the binary needs no files beside it.
///
/// - `HeraldStorage` gets `Migrations/*.sql` (sorted by name: the order they are applied in).
/// - `HeraldApp` gets `openapi.yaml`.
@main
struct EmbedFiles: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: any Target) throws -> [Command] {
        let root = context.package.directoryURL
        let inputs: [URL]
        let typeName: String
        switch target.name {
        case "HeraldStorage":
            let folder = root.appending(path: "Migrations")
            let names = try FileManager.default.contentsOfDirectory(atPath: folder.path(percentEncoded: false))
            inputs = names.filter { $0.hasSuffix(".sql") }.sorted().map { folder.appending(path: $0) }
            typeName = "EmbeddedMigrations"
        case "HeraldApp":
            inputs = [root.appending(path: "openapi.yaml")]
            typeName = "EmbeddedOpenAPI"
        default:
            return []
        }
        let output = context.pluginWorkDirectoryURL.appending(path: "\(typeName).swift")
        return [
            .buildCommand(
                displayName: "Embedding \(inputs.count) file(s) as \(typeName)",
                executable: try context.tool(named: "EmbedFilesTool").url,
                arguments: [typeName, output.path(percentEncoded: false)] + inputs.map { $0.path(percentEncoded: false) },
                inputFiles: inputs,
                outputFiles: [output]
            )
        ]
    }
}
