import Foundation
import PostgresNIO
import RISCStore
import Testing

/// migrations/ holds one baseline (0001_schema) and a file per routine. Before 0.1.0 the schema grew through 13
/// numbered migrations, kept in Fixtures/ for this comparison only.
@Suite("The 0.1.0 schema baseline")
struct SchemaBaselineTests {
    static let history = Harness.repositoryRoot.appendingPathComponent("Tests/IntegrationTests/Fixtures/migrations-before-0.1.0").path
    /// What 0.1.0 dropped on purpose: a procedure no binary of this version calls, and the signatures of the two
    /// routines whose arguments changed (the actions now travel as one JSON array).
    static let intendedDrops = [
        """
        DROP PROCEDURE risc_store_events(text[], text[], text[], text[], text[], text[], float8[], text[], integer[], integer[],
                                         text[], text[], text[], text[], boolean, bigint[])
        """,
        "DROP FUNCTION risc_apply_actions(bigint[], integer[], text[], text[], text[], text[], bigint[])",
        """
        DROP PROCEDURE risc_ingest_events(text[], text[], text[], text[], text[], text[], float8[], text[], integer[], integer[],
                                          text[], text[], text[], text[], boolean, bigint[], text[], bigint[], bigint[])
        """,
    ]

    @Test("The baseline's schema equals what the migrations before 0.1.0 produced, apart from the intended drops (pg_dump --schema-only)")
    func baselineEqualsHistory() async throws {
        let history = try Migrator(directory: Self.history)
        let current = try Migrator(directory: Harness.repositoryRoot.appendingPathComponent("migrations").path)
        #expect(history.migrations.count == 13 && history.routines.isEmpty)
        try await IsolatedDatabase.with(migrator: history) { old in
            // The migrations after the baseline, then the routines as they are now, over the history's: their bodies
            // are compared too, so they must be the same text on both sides.
            for file in current.migrations.dropFirst() + current.routines {
                for statement in SQLScript.statements(in: file.sql) {
                    try await old.client.query(PostgresQuery(unsafeSQL: statement), logger: Harness.logger)
                }
            }
            let undropped = try await schemaDump(old.url)
            for drop in Self.intendedDrops {
                try await old.client.query(PostgresQuery(unsafeSQL: drop), logger: Harness.logger)
            }
            let before = try await schemaDump(old.url)
            try await IsolatedDatabase.with { new in
                let baseline = try await schemaDump(new.url)
                let missing = before.filter { !baseline.contains($0) }
                let added = baseline.filter { !before.contains($0) }
                #expect(before == baseline, "only in the history: \(missing)\nonly in the baseline: \(added)")
                // The comparison can fail: without the drops, the schemas differ.
                #expect(undropped != baseline)
            }
        }
    }

    @Test("A database migrated before 0.1.0 is refused with one line that says what to do, and is left as it was")
    func historyBeforeBaselineRefused() async throws {
        try await IsolatedDatabase.with(migrator: try Migrator(directory: Self.history)) { old in
            let before = try await schemaDump(old.url)
            let result = try await runRiscReceiver(["migrate"], environment: ["DATABASE_URL": old.url])
            #expect(result.status == 1, "\(result.output)")
            let lines = result.output.split(separator: "\n")
            #expect(lines.count == 1, "\(result.output)")
            #expect(result.output.contains("before 0.1.0") && result.output.contains("new, empty database"), "\(result.output)")
            #expect(try await schemaDump(old.url) == before)
        }
    }

    /// `pg_dump --schema-only`, as lines without comments, blank lines or the dump's random \restrict key: SQL
    /// comments inside function bodies are documentation, not schema.
    func schemaDump(_ url: String) async throws -> [String] {
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("risc-schema-\(UUID().uuidString).sql").path
        defer { try? FileManager.default.removeItem(atPath: output) }
        let pgDump = Harness.environment("RISC_TEST_PG_BIN") + "/pg_dump"
        let status = try await ChildProcess.spawn(
            pgDump,
            [
                "--schema-only", "--no-owner", "--exclude-table=schema_migrations", "--exclude-table=schema_routines", "--dbname", url,
            ], outputFile: output
        ).wait()
        let text = try String(contentsOfFile: output, encoding: .utf8)
        #expect(status == 0, "\(text)")
        return text.split(separator: "\n").compactMap { line in
            var line = line.trimmingCharacters(in: .whitespaces)
            if let comment = line.range(of: #"(^|\s)--(\s.*)?$"#, options: .regularExpression) {
                line = String(line[..<comment.lowerBound]).trimmingCharacters(in: .whitespaces)
            }
            return line.isEmpty || line.hasPrefix("\\restrict") || line.hasPrefix("\\unrestrict") ? nil : line
        }
    }
}
