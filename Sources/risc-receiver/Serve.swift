import ArgumentParser
import AsyncHTTPClient
import Hummingbird
import Logging
import PostgresNIO
import RISC
import RISCStore
import RISCWorker
import RISCServer
import ServiceLifecycle

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the HTTP server (SET receiver, sign-in, sessions, vault) and, unless --no-worker, a worker.")

    @Flag(help: "Run no worker in this process (run `risc-receiver worker` separately).")
    var noWorker = false

    @Option(help: "Directory of the migrations /readyz expects applied (default: those built into this binary).")
    var migrations: String?

    @OptionGroup var config: ConfigFileOption

    func run() async throws {
        let configuration = try await Bootstrap.configuration(file: config.file) { reader throws(ServiceConfiguration.Invalid) in
            try ServiceConfiguration(reader: reader)
        }
        let logger = Bootstrap.logger("risc-receiver", level: configuration.logLevel, format: configuration.logFormat)
        let dependencies = try ServiceDependencies(configuration: configuration, httpClient: .shared, logger: logger)
        let worker: [any Service] = noWorker ? [] : [dependencies.makeWorker(logger: Logger(label: "risc-receiver.worker"))]
        let expected = (try? Bootstrap.migrator(migrations, directory: configuration.migrationsDirectory))?.migrations.map(\.version)
        if expected == nil {
            logger.warning("The migrations directory was not found; /readyz cannot tell whether the schema is current")
        }
        let app = buildApplication(
            configuration: configuration, dependencies: dependencies, logger: logger, expectedMigrations: expected,
            extraServices: worker)
        // SIGTERM/SIGINT: in-flight requests finish, queued SETs commit, the worker finishes its batch, then the
        // pool closes; whatever still runs after RISC_SHUTDOWN_TIMEOUT (a stalled client, say) is cancelled.
        try await Bootstrap.runUntilSignalled(
            [.init(service: app)], shutdownTimeout: configuration.shutdownTimeoutSeconds, logger: logger)
    }
}

struct Worker: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run a worker only: apply stored events to sessions, grants and accounts.")

    @Option(help: "Events claimed per transaction.")
    var batchSize: Int = 500

    @Option(help: "Batches in flight in this process.")
    var concurrency: Int = 2

    @Option(help: "Serve /healthz and /metrics on this port (none by default).")
    var metricsPort: Int?

    @Option(help: "The address for --metrics-port.")
    var metricsHost: String = "127.0.0.1"

    func validate() throws {
        guard (1...10_000).contains(batchSize) else { throw ValidationError("--batch-size must be 1...10000") }
        guard (1...64).contains(concurrency) else { throw ValidationError("--concurrency must be 1...64") }
        if let metricsPort, !(1...65535).contains(metricsPort) { throw ValidationError("--metrics-port must be 1...65535") }
    }

    @OptionGroup var config: ConfigFileOption

    func run() async throws {
        let (databaseURL, maxAttempts, shutdownTimeout) = try await Bootstrap.configuration(file: config.file) {
            reader throws(ServiceConfiguration.Invalid) in
            (
                try ConfigVariables.databaseURL.value(from: reader), try ConfigVariables.maxAttempts.value(from: reader),
                try ConfigVariables.shutdownTimeout.value(from: reader)
            )
        }
        let logger = try await Bootstrap.logger("risc-receiver.worker", file: config.file)
        let postgres = PostgresClient(configuration: try DatabaseURL.configuration(from: databaseURL), backgroundLogger: logger)
        var settings = EventWorker.Settings()
        settings.retryPolicy = RetryPolicy(maxAttempts: maxAttempts)
        settings.batchSize = batchSize
        settings.concurrency = concurrency
        let worker = EventWorker(client: postgres, settings: settings, logger: logger)
        var services: [ServiceGroupConfiguration.ServiceConfiguration] = [.init(service: postgres)]
        if let metricsPort {
            services.append(.init(service: buildMetricsApplication(host: metricsHost, port: metricsPort, postgres: postgres, logger: logger)))
        }
        services.append(.init(service: worker, successTerminationBehavior: .gracefullyShutdownGroup))
        try await Bootstrap.runUntilSignalled(services, shutdownTimeout: shutdownTimeout, logger: logger)
    }
}
