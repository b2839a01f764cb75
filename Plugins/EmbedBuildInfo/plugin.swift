import Foundation
import PackagePlugin

/// Names the commit a binary was built from, for `--version`. The command's inputs are git's record of HEAD, so
/// it runs again after a commit or a checkout, and not otherwise. RISC_BUILD_COMMIT, when set, names the commit
/// instead: an image build copies no .git.
@main
struct EmbedBuildInfo: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: Target) async throws -> [Command] {
        let package = context.package.directoryURL
        let git = package.appending(path: ".git")
        let inputs = [git.appending(path: "HEAD"), git.appending(path: "logs/HEAD")]
            .filter { FileManager.default.fileExists(atPath: $0.path) }
        let output = context.pluginWorkDirectoryURL.appending(path: "BuildInfo.swift")
        let commit = ProcessInfo.processInfo.environment["RISC_BUILD_COMMIT"] ?? ""
        return [
            .buildCommand(
                displayName: "Naming the commit built",
                executable: try context.tool(named: "embed-build-info").url,
                arguments: [output.path, package.path] + (commit.isEmpty ? [] : [commit]),
                inputFiles: inputs,
                outputFiles: [output])
        ]
    }
}
