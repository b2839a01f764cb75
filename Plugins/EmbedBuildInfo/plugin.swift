import Foundation
import PackagePlugin

/// Names the commit a binary was built from, for `--version`. The command's inputs are git's record of HEAD, so
/// it runs again after a commit or a checkout, and not otherwise. RISC_BUILD_COMMIT, when set, names the commit
/// instead: an image build copies no .git.
@main
struct EmbedBuildInfo: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: Target) async throws -> [Command] {
        let package = context.package.directoryURL
        var git = package.appending(path: ".git")
        // A worktree or submodule has a .git file naming the real git directory.
        if let pointer = try? String(contentsOf: git, encoding: .utf8), pointer.hasPrefix("gitdir:") {
            let path = pointer.dropFirst("gitdir:".count).trimmingCharacters(in: .whitespacesAndNewlines)
            git = path.hasPrefix("/") ? URL(fileURLWithPath: path) : package.appending(path: path)
        }
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
