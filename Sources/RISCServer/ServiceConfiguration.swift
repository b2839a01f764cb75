import Configuration
import Foundation
import RISC
import RISCKeys
import RISCStore

/// Everything the service reads from its environment (SPEC §7), validated once at start-up.
public struct ServiceConfiguration: Sendable {
    /// A missing or malformed value: one line that names the variable.
    public struct Invalid: Error, CustomStringConvertible {
        public let variable: String
        public let problem: String
        public var description: String { "\(variable): \(problem)" }
    }

    public var databaseURL: String
    public var clientIDs: [String]
    public var riscConfigurationURL: String
    public var host: String
    public var port: Int
    public var allowedAlgorithms: Set<String>
    public var openIDConfigurationURL: String = Self.googleOpenIDConfigurationURL
    /// The vault's bearer token; without it the vault routes do not exist.
    public var serviceToken: String?
    /// The admin API's bearer token; without it the admin routes do not exist.
    public var adminToken: String?
    /// Base64 AES-256 keys: the current one seals, previous ones only open (for rotation).
    public var vaultKey: String?
    public var vaultPreviousKeys: [String] = []
    public var clientSecrets: [ClientSecret] = []
    public var maxAttempts = 10
    public var sessionLifetimeSeconds = 14 * 24 * 3600
    /// Workspace domains an ID token's `hd` must name; empty for no restriction.
    public var hostedDomains: Set<String> = []
    /// Session checks served from memory, invalidated by NOTIFY (RISC_SESSION_CACHE, default on).
    public var sessionCache = true
    /// A connection that sends nothing for this long, mid-request or between requests, is closed (RISC_IDLE_TIMEOUT).
    public var idleTimeoutSeconds: Double = 30
    /// How long SIGTERM waits for in-flight work before it stops whatever is left (RISC_SHUTDOWN_TIMEOUT).
    public var shutdownTimeoutSeconds: Double = 10

    public static let googleRISCConfigurationURL = "https://accounts.google.com/.well-known/risc-configuration"
    public static let googleOpenIDConfigurationURL = "https://accounts.google.com/.well-known/openid-configuration"

    public init(
        databaseURL: String, clientIDs: [String], riscConfigurationURL: String = Self.googleRISCConfigurationURL,
        host: String = "127.0.0.1", port: Int = 8080, allowedAlgorithms: Set<String> = ["RS256"]
    ) {
        self.databaseURL = databaseURL
        self.clientIDs = clientIDs
        self.riscConfigurationURL = riscConfigurationURL
        self.host = host
        self.port = port
        self.allowedAlgorithms = allowedAlgorithms
    }

    /// Only the database: for `migrate` and the admin commands.
    public static func databaseURL(from reader: ConfigReader) throws(Invalid) -> String {
        try VariableReader(reader).required("DATABASE_URL") { value in
            guard value.hasPrefix("postgres://") || value.hasPrefix("postgresql://") else {
                throw Problem("must be a postgres:// URL")
            }
            return value
        }
    }

    /// The vault keys alone, for `vault rotate`: the current key is required there.
    public static func vaultKeys(from reader: ConfigReader) throws(Invalid) -> (current: String, previous: [String]) {
        let variables = VariableReader(reader)
        let current = try variables.required("RISC_VAULT_KEY") { value in
            guard VaultCipher.key(base64: value) != nil else { throw Problem("must be 32 bytes in base64 (openssl rand -base64 32)") }
            return value
        }
        return (current, try previousVaultKeys(variables))
    }

    static func previousVaultKeys(_ variables: VariableReader) throws(Invalid) -> [String] {
        try variables.optional("RISC_VAULT_PREVIOUS_KEYS", default: []) { value in
            let keys = value.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            guard keys.allSatisfy({ VaultCipher.key(base64: $0) != nil }) else {
                throw Problem("must list 32-byte base64 keys, comma-separated")
            }
            return keys
        }
    }

    /// What the `stream` commands need: the service-account key and the management API's base URL.
    public static func management(from reader: ConfigReader) throws(Invalid) -> (key: ServiceAccountKey, baseURL: String) {
        let variables = VariableReader(reader)
        let key = try variables.required("GOOGLE_SERVICE_ACCOUNT_FILE") { path in
            guard let data = FileManager.default.contents(atPath: path) else { throw Problem("cannot read \(path)") }
            do {
                return try ServiceAccountKey(json: data)
            } catch {
                throw Problem("\(path) is not a usable service-account key file: \(error)")
            }
        }
        let baseURL = try variables.optional("RISC_MANAGEMENT_URL", default: RISCManagement.defaultBaseURL) { value in
            // The service-account JWT grants RISC admin rights for an hour: never send it in the clear,
            // except to a development transmitter on loopback.
            guard URLPolicy.isHTTPSOrLoopback(value) else { throw Problem("must be an https:// URL (http:// only on loopback)") }
            return value
        }
        return (key, baseURL)
    }

    /// The worker's setting: attempts before an event is dead-lettered.
    public static func maxAttempts(from reader: ConfigReader) throws(Invalid) -> Int {
        try VariableReader(reader).optional("RISC_MAX_ATTEMPTS", default: 10) { value in
            guard let attempts = Int(value), (1...1000).contains(attempts) else { throw Problem("must be a number from 1 to 1000") }
            return attempts
        }
    }

    public init(reader: ConfigReader) throws(Invalid) {
        let variables = VariableReader(reader)
        databaseURL = try Self.databaseURL(from: reader)
        clientIDs = try variables.required("RISC_CLIENT_IDS") { value in
            let ids = value.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            guard !ids.isEmpty else { throw Problem("must list at least one OAuth client ID, comma-separated") }
            return ids
        }
        riscConfigurationURL = try variables.optional("RISC_CONFIGURATION_URL", default: Self.googleRISCConfigurationURL) {
            try Self.keySourceURL($0)
        }
        host = try variables.optional("RISC_HOST", default: "127.0.0.1") { $0 }
        port = try variables.optional("RISC_PORT", default: 8080) { value in
            guard let port = Int(value), (0...65535).contains(port) else { throw Problem("must be a port number (0-65535)") }
            return port
        }
        allowedAlgorithms = try variables.optional("RISC_ALLOWED_ALGS", default: ["RS256"]) { value in
            let algs = Set(value.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty })
            guard !algs.isEmpty else { throw Problem("must list at least one algorithm, such as RS256") }
            if let refused = algs.first(where: { alg in
                alg.lowercased() == "none" || alg.uppercased().hasPrefix("HS")
            }) {
                throw Problem("\(refused) can never be allowed: SETs are verified with the transmitter's public keys")
            }
            let supported: Set<String> = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"]
            if let unknown = algs.subtracting(supported).first { throw Problem("\(unknown) is not a supported algorithm") }
            return algs
        }
        openIDConfigurationURL = try variables.optional(
            "GOOGLE_OPENID_CONFIGURATION_URL", default: Self.googleOpenIDConfigurationURL) { try Self.keySourceURL($0) }
        serviceToken = try variables.optional("RISC_SERVICE_TOKEN", default: nil) { value -> String? in
            guard value.count >= 16 else { throw Problem("must be at least 16 characters") }
            return value
        }
        adminToken = try variables.optional("RISC_ADMIN_TOKEN", default: nil) { value -> String? in
            guard value.count >= 16 else { throw Problem("must be at least 16 characters") }
            return value
        }
        vaultKey = try variables.optional("RISC_VAULT_KEY", default: nil) { value -> String? in
            guard VaultCipher.key(base64: value) != nil else { throw Problem("must be 32 bytes in base64 (openssl rand -base64 32)") }
            return value
        }
        if serviceToken != nil, vaultKey == nil {
            throw Invalid(variable: "RISC_VAULT_KEY", problem: "is required when RISC_SERVICE_TOKEN enables the vault")
        }
        vaultPreviousKeys = try Self.previousVaultKeys(variables)
        clientSecrets = try variables.optional("GOOGLE_CLIENT_SECRET_FILES", default: []) { value in
            try value.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }.map { path in
                guard let data = FileManager.default.contents(atPath: path) else { throw Problem("cannot read \(path)") }
                guard let secret = ClientSecret(json: data) else {
                    throw Problem("\(path) is not a Google client-secret file ({\"web\"|\"installed\": {client_id, client_secret}})")
                }
                return secret
            }
        }
        maxAttempts = try Self.maxAttempts(from: reader)
        sessionLifetimeSeconds = try variables.optional("RISC_SESSION_TTL", default: 14 * 24 * 3600) { value in
            guard let seconds = Int(value), seconds >= 60 else { throw Problem("must be a number of seconds, at least 60") }
            return seconds
        }
        sessionCache = try variables.optional("RISC_SESSION_CACHE", default: true) { value in
            switch value.lowercased() {
            case "on", "true", "1": return true
            case "off", "false", "0": return false
            default: throw Problem("must be on or off")
            }
        }
        hostedDomains = try variables.optional("RISC_HOSTED_DOMAINS", default: []) { value in
            Set(value.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces).lowercased() }.filter { !$0.isEmpty })
        }
        idleTimeoutSeconds = try variables.optional("RISC_IDLE_TIMEOUT", default: 30) { try Self.seconds($0, in: 1...3600) }
        shutdownTimeoutSeconds = try Self.shutdownTimeout(from: reader)
    }

    /// SIGTERM's bound, shared by `serve` and `worker`.
    public static func shutdownTimeout(from reader: ConfigReader) throws(Invalid) -> Double {
        try VariableReader(reader).optional("RISC_SHUTDOWN_TIMEOUT", default: 10) { try Self.seconds($0, in: 1...3600) }
    }

    /// Every variable with its effective value, in order, secrets replaced by `<redacted>` and the database
    /// password removed from the URL: what `config check` prints.
    public var redactedSummary: [(String, String)] {
        func secret(_ value: String?) -> String { value == nil ? "<unset>" : "<redacted>" }
        return [
            ("DATABASE_URL", Self.redactingPassword(databaseURL)),
            ("RISC_CLIENT_IDS", clientIDs.joined(separator: ",")),
            ("RISC_CONFIGURATION_URL", riscConfigurationURL),
            ("GOOGLE_OPENID_CONFIGURATION_URL", openIDConfigurationURL),
            ("RISC_HOST", host),
            ("RISC_PORT", String(port)),
            ("RISC_ALLOWED_ALGS", allowedAlgorithms.sorted().joined(separator: ",")),
            ("RISC_ADMIN_TOKEN", secret(adminToken)),
            ("RISC_SERVICE_TOKEN", secret(serviceToken)),
            ("RISC_VAULT_KEY", secret(vaultKey)),
            ("RISC_VAULT_PREVIOUS_KEYS", vaultPreviousKeys.isEmpty ? "<unset>" : "<redacted: \(vaultPreviousKeys.count) keys>"),
            ("GOOGLE_CLIENT_SECRET_FILES", clientSecrets.isEmpty ? "<unset>" : clientSecrets.map(\.clientID).joined(separator: ",") + " (client IDs; secrets redacted)"),
            ("RISC_MAX_ATTEMPTS", String(maxAttempts)),
            ("RISC_SESSION_TTL", String(sessionLifetimeSeconds)),
            ("RISC_SESSION_CACHE", sessionCache ? "on" : "off"),
            ("RISC_HOSTED_DOMAINS", hostedDomains.isEmpty ? "<unset>" : hostedDomains.sorted().joined(separator: ",")),
            ("RISC_IDLE_TIMEOUT", Self.format(idleTimeoutSeconds)),
            ("RISC_SHUTDOWN_TIMEOUT", Self.format(shutdownTimeoutSeconds)),
        ]
    }

    static func format(_ seconds: Double) -> String {
        seconds == seconds.rounded() ? String(Int(seconds)) : String(seconds)
    }

    static func redactingPassword(_ url: String) -> String {
        guard var components = URLComponents(string: url), components.password != nil else { return url }
        components.password = "redacted"
        return components.string ?? "<redacted>"
    }

    /// A discovery document's URL: the keys it leads to decide what is accepted, so it must not travel in the clear.
    static func keySourceURL(_ value: String) throws -> String {
        guard URLPolicy.isHTTPSOrLoopback(value) else { throw Problem("must be an https:// URL (http:// only on loopback)") }
        return value
    }

    static func seconds(_ value: String, in range: ClosedRange<Double>) throws -> Double {
        guard let seconds = Double(value), range.contains(seconds) else {
            throw Problem("must be a number of seconds from \(Int(range.lowerBound)) to \(Int(range.upperBound))")
        }
        return seconds
    }
}

/// Why a value is invalid; the variable's name is added by `VariableReader`.
struct Problem: Error {
    let text: String
    init(_ text: String) { self.text = text }
}

/// Reads environment-style variables (`RISC_PORT`) through swift-configuration, whose environment provider maps
/// the key `risc.port` to `RISC_PORT`, and turns every problem into an error naming the variable.
struct VariableReader {
    let reader: ConfigReader

    init(_ reader: ConfigReader) { self.reader = reader }

    static func key(for variable: String) -> String {
        variable.lowercased().replacingOccurrences(of: "_", with: ".")
    }

    func raw(_ variable: String) -> String? {
        let key = ConfigKey(Self.key(for: variable))
        // A config file may hold numbers, booleans and lists where the environment only has strings.
        let value =
            reader.string(forKey: key, isSecret: true)
            ?? reader.int(forKey: key).map { String($0) }
            ?? reader.bool(forKey: key).map { String($0) }
            ?? reader.stringArray(forKey: key, isSecret: true).map { $0.joined(separator: ",") }
        guard let value else { return nil }
        let trimmed = value.trimmingCharacters(in: .whitespacesAndNewlines)
        return trimmed.isEmpty ? nil : trimmed
    }

    func required<T>(_ variable: String, _ parse: (String) throws -> T) throws(ServiceConfiguration.Invalid) -> T {
        guard let value = raw(variable) else { throw .init(variable: variable, problem: "is required but not set") }
        do { return try parse(value) } catch { throw .init(variable: variable, problem: (error as? Problem)?.text ?? "\(error)") }
    }

    func optional<T>(_ variable: String, default fallback: T, _ parse: (String) throws -> T)
        throws(ServiceConfiguration.Invalid) -> T
    {
        guard let value = raw(variable) else { return fallback }
        do { return try parse(value) } catch { throw .init(variable: variable, problem: (error as? Problem)?.text ?? "\(error)") }
    }
}
