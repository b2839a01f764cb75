import AsyncHTTPClient
import Hummingbird
import Logging
import PostgresNIO
import RISC
import RISCConfiguration
import RISCKeys
import RISCStore
import ServiceLifecycle

/// The parts of the service that outlive one request, built once from the configuration.
public struct ServiceDependencies: Sendable {
    public let postgres: PostgresClient
    public let inbox: EventInbox
    public let transmitterKeys: IssuerKeys
    public let setPolicy: SETPolicy
    /// Google's OpenID provider: ID-token keys, token and revocation endpoints.
    public let identityProvider: IssuerKeys
    public let idTokenPolicy: IDTokenPolicy
    public let sessions: SessionStore
    /// Nil when RISC_SESSION_CACHE=off: every session check then reads the database.
    public let sessionCache: SessionCache?
    /// Nil unless the vault is configured (RISC_SERVICE_TOKEN and RISC_VAULT_KEY).
    public let grants: GrantStore?
    public let oauth: OAuthClient
    /// RISC_DATABASE_TIMEOUT: the bound of every call a request makes to the database (the admin API's too).
    public let databaseTimeout: Duration

    public init(
        configuration: ServiceConfiguration, httpClient: HTTPClient, logger: Logger,
        inboxSettings: EventInbox.Settings = .init(), unknownKidRefetchInterval: Double = 30
    ) throws {
        // Every request's wait for the database has the one bound, RISC_DATABASE_TIMEOUT.
        let databaseTimeout = Duration.milliseconds(Int64(configuration.databaseTimeoutSeconds * 1000))
        self.databaseTimeout = databaseTimeout
        var inboxSettings = inboxSettings
        inboxSettings.commitTimeout = databaseTimeout
        var postgresConfiguration = try DatabaseURL.configuration(from: configuration.databaseURL)
        postgresConfiguration.options.maximumConnections = max(20, inboxSettings.flushers * 2)
        postgres = PostgresClient(configuration: postgresConfiguration, backgroundLogger: logger)
        let sessionCache = configuration.sessionCache ? SessionCache(client: postgres, logger: logger) : nil
        self.sessionCache = sessionCache
        if let sessionCache { inboxSettings.onApplied = { subs in sessionCache.invalidate(subs: subs) } }
        inbox = EventInbox(client: postgres, settings: inboxSettings, logger: logger)
        var keySettings = IssuerKeys.Settings(
            discoveryURL: configuration.riscConfigurationURL, allowedAlgorithms: configuration.allowedAlgorithms)
        keySettings.unknownKidRefetchInterval = unknownKidRefetchInterval
        transmitterKeys = IssuerKeys(settings: keySettings, logger: logger)
        setPolicy = SETPolicy(allowedAlgorithms: configuration.allowedAlgorithms, audiences: Set(configuration.clientIDs))

        var providerSettings = IssuerKeys.Settings(discoveryURL: configuration.openIDConfigurationURL, allowedAlgorithms: ["RS256"])
        providerSettings.metricsLabel = "openid"
        providerSettings.unknownKidRefetchInterval = unknownKidRefetchInterval
        identityProvider = IssuerKeys(settings: providerSettings, logger: logger)
        idTokenPolicy = IDTokenPolicy(audiences: Set(configuration.clientIDs), hostedDomains: configuration.hostedDomains)
        sessions = SessionStore(
            client: postgres, cache: sessionCache, sessionLifetime: .seconds(configuration.sessionLifetimeSeconds),
            databaseTimeout: databaseTimeout, logger: logger)
        if configuration.serviceToken != nil, let key = configuration.vaultKey.flatMap(VaultCipher.key(base64:)) {
            let cipher = VaultCipher(current: key, previous: configuration.vaultPreviousKeys.compactMap(VaultCipher.key(base64:)))
            grants = GrantStore(client: postgres, cipher: cipher, timeout: databaseTimeout, logger: logger)
        } else {
            grants = nil
        }
        oauth = OAuthClient(httpClient: httpClient, provider: identityProvider, secrets: configuration.clientSecrets)
    }
}

/// Wires routes and services into one application. The Postgres client starts first and stops last.
public func buildApplication(
    configuration: ServiceConfiguration, dependencies: ServiceDependencies, logger: Logger,
    expectedMigrations: [String]? = nil, extraServices: [any Service] = [],
    onServerRunning: @escaping @Sendable (any Channel) async -> Void = { _ in }
) -> some ApplicationProtocol {
    let router = Router(context: AppRequestContext.self)
    _ = Telemetry.registry  // bootstraps swift-metrics before the first metric is recorded
    OperationsController<AppRequestContext>(
        postgres: dependencies.postgres, expectedMigrations: expectedMigrations,
        keys: [("risc_keys", dependencies.transmitterKeys), ("openid_keys", dependencies.identityProvider)],
        // A scrape reads the backlog within 1 s, or goes without it.
        queries: AdminQueries(client: dependencies.postgres, timeout: .seconds(1), logger: logger)
    ).addRoutes(to: router)
    ReceiverController<AppRequestContext>(
        verifier: SETVerifier(keys: dependencies.transmitterKeys, policy: dependencies.setPolicy),
        inbox: dependencies.inbox
    ).addRoutes(to: router)
    SessionController<AppRequestContext>(
        verifier: IDTokenVerifier(keys: dependencies.identityProvider, policy: dependencies.idTokenPolicy),
        sessions: dependencies.sessions
    ).addRoutes(to: router)
    if let adminToken = configuration.adminToken {
        AdminController<AppRequestContext>(
            adminToken: adminToken, queries: AdminQueries(client: dependencies.postgres, timeout: dependencies.databaseTimeout, logger: logger),
            queue: EventQueue(client: dependencies.postgres, timeout: dependencies.databaseTimeout, logger: logger),
            notifications: NotificationStore(client: dependencies.postgres, timeout: dependencies.databaseTimeout, logger: logger)
        ).addRoutes(to: router)
    }
    if let serviceToken = configuration.serviceToken, let grants = dependencies.grants {
        VaultController<AppRequestContext>(serviceToken: serviceToken, grants: grants, oauth: dependencies.oauth)
            .addRoutes(to: router)
    }

    return Application(
        router: router,
        // A client that stalls, mid-request or between requests, loses its connection: it cannot hold one (or a
        // graceful shutdown) open for ever.
        server: .http1(configuration: .init(idleTimeout: .milliseconds(Int64(configuration.idleTimeoutSeconds * 1000)))),
        configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: nil),
        services: [dependencies.postgres, dependencies.inbox, KeyWarmup(keys: [dependencies.transmitterKeys, dependencies.identityProvider])]
            + (dependencies.sessionCache.map { [$0] } ?? []) + extraServices,
        onServerRunning: onServerRunning,
        logger: logger
    )
}
