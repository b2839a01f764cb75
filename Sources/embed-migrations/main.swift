import Foundation

// embed-migrations OUTPUT.swift MIGRATION.sql... --routines ROUTINE.sql...: writes the files as
// `Migrator.embedded`, each SQL text in base64 (no escaping to get wrong). Run by the EmbedMigrations build plugin.
let arguments = CommandLine.arguments.dropFirst()
guard let output = arguments.first else {
    FileHandle.standardError.write(Data("usage: embed-migrations OUTPUT.swift MIGRATION.sql... --routines ROUTINE.sql...\n".utf8))
    exit(2)
}
let files = Array(arguments.dropFirst())
let split = files.firstIndex(of: "--routines") ?? files.endIndex
func entries(_ paths: ArraySlice<String>) throws -> String {
    try paths.map { path in
        let url = URL(fileURLWithPath: path)
        let data = try Data(contentsOf: url)
        let version = url.deletingPathExtension().lastPathComponent
        return
            "            .init(version: \"\(version)\", sql: String(decoding: Data(base64Encoded: \"\(data.base64EncodedString())\")!, as: UTF8.self)),\n"
    }.joined()
}
let source = """
    // Generated at build time from migrations/ by the EmbedMigrations plugin. Do not edit.
    import Foundation

    extension Migrator {
        /// The migrations and routines this build ships, as they were in `migrations/` when it was built.
        public static let embedded = Migrator(
            migrations: [
    \(try entries(files[..<split]))        ],
            routines: [
    \(try entries(files[min(split + 1, files.endIndex)...]))        ])
    }

    """
// Unchanged text is not rewritten: a new file time would recompile RISCStore after every new build plan.
let outputURL = URL(fileURLWithPath: output)
if (try? Data(contentsOf: outputURL)) != Data(source.utf8) {
    try Data(source.utf8).write(to: outputURL, options: .atomic)
}
