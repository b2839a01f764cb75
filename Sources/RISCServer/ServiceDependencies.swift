import AsyncHTTPClient
import Foundation
import Logging
import PostgresNIO
import RISC
import RISCConfiguration
import RISCKeys
import RISCStore

/// The parts of the service that outlive one request, built once from the configuration.
public struct ServiceDependencies: Sendable {
    public let postgres: PostgresClient
    /// The most connections `postgres` opens: descriptors the connection cap leaves free.
    public let databaseConnections: Int
    public let inbox: EventInbox
    public let transmitterKeys: IssuerKeys
    /// How soon an unknown `kid` may fetch a transmitter's keys again (Google's, and each Shared Signals transmitter's).
    public let unknownKidRefetchInterval: Double
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
    /// False is shadow mode (RISC_ENFORCE=false).
    public let enforce: Bool

    /// `keyClock` is the key caches' clock (key expiry, the unknown-kid refetch interval): a test moves it on
    /// instead of waiting out a cooldown.
    public init(
        configuration: ServiceConfiguration, logger: Logger,
        inboxSettings: EventInbox.Settings = .init(), unknownKidRefetchInterval: Double = 30,
        keyClock: @escaping @Sendable () -> Date = { Date() }
    ) throws {
        // Every request's wait for the database has the one bound, RISC_DATABASE_TIMEOUT.
        let databaseTimeout = Duration.milliseconds(Int64(configuration.databaseTimeoutSeconds * 1000))
        self.databaseTimeout = databaseTimeout
        enforce = configuration.worker.enforce
        var inboxSettings = inboxSettings
        inboxSettings.commitTimeout = databaseTimeout
        inboxSettings.enforce = configuration.worker.enforce
        // Twice the longest a request waits, and never less than the pool's floor.
        var postgresConfiguration = try DatabaseURL.serviceConfiguration(from: configuration.databaseURL, statementTimeout: databaseTimeout * 2)
        databaseConnections = max(20, inboxSettings.flushers * 2)
        postgresConfiguration.options.maximumConnections = databaseConnections
        postgres = PostgresClient(configuration: postgresConfiguration, backgroundLogger: DatabaseURL.poolLogger(logger))
        let sessionCache = configuration.sessionCache ? SessionCache(client: postgres, logger: logger) : nil
        self.sessionCache = sessionCache
        if let sessionCache { inboxSettings.onApplied = { subs in sessionCache.invalidate(subs: subs) } }
        inbox = EventInbox(client: postgres, settings: inboxSettings, logger: logger)
        var keySettings = IssuerKeys.Settings(
            discoveryURL: configuration.riscConfigurationURL, allowedAlgorithms: configuration.allowedAlgorithms)
        keySettings.unknownKidRefetchInterval = unknownKidRefetchInterval
        self.unknownKidRefetchInterval = unknownKidRefetchInterval
        transmitterKeys = IssuerKeys(settings: keySettings, logger: logger, clock: keyClock)
        setPolicy = SETPolicy(allowedAlgorithms: configuration.allowedAlgorithms, audiences: Set(configuration.clientIDs))

        var providerSettings = IssuerKeys.Settings(discoveryURL: configuration.openIDConfigurationURL, allowedAlgorithms: ["RS256"])
        providerSettings.metricsLabel = "openid"
        providerSettings.unknownKidRefetchInterval = unknownKidRefetchInterval
        identityProvider = IssuerKeys(settings: providerSettings, logger: logger, clock: keyClock)
        idTokenPolicy = IDTokenPolicy(audiences: Set(configuration.clientIDs), hostedDomains: configuration.hostedDomains)
        sessions = SessionStore(
            client: postgres, cache: sessionCache, sessionLifetime: .seconds(configuration.sessionLifetimeSeconds),
            maxSessionsPerUser: configuration.maxSessionsPerUser,
            databaseTimeout: databaseTimeout, logger: logger)
        if configuration.serviceToken != nil, let cipher = configuration.worker.cipher {
            grants = GrantStore(client: postgres, cipher: cipher, timeout: databaseTimeout, logger: logger)
        } else {
            grants = nil
        }
        oauth = OAuthClient(provider: identityProvider, secrets: configuration.clientSecrets)
    }
}
