import AsyncHTTPClient
import Hummingbird
import HummingbirdCore
import Logging
import PostgresNIO
import RISC
import RISCConfiguration
import RISCKeys
import RISCMetrics
import RISCStore
import ServiceLifecycle

/// Wires routes and services into one application. The Postgres client starts first and stops last.
public func buildApplication(
    configuration: ServiceConfiguration, dependencies: ServiceDependencies, logger: Logger,
    expectedSchema: Migrator? = nil, extraServices: [any Service] = [],
    onServerRunning: @escaping @Sendable (any Channel) async -> Void = { _ in }
) -> some ApplicationProtocol {
    let router = Router(context: AppRequestContext.self)
    // First, so that every line a request logs carries its trace; not at all with tracing off.
    if TraceContext.isEnabled { router.add(middleware: RequestTracingMiddleware()) }
    _ = Telemetry.registry  // bootstraps swift-metrics before the first metric is recorded
    ServiceMetrics.enforcement(dependencies.enforce)
    OperationsController<AppRequestContext>(
        postgres: dependencies.postgres, expected: expectedSchema,
        keys: [("risc_keys", dependencies.transmitterKeys), ("openid_keys", dependencies.identityProvider)],
        // A scrape reads the backlog within 1 s, or goes without it.
        reports: AdminReports(client: dependencies.postgres, timeout: .seconds(1), logger: logger)
    ).addRoutes(to: router)
    ReceiverController<AppRequestContext, EventInbox>(
        verifier: SETVerifier(keys: dependencies.transmitterKeys, policy: dependencies.setPolicy),
        inbox: dependencies.inbox,
        streams: StreamReceivers(
            store: TransmitterStore(client: dependencies.postgres, timeout: dependencies.databaseTimeout, logger: logger),
            allowedAlgorithms: configuration.allowedAlgorithms, unknownKidRefetchInterval: dependencies.unknownKidRefetchInterval,
            logger: logger)
    ).addRoutes(to: router)
    SessionController<AppRequestContext, SessionStore>(
        verifier: IDTokenVerifier(keys: dependencies.identityProvider, policy: dependencies.idTokenPolicy),
        sessions: dependencies.sessions
    ).addRoutes(to: router)
    if let adminToken = configuration.adminToken {
        let (postgres, timeout) = (dependencies.postgres, dependencies.databaseTimeout)
        AdminAPI.addRoutes(
            to: router, adminToken: adminToken,
            events: EventAdmin(client: postgres, timeout: timeout, enforce: dependencies.enforce, logger: logger),
            reports: AdminReports(client: postgres, timeout: timeout, mode: EnforcementMode(enforce: dependencies.enforce), logger: logger),
            subscribers: SubscriberStore(client: postgres, timeout: timeout, cipher: configuration.worker.cipher, logger: logger),
            notifications: NotificationOutbox(client: postgres, timeout: timeout, cipher: configuration.worker.cipher, logger: logger),
            transmitters: TransmitterRegistry(
                store: TransmitterStore(client: postgres, timeout: timeout, cipher: configuration.worker.cipher, logger: logger),
                googleConfigurationURL: configuration.riscConfigurationURL, publicURL: configuration.publicURL))
    }
    if let serviceToken = configuration.serviceToken, let grants = dependencies.grants {
        VaultController<AppRequestContext, GrantStore>(serviceToken: serviceToken, grants: grants, oauth: dependencies.oauth)
            .addRoutes(to: router)
    }

    return Application(
        router: router,
        // A client that stalls, mid-request or between requests, loses its connection: it cannot hold one (or a
        // graceful shutdown) open for ever.
        server: .http1(configuration: .init(idleTimeout: .milliseconds(Int64(configuration.idleTimeoutSeconds * 1000)))),
        // At the cap the listening socket is not read (no accept, no spin) until a connection closes; those open are
        // served all the while. The cap leaves descriptors for the database and outbound calls.
        configuration: .init(
            address: .hostname(configuration.host, port: configuration.port), serverName: nil,
            availableConnectionsDelegate: MaximumAvailableConnections(
                connectionCap(configuration: configuration, databaseConnections: dependencies.databaseConnections), logger: logger)),
        services: [dependencies.postgres, dependencies.inbox, KeyWarmup(keys: [dependencies.transmitterKeys, dependencies.identityProvider])]
            + (dependencies.sessionCache.map { [$0] } ?? []) + extraServices,
        onServerRunning: { channel in
            // Should the descriptors run out all the same (the cap set above the limit, descriptors held elsewhere),
            // accept waits for one instead of spinning.
            await AcceptPauseHandler.install(on: channel, logger: logger)
            await onServerRunning(channel)
        },
        logger: logger
    )
}
