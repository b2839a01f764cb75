import Configuration
import RISC

/// What the background work reads: `risc-receiver worker` reads only these variables, and `serve` holds them
/// in its `ServiceConfiguration.worker`.
public struct WorkerConfiguration: Sendable {
    public var databaseURL: String
    /// False is shadow mode (RISC_ENFORCE).
    public var enforce = ConfigVariables.enforce.defaultValue
    public var maxAttempts = ConfigVariables.maxAttempts.defaultValue
    public var eventRetentionDays = ConfigVariables.eventRetentionDays.defaultValue
    public var notifyMaxAttempts = ConfigVariables.notifyMaxAttempts.defaultValue
    public var notifyBackoffBaseSeconds = ConfigVariables.notifyBackoffBase.defaultValue
    /// Nil leaves the configured subscribers as they are.
    public var subscribers: [NewSubscriber]?
    public var shutdownTimeoutSeconds = ConfigVariables.shutdownTimeout.defaultValue
    /// Seals refresh tokens and subscribers' secrets; required with RISC_SUBSCRIBERS.
    public var vaultKey: String?
    public var vaultPreviousKeys = ConfigVariables.vaultPreviousKeys.defaultValue

    /// The vault's keys, or nil without RISC_VAULT_KEY.
    public var cipher: VaultCipher? { VaultCipher.from(key: vaultKey, previous: vaultPreviousKeys) }

    /// The variables read, in the order `worker --help` lists them.
    public static let variables: [any ConfigVariableDocumentation] = [
        ConfigVariables.databaseURL, ConfigVariables.enforce, ConfigVariables.maxAttempts, ConfigVariables.eventRetentionDays,
        ConfigVariables.notifyMaxAttempts, ConfigVariables.notifyBackoffBase, ConfigVariables.subscribers,
        ConfigVariables.shutdownTimeout, ConfigVariables.vaultKey, ConfigVariables.vaultPreviousKeys,
    ]

    public init(databaseURL: String) {
        self.databaseURL = databaseURL
    }

    public init(reader: ConfigReader) throws(ServiceConfiguration.Invalid) {
        self.init(databaseURL: try ConfigVariables.databaseURL.value(from: reader))
        enforce = try ConfigVariables.enforce.value(from: reader)
        maxAttempts = try ConfigVariables.maxAttempts.value(from: reader)
        eventRetentionDays = try ConfigVariables.eventRetentionDays.value(from: reader)
        notifyMaxAttempts = try ConfigVariables.notifyMaxAttempts.value(from: reader)
        notifyBackoffBaseSeconds = try ConfigVariables.notifyBackoffBase.value(from: reader)
        subscribers = try ConfigVariables.subscribers.optional(from: reader)
        shutdownTimeoutSeconds = try ConfigVariables.shutdownTimeout.value(from: reader)
        vaultKey = try ConfigVariables.vaultKey.optional(from: reader)
        vaultPreviousKeys = try ConfigVariables.vaultPreviousKeys.value(from: reader)
        try check()
    }

    /// The rules across variables that the worker's part of the configuration has.
    public func check() throws(ServiceConfiguration.Invalid) {
        if subscribers != nil, vaultKey == nil {
            throw .init(
                variable: ConfigVariables.vaultKey.name, problem: "is required with RISC_SUBSCRIBERS: subscribers' secrets are sealed with it")
        }
    }
}
