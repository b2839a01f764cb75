import Foundation
import Logging
import PostgresNIO
import RISC
import RISCConfiguration
import RISCStore
import Testing

/// The built `risc-receiver` executable, next to the test bundle.
let riscReceiverBinary: String = {
    let testBinary = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
    return testBinary.deletingLastPathComponent().appendingPathComponent("risc-receiver").path
}()

/// Runs the executable; returns its exit status and everything it printed.
/// `/bin/sh -c command` with `arguments` as $0, $1, ...: for a command that needs a pipe.
func runShell(_ command: String, arguments: [String], environment: [String: String]) async throws -> (status: Int32, output: String) {
    let outputFile = FileManager.default.temporaryDirectory.appendingPathComponent("risc-\(UUID().uuidString).log").path
    defer { try? FileManager.default.removeItem(atPath: outputFile) }
    var env = environment
    env["PATH"] = ProcessInfo.processInfo.environment["PATH"]
    let status = try await ChildProcess.spawn("/bin/sh", ["-c", command] + arguments, environment: env, outputFile: outputFile).wait()
    return (status, (try? String(contentsOfFile: outputFile, encoding: .utf8)) ?? "")
}

func runRiscReceiver(_ arguments: [String], environment: [String: String]) async throws -> (status: Int32, output: String) {
    let outputFile = FileManager.default.temporaryDirectory.appendingPathComponent("risc-\(UUID().uuidString).log").path
    defer { try? FileManager.default.removeItem(atPath: outputFile) }
    var env = environment
    env["PATH"] = ProcessInfo.processInfo.environment["PATH"]
    let status = try await ChildProcess.spawn(riscReceiverBinary, arguments, environment: env, outputFile: outputFile).wait()
    return (status, (try? String(contentsOfFile: outputFile, encoding: .utf8)) ?? "")
}

@Suite("Configuration errors and migrations")
struct CommandTests {
    @Test("A connection leased before the pool runs waits for it, with no warning: a command's output stays clean")
    func leaseBeforeRun() async throws {
        let logged = LoggedWarnings()
        let client = PostgresClient(
            configuration: try DatabaseURL.configuration(from: Harness.environment("RISC_TEST_DATABASE_URL")),
            backgroundLogger: DatabaseURL.poolLogger(logged.logger()))
        try await withThrowingTaskGroup(of: Bool.self) { group in
            group.addTask {
                try await client.withConnection { _ in }
                return true
            }
            // The lease is asked for first, as `whileRunning`'s body may be when `run()` has not marked the client yet.
            try await Task.sleep(for: .milliseconds(200))
            group.addTask {
                await client.run()
                return false
            }
            #expect(try await group.next() == true)
            group.cancelAll()
        }
        #expect(!logged.contains("run()"), "\(logged.recent)")
    }

    /// Each bad value is checked in-process (ConfigurationTests); this shows what one does to the process, through
    /// both paths: `serve` reading ServiceConfiguration, and another command reading its logging settings.
    @Test(
        "A configuration error exits 2 with one line on standard error naming the variable, and nothing on standard output",
        arguments: [
            ("serve", "RISC_PORT", "http", "risc-receiver: configuration error: RISC_PORT: must be a port number (1-65535)"),
            (
                "migrate", "LOG_LEVEL", "loud",
                "risc-receiver: configuration error: LOG_LEVEL: must be one of trace, debug, info, notice, warning, error, critical"
            ),
        ])
    func configurationError(_ failure: (command: String, variable: String, value: String, line: String)) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("risc-config-error-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let (stdout, stderr) = (directory.appendingPathComponent("stdout").path, directory.appendingPathComponent("stderr").path)
        let environment = [
            "DATABASE_URL": "postgres://postgres@127.0.0.1:1/none?sslmode=disable", "RISC_CLIENT_IDS": "client-1",
            failure.variable: failure.value,
        ]
        // Standard output goes to `outputFile`; the shell sends standard error to a file of its own.
        let status = try await ChildProcess.spawn(
            "/bin/sh", ["-c", #"exec "$0" "$1" 2>"$2""#, riscReceiverBinary, failure.command, stderr],
            environment: environment, outputFile: stdout
        ).wait()
        #expect(status == 2)
        #expect(try String(contentsOfFile: stderr, encoding: .utf8) == failure.line + "\n")
        #expect(try String(contentsOfFile: stdout, encoding: .utf8) == "")
    }

    @Test("An unknown subcommand or option is a usage error")
    func usage() async throws {
        let (status, output) = try await runRiscReceiver(["frobnicate"], environment: [:])
        #expect(status != 0)
        #expect(output.contains("Usage") || output.contains("USAGE"))
        let send = try await runRiscReceiver(["dev", "send", "sessions-revoked"], environment: [:])
        #expect(send.status != 0)
        #expect(send.output.contains("needs --sub"))
        let worker = try await runRiscReceiver(["worker", "--batch-size", "0"], environment: [:])
        #expect(worker.status != 0)
        #expect(worker.output.contains("--batch-size"))
        let port = try await runRiscReceiver(["dev", "transmitter", "--port", "80000"], environment: [:])
        #expect(port.status == 2, "a usage error, not a transmitter on another port")
        #expect(port.output.contains("--port must be 1...65535"))
        let idtoken = try await runRiscReceiver(["dev", "idtoken"], environment: [:])
        #expect(idtoken.status != 0)
        #expect(idtoken.output.contains("--sub"))
    }

    @Test("A wrong DATABASE_URL: within seconds, one line with the server's or the network's reason and where, never the password")
    func unreachableDatabase() async throws {
        let good = try #require(URLComponents(string: Harness.environment("RISC_TEST_DATABASE_URL")))
        let port = try #require(good.port)
        func variant(_ change: (inout URLComponents) -> Void) -> String {
            var url = good
            url.password = "hunter2-secret"
            change(&url)
            return url.string!
        }
        let cases: [(String, String, String)] = [
            ("wrong port", variant { $0.port = 9 }, "127.0.0.1:9 (DATABASE_URL): connection refused"),
            ("wrong database", variant { $0.path = "/no_such_database" }, #"database "no_such_database" does not exist"#),
            ("unknown role", variant { $0.user = "nobody" }, #"role "nobody" does not exist"#),
            ("TLS required", variant { $0.queryItems = [URLQueryItem(name: "sslmode", value: "require")] }, "does not support TLS"),
            ("unknown host", variant { $0.host = "no-such-host.invalid" }, "no-such-host.invalid:\(port) (DATABASE_URL)"),
        ]
        for (name, url, reason) in cases {
            for command in [["migrate"], ["stats"]] {
                let started = ContinuousClock.now
                let (status, output) = try await runRiscReceiver(command, environment: ["DATABASE_URL": url])
                let lines = output.split(separator: "\n")
                #expect(status == 1, "\(name) \(command): \(output)")
                #expect(lines.count == 1, "\(name) \(command): one line, no library logs: \(output)")
                #expect(output.contains("cannot connect to the database at") && output.contains(reason), "\(name) \(command): \(output)")
                #expect(!output.contains("hunter2"), "\(name): the password")
                // A bound on a hang, not a timing target: the first child process of a busy test run can take seconds to start.
                #expect(ContinuousClock.now - started < .seconds(25), "\(name) \(command)")
            }
        }
    }

    @Test("serve on a port in use: one line naming the address, the cause and RISC_PORT, at once, before any worker output")
    func portInUse() async throws {
        try await Harness.with { harness in
            let port = try #require(URLComponents(string: harness.receiverURL)?.port)
            let started = ContinuousClock.now
            let (status, output) = try await runRiscReceiver(
                ["serve"],
                environment: [
                    "DATABASE_URL": Harness.environment("RISC_TEST_DATABASE_URL"), "RISC_CLIENT_IDS": Harness.audience,
                    "RISC_PORT": String(port), "RISC_CONFIGURATION_URL": harness.transmitter.discoveryURL,
                    "GOOGLE_OPENID_CONFIGURATION_URL": harness.transmitter.openIDConfigurationURL,
                ])
            #expect(status == 1)
            #expect(output == "risc-receiver: cannot listen on 127.0.0.1:\(port): address already in use (RISC_PORT)\n", "\(output)")
            #expect(ContinuousClock.now - started < .seconds(10))
        }
    }

    @Test("dev send names the party that failed, at once: the receiver it could not reach, or the transmitter")
    func devSendNamesWhoFailed() async throws {
        try await Harness.with { harness in
            for (arguments, expected) in [
                (
                    ["--transmitter", harness.transmitter.baseURL, "--target", "http://127.0.0.1:9/risc/events"],
                    "risc-receiver: cannot reach the receiver at http://127.0.0.1:9/risc/events: connection refused\n"
                ),
                (
                    ["--transmitter", "http://127.0.0.1:9"],
                    "risc-receiver: cannot reach the development transmitter at http://127.0.0.1:9: connection refused\n"
                ),
            ] {
                let started = ContinuousClock.now
                let (status, output) = try await runRiscReceiver(["dev", "send", "sessions-revoked", "--sub", "1"] + arguments, environment: [:])
                #expect(status == 1)
                #expect(output == expected)
                #expect(ContinuousClock.now - started < .seconds(10), "a refused connection is not retried for 30 s")
            }
        }
    }

    @Test("--version, shell completions, config check --json, and help that names each command's variables")
    func whatUsersExpect() async throws {
        let version = try await runRiscReceiver(["--version"], environment: [:])
        // The version, and the commit it was built from.
        #expect(
            version.status == 0 && version.output.range(of: #"^\d+\.\d+\.\d+ \([0-9a-f]{12}\)\n$"#, options: .regularExpression) != nil,
            "\(version.output)")
        for shell in ["bash", "zsh", "fish"] {
            let completion = try await runRiscReceiver(["--generate-completion-script", shell], environment: [:])
            #expect(completion.status == 0 && completion.output.contains("risc-receiver"), "\(shell)")
        }
        let check = try await runRiscReceiver(
            ["config", "check", "--json"], environment: ["DATABASE_URL": "postgres://app:pw@127.0.0.1/risc", "RISC_CLIENT_IDS": "a"])
        #expect(check.status == 0)
        let object = try JSONValue.parse(Data(check.output.utf8))
        #expect(object["RISC_CLIENT_IDS"] == "a" && object["RISC_PORT"] == "8080")
        #expect(!check.output.contains(":pw@"))
        for (command, variables) in [
            (["serve"], ["DATABASE_URL", "RISC_CLIENT_IDS", "RISC_PORT", "RISC_DATABASE_TIMEOUT"]),
            (["worker"], ["DATABASE_URL", "RISC_MAX_ATTEMPTS"]), (["migrate"], ["DATABASE_URL", "RISC_MIGRATIONS_DIR"]),
            (["events", "list"], ["DATABASE_URL"]), (["stats"], ["DATABASE_URL"]), (["stream", "get"], ["GOOGLE_SERVICE_ACCOUNT_FILE"]),
            (["stream", "verify"], ["GOOGLE_SERVICE_ACCOUNT_FILE", "DATABASE_URL"]), (["vault", "rotate"], ["RISC_VAULT_KEY"]),
            (["config", "check"], ["RISC_CLIENT_IDS"]),
        ] {
            let help = try await runRiscReceiver(["help"] + command, environment: [:])
            for variable in variables { #expect(help.output.contains(variable), "\(command) help names \(variable)") }
            #expect(help.output.contains("(8080)") || command != ["serve"], "defaults shown")
            #expect(!help.output.contains("SPEC"), "\(command)")
        }
    }

    @Test("migrate applies everything once, concurrently safe, and refuses a changed file")
    func migrations() async throws {
        let logger = Harness.logger
        let adminURL = Harness.environment("RISC_TEST_DATABASE_URL")
        let admin = PostgresClient(configuration: try DatabaseURL.configuration(from: adminURL), backgroundLogger: logger)
        let name = "risc_migrate_\(UInt32.random(in: 0...UInt32.max))"
        // A client's pool runs once, so one run spans the whole test.
        try await admin.whileRunning(timeout: .seconds(120)) { admin in
            try await admin.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(name)"), logger: logger)
            try await Self.migrate(databaseURL: adminURL.replacingOccurrences(of: "/risc_test?", with: "/\(name)?"))
            try await IsolatedDatabase.drop(name, admin: admin)
        }
    }

    @Test("The binary carries its migrations: the embedded set equals migrations/, and a copy alone in an empty directory migrates")
    func embeddedMigrations() async throws {
        let onDisk = try Migrator(directory: Harness.repositoryRoot.appendingPathComponent("migrations").path)
        #expect(!onDisk.migrations.isEmpty && !onDisk.routines.isEmpty)
        #expect(Migrator.embedded.migrations == onDisk.migrations)
        #expect(Migrator.embedded.routines == onDisk.routines)

        let logger = Harness.logger
        let adminURL = Harness.environment("RISC_TEST_DATABASE_URL")
        let admin = PostgresClient(configuration: try DatabaseURL.configuration(from: adminURL), backgroundLogger: logger)
        let name = "risc_embedded_\(UInt32.random(in: 0...UInt32.max))"
        let alone = FileManager.default.temporaryDirectory.appendingPathComponent("risc-alone-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: alone, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: alone) }
        // cp, not FileManager: a file this process holds open for writing is inherited by any child another test
        // spawns meanwhile, and the copy cannot run while one of them lives ("Text file busy").
        try await shell("cp '\(riscReceiverBinary)' '\(alone.path)/risc-receiver'")
        try await admin.whileRunning(timeout: .seconds(120)) { admin in
            try await admin.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(name)"), logger: logger)
            let log = alone.appendingPathComponent("migrate.log").path
            let environment = [
                "DATABASE_URL": adminURL.replacingOccurrences(of: "/risc_test?", with: "/\(name)?"), "PATH": "/usr/bin:/bin",
            ]
            let status = try await ChildProcess.spawn(
                "/bin/sh", ["-c", "cd '\(alone.path)' && exec ./risc-receiver migrate"], environment: environment, outputFile: log
            ).wait()
            let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            #expect(status == 0, "\(output)")
            let everything = onDisk.migrations.map(\.version) + onDisk.routines.map { "routines/\($0.version)" }
            #expect(output.contains("Applied \(everything.joined(separator: ", "))."), "\(output)")
            try await IsolatedDatabase.drop(name, admin: admin)
        }
    }

    /// How a running serve stores a batch: this CALL, prepared on each of its connections.
    struct IngestEvents: PostgresPreparedStatement {
        static let sql = """
            CALL risc_ingest_events($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::float8[], $8::text[],
                                    $9::jsonb, $10::bool, NULL, NULL, NULL, NULL)
            """
        typealias Row = [Int64]?
        let jti: String

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 10)
            bindings.append(["https://accounts.google.com/"])
            bindings.append([jti])
            bindings.append([#"["https://schemas.openid.net/secevent/risc/event-type/sessions-revoked"]"#])
            bindings.append(["upgrade-sub"])
            bindings.append(["[]"])
            bindings.append([#"{"jti": "\#(jti)"}"#])
            bindings.append([1_800_000_000.0])
            bindings.append(["pending"])
            bindings.append("[]")
            bindings.append(false)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(([Int64]?, [String]?, [Int64]?, [Int64]?).self).0 }
    }

    @Test("A serve running while an upgrade re-applies a routine keeps storing SETs: its prepared CALL still answers")
    func rollingUpgrade() async throws {
        let current = try Migrator(directory: Harness.repositoryRoot.appendingPathComponent("migrations").path)
        // The next release's routines: the inbox's procedure changed (here, only its text).
        let next = Migrator(
            migrations: current.migrations,
            routines: current.routines.map { routine in
                routine.version == "risc_ingest_events" ? .init(version: routine.version, sql: routine.sql + "\n-- changed\n") : routine
            })
        let logger = Harness.logger
        try await IsolatedDatabase.with(migrator: current) { database in
            // The running binary's connection: its CALL prepared and run once before the upgrade, again after.
            let running = try await PostgresConnection.connect(
                configuration: try DatabaseURL.connectionConfiguration(from: database.url), id: 1, logger: logger)
            do {
                for try await stored in try await running.execute(IngestEvents(jti: "before"), logger: logger) { #expect(stored == [1]) }
                #expect(try await next.migrate(client: database.client, logger: logger) == ["routines/risc_ingest_events"])
                for try await stored in try await running.execute(IngestEvents(jti: "after"), logger: logger) { #expect(stored == [1]) }
            } catch {
                try? await running.close()
                throw error
            }
            try await running.close()
            var jtis: [String] = []
            for try await jti in try await database.client.query("SELECT jti FROM risc_events ORDER BY id", logger: logger).decode(String.self) {
                jtis.append(jti)
            }
            #expect(jtis == ["before", "after"])
            // Nothing changed since: nothing is applied again.
            #expect(try await next.migrate(client: database.client, logger: logger).isEmpty)
            // What earlier releases prepare stays as it was: what the procedure takes and returns (the service now
            // calls risc_ingest_batch). Changing either would fail their prepared CALL mid-rollout.
            let shape = try await database.client.query(
                "SELECT pg_get_function_identity_arguments(oid) FROM pg_proc WHERE proname = 'risc_ingest_events'", logger: logger
            ).collect().map { try $0.decode(String.self) }
            #expect(
                shape == [
                    "IN issuers text[], IN jtis text[], IN types text[], IN subs text[], IN events text[], IN claims text[], "
                        + "IN iats double precision[], IN statuses text[], IN actions jsonb, IN apply boolean, INOUT stored bigint[], "
                        + "INOUT applied_kinds text[], INOUT applied_actions bigint[], INOUT applied_rows bigint[]"
                ])
        }
    }

    @Test("A changed routine is pending (so /readyz is not ready) until migrated; an older release never rolls it back")
    func routineReleases() async throws {
        let current = try Migrator(directory: Harness.repositoryRoot.appendingPathComponent("migrations").path)
        @Sendable func changed(release: String) -> Migrator {
            Migrator(
                migrations: current.migrations,
                routines: current.routines.map { routine in
                    routine.version == "risc_lock_user" ? .init(version: routine.version, sql: routine.sql + "\n-- \(release)\n") : routine
                },
                release: release)
        }
        let logger = Harness.logger
        try await IsolatedDatabase.with(migrator: current) { database in
            let client = database.client
            func checksum() async throws -> String {
                var found = ""
                for try await value in try await client.query("SELECT checksum FROM schema_routines WHERE name = 'risc_lock_user'", logger: logger)
                    .decode(String.self)
                { found = value }
                return found
            }
            #expect(try await current.pending(client: client, timeout: .seconds(60), logger: logger) == [])
            let sameRelease = changed(release: current.release)
            #expect(try await sameRelease.pending(client: client, timeout: .seconds(60), logger: logger) == ["routines/risc_lock_user"])
            #expect(try await sameRelease.migrate(client: client, logger: logger) == ["routines/risc_lock_user"])
            #expect(try await sameRelease.pending(client: client, timeout: .seconds(60), logger: logger) == [])
            // A newer release's routine: the current release's migrate (a host restarted mid-rollout) leaves it.
            let newer = changed(release: "99.0.0")
            #expect(try await newer.migrate(client: client, logger: logger) == ["routines/risc_lock_user"])
            let newerChecksum = try await checksum()
            #expect(try await current.pending(client: client, timeout: .seconds(60), logger: logger) == [])
            #expect(try await current.migrate(client: client, logger: logger) == [])
            #expect(try await checksum() == newerChecksum)
        }
    }

    static func migrate(databaseURL url: String) async throws {
        let logger = Harness.logger
        let environment = ["DATABASE_URL": url, "RISC_MIGRATIONS_DIR": Harness.repositoryRoot.appendingPathComponent("migrations").path]

        // Four at once: the advisory lock lets exactly one apply; the others find nothing to do.
        let results = try await withThrowingTaskGroup(of: (Int32, String).self) { group in
            for _ in 0..<4 { group.addTask { try await runRiscReceiver(["migrate"], environment: environment) } }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(results.allSatisfy { $0.0 == 0 }, "\(results)")
        #expect(results.filter { $0.1.contains("Applied 0001_schema") }.count == 1, "\(results)")
        let again = try await runRiscReceiver(["migrate"], environment: environment)
        #expect(again.status == 0)
        #expect(again.output.contains("up to date"))

        func sqlFiles(_ directory: String) throws -> [String] {
            try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.hasSuffix(".sql") }.map { String($0.dropLast(4)) }.sorted()
        }
        let onDisk = try sqlFiles(environment["RISC_MIGRATIONS_DIR"]!)
        let routinesOnDisk = try sqlFiles(environment["RISC_MIGRATIONS_DIR"]! + "/routines")
        #expect(onDisk.count >= 1 && routinesOnDisk.count >= 2)
        let database = PostgresClient(configuration: try DatabaseURL.configuration(from: url), backgroundLogger: logger)
        try await database.whileRunning { client in
            func column(_ sql: String) async throws -> [String] {
                var values: [String] = []
                for try await value in try await client.query(PostgresQuery(unsafeSQL: sql), logger: logger).decode(String.self) {
                    values.append(value)
                }
                return values
            }
            let applied = try await column("SELECT version FROM schema_migrations ORDER BY version")
            let routines = try await column("SELECT name FROM schema_routines ORDER BY name")
            #expect(applied == onDisk)
            #expect(routines == routinesOnDisk)
            let changed = Migrator(migrations: [.init(version: "0001_schema", sql: "SELECT 1")])
            await #expect(throws: Migrator.Failure.self) { try await changed.migrate(client: client, logger: logger) }
            let older = Migrator(migrations: [])
            await #expect(throws: Migrator.Failure.self) { try await older.migrate(client: client, logger: logger) }
        }
    }
}

@Suite("Configuration files and config check")
struct ConfigFileTests {
    static func write(_ text: String, suffix: String) -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("risc-config-\(UUID().uuidString).\(suffix)").path
        #expect(FileManager.default.createFile(atPath: path, contents: Data(text.utf8)))
        return path
    }

    @Test("A YAML or JSON file supplies variables, the environment overrides it, and secrets are redacted")
    func fileAndEnvironment() async throws {
        let vaultKey = Data(repeating: 7, count: 32).base64EncodedString()
        let yaml = Self.write(
            """
            DATABASE_URL: postgres://app:hunter2-secret@127.0.0.1:5432/risc
            RISC_CLIENT_IDS: from-file.apps.googleusercontent.com
            RISC_PORT: 8181
            RISC_SERVICE_TOKEN: service-token-from-the-file
            RISC_VAULT_KEY: \(vaultKey)
            RISC_MAX_ATTEMPTS: 4
            RISC_HOSTED_DOMAINS: [a.example, B.example]
            LOG_LEVEL: debug
            """, suffix: "yaml")
        let json = Self.write(
            #"""
            {"DATABASE_URL": "postgres://app@127.0.0.1/risc", "RISC_CLIENT_IDS": "json-client", "RISC_SESSION_CACHE": "off",
             "RISC_PORT": 8282, "RISC_IDLE_TIMEOUT": 2.5, "RISC_SHUTDOWN_TIMEOUT": "20", "RISC_ALLOWED_ALGS": ["RS256", "ES256"],
             "LOG_FORMAT": "json"}
            """#,
            suffix: "json")
        defer {
            try? FileManager.default.removeItem(atPath: yaml)
            try? FileManager.default.removeItem(atPath: json)
        }

        let fromYAML = try await runRiscReceiver(["config", "check", "--config", yaml], environment: ["RISC_PORT": "9999"])
        #expect(fromYAML.status == 0, "\(fromYAML.output)")
        #expect(fromYAML.output.contains("RISC_CLIENT_IDS=from-file.apps.googleusercontent.com"))
        #expect(fromYAML.output.contains("RISC_PORT=9999"), "the environment overrides the file")
        #expect(fromYAML.output.contains("RISC_MAX_ATTEMPTS=4"))
        #expect(fromYAML.output.contains("RISC_SERVICE_TOKEN=<redacted>"))
        #expect(fromYAML.output.contains("RISC_HOSTED_DOMAINS=a.example,b.example"))
        #expect(fromYAML.output.contains("LOG_LEVEL=debug"))
        for secret in ["hunter2-secret", "service-token-from-the-file", vaultKey] {
            #expect(!fromYAML.output.contains(secret), "\(secret) is printed")
        }

        let fromJSON = try await runRiscReceiver(["config", "check", "--config", json], environment: [:])
        #expect(fromJSON.status == 0, "\(fromJSON.output)")
        #expect(fromJSON.output.contains("RISC_CLIENT_IDS=json-client"))
        #expect(fromJSON.output.contains("RISC_SESSION_CACHE=off"))
        for line in ["RISC_PORT=8282", "RISC_IDLE_TIMEOUT=2.5", "RISC_SHUTDOWN_TIMEOUT=20", "RISC_ALLOWED_ALGS=ES256,RS256", "LOG_FORMAT=json"] {
            #expect(fromJSON.output.contains(line), "\(fromJSON.output)")
        }
    }

    @Test("A bad value in the file, or an unreadable file, is one line and exit 2")
    func badFile() async throws {
        let bad = Self.write("DATABASE_URL: mysql://nope\nRISC_CLIENT_IDS: x\n", suffix: "yaml")
        let garbage = Self.write("{ this is not json", suffix: "json")
        let badLogLevel = Self.write(
            #"{"DATABASE_URL": "postgres://app@127.0.0.1/risc", "RISC_CLIENT_IDS": "x", "LOG_LEVEL": "loud"}"#, suffix: "json")
        defer {
            try? FileManager.default.removeItem(atPath: bad)
            try? FileManager.default.removeItem(atPath: badLogLevel)
            try? FileManager.default.removeItem(atPath: garbage)
        }
        for (arguments, expected) in [
            (["config", "check", "--config", bad], "DATABASE_URL"),
            (["config", "check", "--config", garbage], "--config"),
            (["config", "check", "--config", badLogLevel], "LOG_LEVEL"),
            (["config", "check", "--config", "/nonexistent.yaml"], "--config"),
        ] {
            let result = try await runRiscReceiver(arguments, environment: [:])
            #expect(result.status == 2, "\(result.output)")
            #expect(result.output.split(separator: "\n").count == 1, "\(result.output)")
            #expect(result.output.contains(expected), "\(result.output)")
        }
    }
}

@Suite("deploy/")
struct DeployTests {
    @Test("Every YAML and JSON file parses, the Kubernetes manifests validate, and every command line they use is accepted")
    func deployFiles() async throws {
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("deploy-check-\(UUID().uuidString).log").path
        defer { try? FileManager.default.removeItem(atPath: log) }
        let script = Harness.repositoryRoot.appendingPathComponent("scripts/check-deploy.py").path
        let status = try await ChildProcess.spawn("/usr/bin/env", ["python3", script, riscReceiverBinary], outputFile: log).wait()
        let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        #expect(status == 0, "\(output)")
        #expect(output.contains("0 problems"), "\(output)")
    }
}
