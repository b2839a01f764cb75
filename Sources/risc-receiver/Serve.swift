import ArgumentParser
import AsyncHTTPClient
import Hummingbird
import Logging
import NIOCore
import PostgresNIO
import RISC
import RISCConfiguration
import RISCKeys
import RISCServer
import RISCStore
import RISCWorker
import ServiceLifecycle

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the HTTP server (SET receiver, sign-in, sessions, vault) and, unless --no-worker, a worker.", discussion: EnvironmentHelp.serve
    )

    @Flag(help: "Run no worker in this process (run `risc-receiver worker` separately).")
    var noWorker = false

    @Option(help: "Directory of the migrations /readyz expects applied (default: those built into this binary).")
    var migrations: String?

    @OptionGroup var config: ConfigFileOption

    func run() async throws {
        let (configuration, management) = try await Bootstrap.configuration(file: config.file) {
            reader throws(ServiceConfiguration.Invalid) in
            let configuration = try ServiceConfiguration(reader: reader)
            // The delivery probe talks to Google's management API, with the stream commands' settings.
            guard configuration.verifyIntervalSeconds > 0 else { return (configuration, nil as RISCManagement?) }
            guard let key = try ConfigVariables.serviceAccountFile.optional(from: reader) else {
                throw ServiceConfiguration.Invalid(
                    variable: ConfigVariables.serviceAccountFile.name, problem: "is required when RISC_VERIFY_INTERVAL is set")
            }
            return (configuration, RISCManagement(baseURL: try ConfigVariables.managementURL.value(from: reader), key: key))
        }
        // Before anything starts: a port in use is then one line at once, not after the pool and the key fetches
        // have started and must wind down again.
        if let errno = Self.bindError(host: configuration.host, port: configuration.port) {
            throw Bootstrap.fail(Self.cannotListen(errno: errno, host: configuration.host, port: configuration.port))
        }
        let logger = Bootstrap.logger("risc-receiver", level: configuration.logLevel, format: configuration.logFormat)
        // Before the server derives its connection cap from it.
        FileDescriptorLimit.raise(logger: logger)
        // Before anything makes spans. (The HTTP clients turn AsyncHTTPClient's spans off themselves.)
        let tracing = try TraceExport.start(logger: logger)
        // With its worker, this process also applies each new event as it stores it; with --no-worker, workers do.
        let factory = BackgroundServices(configuration)
        var inboxSettings = EventInbox.Settings()
        inboxSettings.applyOnReceipt = !noWorker
        inboxSettings.outboxSignal = factory.outboxSignal
        let dependencies = try ServiceDependencies(
            configuration: configuration, logger: logger, inboxSettings: inboxSettings)
        // The worker starts once the server listens: a port in use then stops `serve` before the worker says anything.
        let listening = AsyncStream<Void>.makeStream()
        // The worker's jobs: applying waiting events, and delivering the notifications of actions. Delivery health
        // is probed in every serve process, worker or not; one of them probes at a time.
        var background: [any Service] =
            noWorker ? [] : [factory.makeWorker(client: dependencies.postgres), factory.makeDispatcher(client: dependencies.postgres)]
        if let management,
            let prober = try factory.makeProber(client: dependencies.postgres, databaseURL: configuration.databaseURL, management: management)
        {
            background.append(prober)
        }
        let transmitterStore = TransmitterStore(
            client: dependencies.postgres, timeout: dependencies.databaseTimeout, cipher: configuration.worker.cipher, logger: logger)
        if let transmitters = configuration.transmitters {
            let registry = TransmitterRegistry(
                store: transmitterStore, googleConfigurationURL: configuration.riscConfigurationURL, publicURL: configuration.publicURL)
            background.append(ConfiguredTransmitters(registry: registry, configured: transmitters, logger: logger))
        }
        // Poll streams are polled by one instance each, in any serve process, worker or not.
        background.append(
            StreamPoller(
                client: dependencies.postgres, lockConnection: try DatabaseURL.connectionConfiguration(from: configuration.databaseURL),
                store: transmitterStore,
                receivers: StreamReceivers(store: transmitterStore, allowedAlgorithms: configuration.allowedAlgorithms, logger: logger),
                inbox: dependencies.inbox, logger: logger))
        // Each Shared Signals stream is probed on the same interval as Google's, by one instance at a time.
        if configuration.verifyIntervalSeconds > 0 {
            background.append(
                StreamHealthProber(
                    client: dependencies.postgres, store: transmitterStore,
                    interval: .milliseconds(Int64(configuration.verifyIntervalSeconds * 1000)), publicURL: configuration.publicURL, logger: logger))
        }
        let worker: [any Service] = background.isEmpty ? [] : [AfterListening(listening.stream, background)]
        let expected = try? Bootstrap.migrator(migrations, directory: configuration.migrationsDirectory)
        if expected == nil {
            logger.warning("The migrations directory was not found; /readyz cannot tell whether the schema is current")
        }
        logConnectionCap(configuration: configuration, dependencies: dependencies, logger: logger)
        let app = buildApplication(
            configuration: configuration, dependencies: dependencies, logger: logger, expectedSchema: expected,
            extraServices: worker, onServerRunning: { _ in listening.continuation.finish() })
        // SIGTERM/SIGINT: in-flight requests finish, queued SETs commit, the worker finishes its batch, then the
        // pool closes; whatever still runs after RISC_SHUTDOWN_TIMEOUT (a stalled client, say) is cancelled.
        do {
            try await Bootstrap.runUntilSignalled(
                (tracing.map { [.init(service: $0)] } ?? []) + [.init(service: app)], shutdownTimeout: configuration.worker.shutdownTimeoutSeconds,
                logger: logger)
        } catch let error as IOError where [EADDRINUSE, EACCES, EADDRNOTAVAIL].contains(error.errnoCode) {
            // Taken between the check and the server's own bind.
            throw Bootstrap.fail(Self.cannotListen(errno: error.errnoCode, host: configuration.host, port: configuration.port))
        }
    }

    /// `cannot listen on 127.0.0.1:8080: address already in use (RISC_PORT)`: the cause, and the variable to change.
    static func cannotListen(errno: Int32, host: String, port: Int) -> String {
        let variable = errno == EADDRINUSE || errno == EACCES ? "RISC_PORT" : "RISC_HOST"
        return "cannot listen on \(host):\(port): \(String(cString: strerror(errno)).lowercased()) (\(variable))"
    }

    /// Binds a socket to the address as the server will (SO_REUSEADDR) and closes it: the errno that stops the
    /// server from listening there, or nil.
    static func bindError(host: String, port: Int) -> Int32? {
        var hints = addrinfo()
        #if canImport(Glibc)
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        #else
        hints.ai_socktype = SOCK_STREAM
        #endif
        hints.ai_flags = AI_PASSIVE
        var found: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, String(port), &hints, &found) == 0, let address = found else { return EADDRNOTAVAIL }
        defer { freeaddrinfo(found) }
        let descriptor = socket(address.pointee.ai_family, address.pointee.ai_socktype, address.pointee.ai_protocol)
        guard descriptor >= 0 else { return errno }
        defer { close(descriptor) }
        var one: Int32 = 1
        setsockopt(descriptor, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        return bind(descriptor, address.pointee.ai_addr, address.pointee.ai_addrlen) == 0 ? nil : errno
    }
}

/// Runs services side by side once `signal` ends (the server listens), or not at all if shutdown comes first.
struct AfterListening: Service {
    let signal: AsyncStream<Void>
    let services: [any Service]

    init(_ signal: AsyncStream<Void>, _ services: [any Service]) {
        self.signal = signal
        self.services = services
    }

    func run() async throws {
        await cancelWhenGracefulShutdown {
            for await _ in signal {}
        }
        guard !Task.isShuttingDownGracefully, !Task.isCancelled else { return }
        try await withThrowingDiscardingTaskGroup { group in
            for service in services { group.addTask { try await service.run() } }
        }
    }
}

struct Worker: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run a worker only: apply stored events to sessions, grants and accounts, and deliver notifications.",
        discussion: EnvironmentHelp.worker)

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
        let configuration = try await Bootstrap.configuration(file: config.file) { reader throws(ServiceConfiguration.Invalid) in
            try WorkerConfiguration(reader: reader)
        }
        let logger = try await Bootstrap.logger("risc-receiver.worker", file: config.file)
        // Subscribers' webhooks and the database pool draw on it.
        FileDescriptorLimit.raise(logger: logger)
        let tracing = try TraceExport.start(logger: logger)
        let postgres = PostgresClient(
            configuration: try DatabaseURL.serviceConfiguration(from: configuration.databaseURL), backgroundLogger: DatabaseURL.poolLogger(logger))
        var factory = BackgroundServices(configuration)
        factory.worker.batchSize = batchSize
        factory.worker.concurrency = concurrency
        // The exporter first: it stops last, and flushes the spans of the shutdown.
        var services: [ServiceGroupConfiguration.ServiceConfiguration] = (tracing.map { [.init(service: $0)] } ?? []) + [.init(service: postgres)]
        if let metricsPort {
            services.append(.init(service: buildMetricsApplication(host: metricsHost, port: metricsPort, postgres: postgres, logger: logger)))
        }
        services.append(.init(service: factory.makeWorker(client: postgres, logger: logger), successTerminationBehavior: .gracefullyShutdownGroup))
        services.append(
            .init(service: factory.makeDispatcher(client: postgres, logger: logger), successTerminationBehavior: .gracefullyShutdownGroup))
        try await Bootstrap.runUntilSignalled(services, shutdownTimeout: configuration.shutdownTimeoutSeconds, logger: logger)
    }
}
