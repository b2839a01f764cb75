import ArgumentParser
import PostgresNIO
import RISCConfiguration
import RISCServer
import RISCStore

struct Migrate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Apply pending database migrations (safe to run concurrently and repeatedly).", discussion: EnvironmentHelp.migrate)

    @Option(help: "Directory of NNNN_name.sql files (and routines/NAME.sql) to apply instead of those built into this binary.")
    var migrations: String?

    @OptionGroup var config: ConfigFileOption

    func run() async throws {
        let (databaseURL, directory) = try await Bootstrap.configuration(file: config.file) {
            reader throws(ServiceConfiguration.Invalid) in
            (try ConfigVariables.databaseURL.value(from: reader), try ConfigVariables.migrationsDirectory.optional(from: reader))
        }
        let logger = try await Bootstrap.logger("risc-receiver.migrate", file: config.file)
        let migrator: Migrator
        do {
            migrator = try Bootstrap.migrator(migrations, directory: directory)
        } catch {
            throw Bootstrap.fail("\(error)")
        }
        let client = try await Bootstrap.commandDatabase(databaseURL, logger: logger)
        do {
            let applied = try await client.whileRunning { client in
                try await migrator.migrate(client: client, logger: logger)
            }
            print(applied.isEmpty ? "Database is up to date." : "Applied \(applied.joined(separator: ", ")).")
        } catch is TimeoutError {
            throw Bootstrap.fail("could not reach the database named by DATABASE_URL")
        } catch let error as Migrator.Failure {
            throw Bootstrap.fail("\(error)")
        } catch let error as PSQLError {
            throw Bootstrap.fail("migration failed: \(error.serverInfo?[.message] ?? String(describing: error.code))")
        }
    }
}
