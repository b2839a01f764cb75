import Configuration
import Foundation
import Logging
import RISC
import RISCKeys

/// Everything `serve` reads from its configuration, validated once at start-up. Each property is filled
/// from its `ConfigVariables` entry through `settings`, which also gives `config check` its lines.
public struct ServiceConfiguration: Sendable {
    /// A missing or malformed value: one line that names the variable.
    public struct Invalid: Error, CustomStringConvertible {
        public let variable: String
        public let problem: String
        public var description: String { "\(variable): \(problem)" }

        public init(variable: String, problem: String) {
            self.variable = variable
            self.problem = problem
        }
    }

    /// What `worker` reads too: the database, retries, retention, notifications, the shutdown bound.
    public var worker: WorkerConfiguration
    public var databaseURL: String {
        get { worker.databaseURL }
        set { worker.databaseURL = newValue }
    }
    public var clientIDs: [String]
    public var riscConfigurationURL = ConfigVariables.riscConfigurationURL.defaultValue
    public var openIDConfigurationURL = ConfigVariables.openIDConfigurationURL.defaultValue
    public var host = ConfigVariables.host.defaultValue
    public var port = ConfigVariables.port.defaultValue
    public var allowedAlgorithms = ConfigVariables.allowedAlgorithms.defaultValue
    /// The admin API's bearer token; without it the admin routes do not exist.
    public var adminToken: String?
    /// The vault's bearer token; without it the vault routes do not exist.
    public var serviceToken: String?
    public var vaultKey: String? {
        get { worker.vaultKey }
        set { worker.vaultKey = newValue }
    }
    public var vaultPreviousKeys: [String] {
        get { worker.vaultPreviousKeys }
        set { worker.vaultPreviousKeys = newValue }
    }
    public var clientSecrets = ConfigVariables.clientSecretFiles.defaultValue
    /// Seconds between delivery probes; 0 is off.
    public var verifyIntervalSeconds = ConfigVariables.verifyInterval.defaultValue
    public var deliveryURL: String?
    /// Nil leaves the configured transmitters as they are.
    public var transmitters: [NewTransmitter]?
    /// The service's public base URL: push streams at Shared Signals transmitters deliver to URL/ssf/NAME/events.
    public var publicURL: String?
    public var sessionLifetimeSeconds = ConfigVariables.sessionLifetime.defaultValue
    public var maxSessionsPerUser = ConfigVariables.maxSessionsPerUser.defaultValue
    public var hostedDomains = ConfigVariables.hostedDomains.defaultValue
    public var sessionCache = ConfigVariables.sessionCache.defaultValue
    public var idleTimeoutSeconds = ConfigVariables.idleTimeout.defaultValue
    /// Client connections held at once (RISC_MAX_CONNECTIONS); nil for `defaultMaxConnections`.
    public var maxConnections: Int?
    /// How long a request waits for the database before answering 503 (RISC_DATABASE_TIMEOUT).
    public var databaseTimeoutSeconds = ConfigVariables.databaseTimeout.defaultValue
    public var logLevel = ConfigVariables.logLevel.defaultValue
    public var logFormat = ConfigVariables.logFormat.defaultValue
    /// Migrations to use instead of those built into the binary.
    public var migrationsDirectory: String?

    /// The two required values; everything else at its default.
    public init(databaseURL: String, clientIDs: [String]) {
        self.worker = WorkerConfiguration(databaseURL: databaseURL)
        self.clientIDs = clientIDs
    }

    public init(reader: ConfigReader) throws(Invalid) {
        // Placeholders for the two required values: `settings` reads them like the others (or throws).
        self.init(databaseURL: "", clientIDs: [])
        for setting in Self.settings {
            try setting.read(reader, &self)
        }
        if serviceToken != nil, vaultKey == nil {
            throw Invalid(variable: ConfigVariables.vaultKey.name, problem: "is required when RISC_SERVICE_TOKEN enables the vault")
        }
        try worker.check()
        if transmitters != nil, vaultKey == nil {
            throw Invalid(
                variable: ConfigVariables.vaultKey.name, problem: "is required with RISC_TRANSMITTERS: their credentials are sealed with it")
        }
        if verifyIntervalSeconds > 0, deliveryURL == nil {
            throw Invalid(variable: ConfigVariables.deliveryURL.name, problem: "is required when RISC_VERIFY_INTERVAL is set")
        }
    }

    /// Descriptors `serve` keeps for everything but client connections: the database pool's, 128 for outbound
    /// calls (key fetches, Google's OAuth and management APIs, subscribers' webhooks, the trace exporter), the
    /// standard streams, the listening socket and files, and 3 for each event loop (its epoll, eventfd and timerfd).
    public static func descriptorReserve(databaseConnections: Int, eventLoops: Int) -> Int {
        databaseConnections + 128 + 3 * eventLoops
    }

    /// RISC_MAX_CONNECTIONS when unset: the descriptor limit (the soft one, once raised to the hard) less the
    /// reserve, so that a flood of clients cannot take the descriptors the database and outbound calls need.
    public static func defaultMaxConnections(fileDescriptorLimit: Int, databaseConnections: Int, eventLoops: Int) -> Int {
        max(1, fileDescriptorLimit - descriptorReserve(databaseConnections: databaseConnections, eventLoops: eventLoops))
    }

    /// Every variable with its effective value, in order, secrets replaced by `<redacted>` and the database
    /// password removed from the URL: what `config check` prints.
    public var redactedSummary: [(String, String)] {
        Self.settings.map { ($0.variable.name, $0.show(self)) }
    }

    /// A variable and the property it fills; the order is `config check`'s and the configuration reference's.
    struct Setting: Sendable {
        let variable: any ConfigVariableDocumentation
        let read: @Sendable (ConfigReader, inout ServiceConfiguration) throws(Invalid) -> Void
        let show: @Sendable (ServiceConfiguration) -> String

        init<Value>(_ variable: ConfigVariable<Value>, _ property: WritableKeyPath<ServiceConfiguration, Value> & Sendable) {
            self.variable = variable
            read = { reader, configuration throws(Invalid) in configuration[keyPath: property] = try variable.value(from: reader) }
            show = { variable.show($0[keyPath: property]) }
        }

        /// A variable that may stay unset.
        init<Value>(_ variable: ConfigVariable<Value>, _ property: WritableKeyPath<ServiceConfiguration, Value?> & Sendable) {
            self.variable = variable
            read = { reader, configuration throws(Invalid) in configuration[keyPath: property] = try variable.optional(from: reader) }
            show = { $0[keyPath: property].map(variable.show) ?? "<unset>" }
        }
    }

    static let settings: [Setting] = [
        Setting(ConfigVariables.databaseURL, \.databaseURL),
        Setting(ConfigVariables.clientIDs, \.clientIDs),
        Setting(ConfigVariables.riscConfigurationURL, \.riscConfigurationURL),
        Setting(ConfigVariables.openIDConfigurationURL, \.openIDConfigurationURL),
        Setting(ConfigVariables.host, \.host),
        Setting(ConfigVariables.port, \.port),
        Setting(ConfigVariables.allowedAlgorithms, \.allowedAlgorithms),
        Setting(ConfigVariables.adminToken, \.adminToken),
        Setting(ConfigVariables.serviceToken, \.serviceToken),
        Setting(ConfigVariables.vaultKey, \.vaultKey),
        Setting(ConfigVariables.vaultPreviousKeys, \.vaultPreviousKeys),
        Setting(ConfigVariables.clientSecretFiles, \.clientSecrets),
        Setting(ConfigVariables.enforce, \.worker.enforce),
        Setting(ConfigVariables.maxAttempts, \.worker.maxAttempts),
        Setting(ConfigVariables.eventRetentionDays, \.worker.eventRetentionDays),
        Setting(ConfigVariables.notifyMaxAttempts, \.worker.notifyMaxAttempts),
        Setting(ConfigVariables.notifyBackoffBase, \.worker.notifyBackoffBaseSeconds),
        Setting(ConfigVariables.subscribers, \.worker.subscribers),
        Setting(ConfigVariables.verifyInterval, \.verifyIntervalSeconds),
        Setting(ConfigVariables.deliveryURL, \.deliveryURL),
        Setting(ConfigVariables.publicURL, \.publicURL),
        Setting(ConfigVariables.transmitters, \.transmitters),
        Setting(ConfigVariables.sessionLifetime, \.sessionLifetimeSeconds),
        Setting(ConfigVariables.maxSessionsPerUser, \.maxSessionsPerUser),
        Setting(ConfigVariables.hostedDomains, \.hostedDomains),
        Setting(ConfigVariables.sessionCache, \.sessionCache),
        Setting(ConfigVariables.idleTimeout, \.idleTimeoutSeconds),
        Setting(ConfigVariables.maxConnections, \.maxConnections),
        Setting(ConfigVariables.shutdownTimeout, \.worker.shutdownTimeoutSeconds),
        Setting(ConfigVariables.databaseTimeout, \.databaseTimeoutSeconds),
        Setting(ConfigVariables.logLevel, \.logLevel),
        Setting(ConfigVariables.logFormat, \.logFormat),
        Setting(ConfigVariables.migrationsDirectory, \.migrationsDirectory),
    ]
}
