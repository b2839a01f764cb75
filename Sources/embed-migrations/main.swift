import Foundation

// embed-migrations OUTPUT.swift FILE.sql...: writes the files as `Migrator.embedded`, each SQL text in base64
// (no escaping to get wrong), in the order given. Run by the EmbedMigrations build plugin.
let arguments = CommandLine.arguments.dropFirst()
guard let output = arguments.first else {
    FileHandle.standardError.write(Data("usage: embed-migrations OUTPUT.swift FILE.sql...\n".utf8))
    exit(2)
}
var source = """
    // Generated at build time from migrations/*.sql by the EmbedMigrations plugin. Do not edit.
    import Foundation

    extension Migrator {
        /// The migrations this build ships, as they were in `migrations/` when it was built.
        public static let embedded = Migrator(migrations: [

    """
for path in arguments.dropFirst() {
    let url = URL(fileURLWithPath: path)
    let data = try Data(contentsOf: url)
    let version = url.deletingPathExtension().lastPathComponent
    source += "        .init(version: \"\(version)\", sql: String(decoding: Data(base64Encoded: \"\(data.base64EncodedString())\")!, as: UTF8.self)),\n"
}
source += "    ])\n}\n"
// Unchanged text is not rewritten: a new file time would recompile RISCStore after every new build plan.
let outputURL = URL(fileURLWithPath: output)
if (try? Data(contentsOf: outputURL)) != Data(source.utf8) {
    try Data(source.utf8).write(to: outputURL, options: .atomic)
}
