import AsyncHTTPClient
import Hummingbird
import Logging
import PostgresNIO
import RISC
import RISCKeys
import RISCStore
import ServiceLifecycle

public typealias AppRequestContext = BasicRequestContext

/// The parts of the service that outlive one request, built once from the configuration.
public struct ServiceDependencies: Sendable {
    public let postgres: PostgresClient
    public let inbox: EventInbox
    public let transmitterKeys: IssuerKeys
    public let setPolicy: SETPolicy

    public init(
        configuration: ServiceConfiguration, httpClient: HTTPClient, logger: Logger,
        inboxSettings: EventInbox.Settings = .init(), unknownKidRefetchInterval: Double = 30
    ) throws {
        var postgresConfiguration = try DatabaseURL.configuration(from: configuration.databaseURL)
        postgresConfiguration.options.maximumConnections = max(20, inboxSettings.flushers * 2)
        postgres = PostgresClient(configuration: postgresConfiguration, backgroundLogger: logger)
        inbox = EventInbox(client: postgres, settings: inboxSettings, logger: logger)
        var keySettings = IssuerKeys.Settings(
            discoveryURL: configuration.riscConfigurationURL, allowedAlgorithms: configuration.allowedAlgorithms)
        keySettings.unknownKidRefetchInterval = unknownKidRefetchInterval
        transmitterKeys = IssuerKeys(settings: keySettings, httpClient: httpClient, logger: logger)
        setPolicy = SETPolicy(allowedAlgorithms: configuration.allowedAlgorithms, audiences: Set(configuration.clientIDs))
    }
}

/// Wires routes and services into one application. The Postgres client starts first and stops last.
public func buildApplication(
    configuration: ServiceConfiguration, dependencies: ServiceDependencies, logger: Logger,
    extraServices: [any Service] = [],
    onServerRunning: @escaping @Sendable (any Channel) async -> Void = { _ in }
) -> some ApplicationProtocol {
    let router = Router(context: AppRequestContext.self)
    router.get("/healthz") { _, _ in HTTPResponse.Status.ok }
    ReceiverController<AppRequestContext>(
        verifier: SETVerifier(keys: dependencies.transmitterKeys, policy: dependencies.setPolicy),
        inbox: dependencies.inbox
    ).addRoutes(to: router)

    return Application(
        router: router,
        configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: nil),
        services: [dependencies.postgres, dependencies.inbox] + extraServices,
        onServerRunning: onServerRunning,
        logger: logger
    )
}
