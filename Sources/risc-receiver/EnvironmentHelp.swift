import RISCConfiguration

/// Each command's help names the variables it reads, with defaults, from their one description.
enum EnvironmentHelp {
    static let database = ConfigVariables.environmentHelp([ConfigVariables.databaseURL] + ConfigVariables.logging)
    static let serve = ConfigVariables.environmentHelp(ConfigVariables.serve)
    static let worker = ConfigVariables.environmentHelp(WorkerConfiguration.variables + ConfigVariables.logging)
    static let migrate = ConfigVariables.environmentHelp(
        [ConfigVariables.databaseURL, ConfigVariables.migrationsDirectory] + ConfigVariables.logging)
    static let stream = ConfigVariables.environmentHelp([ConfigVariables.serviceAccountFile, ConfigVariables.managementURL])
    /// DATABASE_URL, when set, records the change for the delivery probe.
    static let streamChange = ConfigVariables.environmentHelp(
        [ConfigVariables.serviceAccountFile, ConfigVariables.managementURL, ConfigVariables.databaseURL] + ConfigVariables.logging)
    static let streamVerify = ConfigVariables.environmentHelp(
        [ConfigVariables.serviceAccountFile, ConfigVariables.managementURL, ConfigVariables.databaseURL] + ConfigVariables.logging)
    static let streamHealth = ConfigVariables.environmentHelp(
        [ConfigVariables.databaseURL, ConfigVariables.verifyInterval, ConfigVariables.deliveryURL] + ConfigVariables.logging)
    static let vaultRotate = ConfigVariables.environmentHelp(
        [ConfigVariables.databaseURL, ConfigVariables.vaultKey, ConfigVariables.vaultPreviousKeys] + ConfigVariables.logging)
}
