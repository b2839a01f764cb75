import Foundation
import PackagePlugin

/// Embeds `migrations/*.sql` and `migrations/routines/*.sql` (the source of truth, at the package root) into the
/// target as generated Swift, so that a release binary copied alone onto a server can still `migrate`. The
/// command's inputs are the SQL files, so a build that changed none of them does not run it again.
@main
struct EmbedMigrations: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: Target) async throws -> [Command] {
        let directory = context.package.directoryURL.appending(path: "migrations")
        func sqlFiles(in directory: URL) throws -> [URL] {
            try FileManager.default.contentsOfDirectory(at: directory, includingPropertiesForKeys: nil)
                .filter { $0.pathExtension == "sql" }
                .sorted { $0.lastPathComponent < $1.lastPathComponent }
        }
        let migrations = try sqlFiles(in: directory)
        let routines = try sqlFiles(in: directory.appending(path: "routines"))
        let inputs = migrations + routines
        let output = context.pluginWorkDirectoryURL.appending(path: "EmbeddedMigrations.swift")
        return [
            .buildCommand(
                displayName: "Embedding \(migrations.count) migrations and \(routines.count) routines",
                executable: try context.tool(named: "embed-migrations").url,
                arguments: [output.path] + migrations.map(\.path) + ["--routines"] + routines.map(\.path),
                inputFiles: inputs,
                outputFiles: [output])
        ]
    }
}
