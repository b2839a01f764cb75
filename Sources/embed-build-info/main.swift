import Foundation

// embed-build-info OUTPUT.swift PACKAGE_DIRECTORY [COMMIT]: writes `BuildInfo.commit`, the commit the binary
// was built from. COMMIT, when given, wins: an image build has no .git (it passes RISC_BUILD_COMMIT). Otherwise
// git names HEAD; outside a git checkout the commit is "unknown". Run by the EmbedBuildInfo build plugin.
let arguments = Array(CommandLine.arguments.dropFirst())
guard arguments.count == 2 || arguments.count == 3 else {
    FileHandle.standardError.write(Data("usage: embed-build-info OUTPUT.swift PACKAGE_DIRECTORY [COMMIT]\n".utf8))
    exit(2)
}

func headCommit(of directory: String) -> String? {
    let git = Process()
    git.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    git.arguments = ["git", "-C", directory, "rev-parse", "--short=12", "HEAD"]
    let output = Pipe()
    git.standardOutput = output
    git.standardError = FileHandle.nullDevice
    guard (try? git.run()) != nil else { return nil }
    let data = output.fileHandleForReading.readDataToEndOfFile()
    git.waitUntilExit()
    guard git.terminationStatus == 0 else { return nil }
    let commit = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    return commit.isEmpty ? nil : commit
}

let given = arguments.count == 3 ? arguments[2].trimmingCharacters(in: .whitespacesAndNewlines) : ""
let commit = given.isEmpty ? headCommit(of: arguments[1]) ?? "unknown" : given
// Only ASCII letters, digits and "-._" reach the Swift literal.
let safe = String(
    commit.unicodeScalars.filter { $0.isASCII && (CharacterSet.alphanumerics.contains($0) || "-._".unicodeScalars.contains($0)) }.prefix(64))
let source = """
    // Generated at build time by the EmbedBuildInfo plugin. Do not edit.

    enum BuildInfo {
        /// The commit this binary was built from, as `--version` prints it.
        static let commit = "\(safe.isEmpty ? "unknown" : safe)"
    }

    """
// Unchanged text is not rewritten: a new file time would relink the executable after every new build plan.
let outputURL = URL(fileURLWithPath: arguments[0])
if (try? Data(contentsOf: outputURL)) != Data(source.utf8) {
    try Data(source.utf8).write(to: outputURL, options: .atomic)
}
