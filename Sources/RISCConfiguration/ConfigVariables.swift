import Configuration
import Foundation
import Logging
import RISC
import RISCKeys

/// Every configuration variable, each described once. `ServiceConfiguration` reads the ones `serve` uses,
/// the other commands read theirs directly (`ConfigVariables.databaseURL.value(from: reader)`), and the configuration reference's
/// table is `markdownTable`.
public enum ConfigVariables {
    public static let databaseURL = ConfigVariable<String>(
        "DATABASE_URL", default: .required, secret: true,  // it may carry the database password
        help: "`postgres://user:password@host:port/db?sslmode=disable|prefer|require`; `?host=/socket/dir` for a Unix socket",
        rule: "must be a postgres:// URL", show: redactingPassword
    ) { $0.hasPrefix("postgres://") || $0.hasPrefix("postgresql://") }

    public static let clientIDs = ConfigVariable<[String]>(
        "RISC_CLIENT_IDS", default: .required,
        help: "comma-separated OAuth client IDs; a SET's and an ID token's `aud` must name one",
        rule: "must list at least one OAuth client ID, comma-separated", show: { $0.joined(separator: ",") }
    ) { !$0.isEmpty }

    public static let riscConfigurationURL = keySourceURL(
        "RISC_CONFIGURATION_URL", default: "https://accounts.google.com/.well-known/risc-configuration",
        help: "the transmitter's discovery document")

    public static let openIDConfigurationURL = keySourceURL(
        "GOOGLE_OPENID_CONFIGURATION_URL", default: "https://accounts.google.com/.well-known/openid-configuration",
        help: "ID-token keys, token and revocation endpoints")

    public static let host = ConfigVariable<String>(
        "RISC_HOST", default: .value("127.0.0.1"),
        help: "the address the server listens on (put TLS in front: Google only delivers to HTTPS)"
    ) { _ in true }

    public static let port = ConfigVariable<Int>(
        "RISC_PORT", default: .value(8080), help: "the port the server listens on", rule: "must be a port number (1-65535)"
    ) { (1...65535).contains($0) }

    static let supportedAlgorithms = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"]

    public static let allowedAlgorithms = ConfigVariable<Set<String>>(
        "RISC_ALLOWED_ALGS", as: [String].self, default: .value(["RS256"]),
        help: "JWS algorithms accepted for SETs (\(supportedAlgorithms.joined(separator: ", "))); `none` and `HS*` are refused",
        rule: "must list at least one algorithm, such as RS256", show: { $0.sorted().joined(separator: ",") }
    ) { list in
        let algs = Set(list)
        guard !algs.isEmpty else { throw Problem.brokenRule }
        if let refused = algs.first(where: { $0.lowercased() == "none" || $0.uppercased().hasPrefix("HS") }) {
            throw Problem("\(refused) can never be allowed: SETs are verified with the transmitter's public keys")
        }
        if let unknown = algs.subtracting(supportedAlgorithms).first { throw Problem("\(unknown) is not a supported algorithm") }
        return algs
    }

    public static let adminToken = bearerToken("RISC_ADMIN_TOKEN", of: "admin")
    public static let serviceToken = bearerToken("RISC_SERVICE_TOKEN", of: "vault")

    static let vaultKeyRule = "must be 32 bytes in base64 (openssl rand -base64 32)"

    /// Base64 AES-256 keys: the current one seals, previous ones only open (for rotation).
    public static let vaultKey = ConfigVariable<String>(
        "RISC_VAULT_KEY", default: .unset, secret: true,
        help: "AES-256 key that seals the vault's refresh tokens, the subscribers' secrets and the transmitters' credentials",
        rule: vaultKeyRule,
        note:
            "required with `RISC_SERVICE_TOKEN`, `RISC_SUBSCRIBERS` or `RISC_TRANSMITTERS`, to add subscribers or transmitters, and by `vault rotate`"
    ) { VaultCipher.key(base64: $0) != nil }

    public static let vaultPreviousKeys = ConfigVariable<[String]>(
        "RISC_VAULT_PREVIOUS_KEYS", default: .value([]), secret: true,
        help: "older vault keys, comma-separated: still read, never written",
        rule: "must list 32-byte base64 keys, comma-separated",
        show: { $0.isEmpty ? "<unset>" : "<redacted: \($0.count) keys>" }
    ) { $0.allSatisfy { VaultCipher.key(base64: $0) != nil } }

    public static let clientSecretFiles = ConfigVariable<[ClientSecret]>(
        "GOOGLE_CLIENT_SECRET_FILES", as: [String].self, default: .value([]),
        help: #"Google client-secret JSON files (`{"web": ...}` or `{"installed": ...}`), comma-separated"#,
        rule: "must list readable Google client-secret files, comma-separated",
        // The paths are not secret; the secrets are in the files, so only their client IDs are shown.
        show: { $0.isEmpty ? "<unset>" : $0.map(\.clientID).joined(separator: ",") + " (client IDs; secrets redacted)" }
    ) { paths in
        try paths.map { path in
            guard let data = FileManager.default.contents(atPath: path) else { throw Problem("cannot read \(path)") }
            guard let secret = ClientSecret(json: data) else {
                throw Problem("\(path) is not a Google client-secret file ({\"web\"|\"installed\": {client_id, client_secret}})")
            }
            return secret
        }
    }

    public static let maxAttempts = ConfigVariable<Int>(
        "RISC_MAX_ATTEMPTS", default: .value(10), help: "attempts before an event is dead-lettered",
        rule: "must be a number from 1 to 1000"
    ) { (1...1000).contains($0) }

    public static let eventRetentionDays = ConfigVariable<Int>(
        "RISC_EVENT_RETENTION_DAYS", default: .value(400),
        help:
            "done and ignored events older than this many days are deleted with their actions, and so are delivered notifications; 0 keeps everything",
        rule: "must be 0 or a number of days from \(EventRetention.minimumDays) (a redelivery must still find its SET)"
    ) { $0 == 0 || $0 >= EventRetention.minimumDays }

    public static let notifyMaxAttempts = ConfigVariable<Int>(
        "RISC_NOTIFY_MAX_ATTEMPTS", default: .value(10),
        help: "delivery attempts before a notification to a subscriber is dead (kept, and can be replayed)",
        rule: "must be a number from 1 to 1000"
    ) { (1...1000).contains($0) }

    public static let notifyBackoffBase = ConfigVariable<Double>(
        "RISC_NOTIFY_BACKOFF_BASE", default: .value(1),
        help: "seconds before a failed notification is retried; the delay doubles each attempt (with jitter, at most an hour)",
        rule: "must be a number of seconds from 0.01 to 3600 (fractions allowed)",
        show: { $0 == $0.rounded() ? String(Int($0)) : String($0) }
    ) { (0.01...3600).contains($0) }

    public static let subscribers = ConfigVariable<[NewSubscriber]>(
        "RISC_SUBSCRIBERS", as: String.self, default: .unset, secret: true,
        help:
            #"subscribers notified of actions, as a JSON array of `{"url", "secret", "actions"}` (`actions` optional); the dispatchers keep the configured subscribers in step with it at start-up, matched by URL, and leave those added with `subscribers add` alone"#,
        rule: #"must be a JSON array of {"url": an https:// URL (http:// only on loopback), "secret": "whsec_...", "actions": [action kinds]}"#,
        show: { "<redacted: \($0.count) subscribers>" }
    ) { text in
        guard let list = try? JSONValue.parse(Data(text.utf8)).arrayValue else { throw Problem.brokenRule }
        return try list.enumerated().map { index, entry in
            guard let url = entry["url"]?.stringValue else { throw Problem("entry \(index + 1) has no url") }
            guard let secret = entry["secret"]?.stringValue else { throw Problem("entry \(index + 1) has no secret (whsec_...)") }
            let actions = try entry["actions"].map { value in
                guard let names = value.arrayValue?.compactMap(\.stringValue) else { throw Problem("entry \(index + 1): actions must be a list") }
                return names
            }
            do throws(InvalidParameter) {
                return try NewSubscriber(url: url, secret: secret, actions: actions)
            } catch {
                throw Problem("entry \(index + 1): \(error.description)")
            }
        }
    }

    public static let transmitters = ConfigVariable<[NewTransmitter]>(
        "RISC_TRANSMITTERS", as: String.self, default: .unset, secret: true,
        help:
            #"Shared Signals transmitters, as a JSON array of the fields of `POST /admin/v1/transmitters` (`name`, `issuer`, `client_id` and `client_secret`, ...); `serve` keeps the configured transmitters in step with it at start-up, matched by name, and leaves those added with `transmitters add` alone"#,
        rule: #"must be a JSON array of {"name", "issuer", "client_id", "client_secret" | "client_key" | "bearer", ...}, each name once"#,
        show: { "<redacted: \($0.count) transmitters>" }
    ) { text in
        guard let list = try? JSONValue.parse(Data(text.utf8)).arrayValue else { throw Problem.brokenRule }
        let transmitters = try list.enumerated().map { index, entry in
            do throws(InvalidParameter) {
                return try NewTransmitter(json: entry)
            } catch {
                throw Problem("entry \(index + 1): \(error.name) \(error.problem)")
            }
        }
        guard Set(transmitters.map(\.name)).count == transmitters.count else { throw Problem("a name is given twice") }
        return transmitters
    }

    public static let verifyInterval = ConfigVariable<Double>(
        "RISC_VERIFY_INTERVAL", default: .value(0),
        help: "seconds between delivery probes (a verification SET asked of Google's management API, waited for end to end); 0 is off",
        rule: "must be 0 (off) or a number of seconds from 1 to 86400",
        note: "needs `RISC_DELIVERY_URL` and `GOOGLE_SERVICE_ACCOUNT_FILE`",
        show: { $0 == $0.rounded() ? String(Int($0)) : String($0) }
    ) { $0 == 0 || (1...86400).contains($0) }

    public static let deliveryURL = ConfigVariable<String>(
        "RISC_DELIVERY_URL", default: .unset,
        help: "the public URL Google should deliver SETs to (ending in /risc/events), which the probe checks the stream against",
        rule: httpsRule, note: "required with `RISC_VERIFY_INTERVAL`", valid: URLPolicy.isHTTPSOrLoopback)

    public static let sessionLifetime = ConfigVariable<Int>(
        "RISC_SESSION_TTL", default: .value(14 * 24 * 3600), help: "session lifetime in seconds",
        rule: "must be a number of seconds, at least 60", note: "14 days"
    ) { $0 >= 60 }

    public static let maxSessionsPerUser = ConfigVariable<Int>(
        "RISC_MAX_SESSIONS_PER_USER", default: .value(50),
        help: "live sessions a user may have; a sign-in beyond that ends the oldest", rule: "must be a number from 1 to 10000"
    ) { (1...10000).contains($0) }

    /// Workspace domains an ID token's `hd` must name; empty for no restriction.
    public static let hostedDomains = ConfigVariable<Set<String>>(
        "RISC_HOSTED_DOMAINS", as: [String].self, default: .value([]),
        help: "if set, an ID token's `hd` must be one of these comma-separated domains",
        show: { $0.isEmpty ? "<unset>" : $0.sorted().joined(separator: ",") }
    ) { Set($0.map { $0.lowercased() }) }

    public static let sessionCache = ConfigVariable<Bool>(
        "RISC_SESSION_CACHE", default: .value(true),
        help: "serve session checks from memory, invalidated by NOTIFY", rule: "must be on or off",
        show: { $0 ? "on" : "off" }
    ) { _ in true }

    /// Shadow mode when false: actions are decided and recorded with the rows they would change, and change nothing.
    public static let enforce = ConfigVariable<Bool>(
        "RISC_ENFORCE", default: .value(true),
        help:
            "`false` for shadow mode: every SET is verified, stored and its actions recorded as shadow actions, and no session, grant, account state or notification changes",
        rule: "must be true or false",
        show: { $0 ? "true" : "false" }
    ) { _ in true }

    public static let idleTimeout = seconds(
        "RISC_IDLE_TIMEOUT", default: 30,
        help: "seconds a connection may send nothing, mid-request or between requests, before it is closed")

    /// Unset, `ServiceConfiguration.defaultMaxConnections` derives it from the descriptor limit.
    public static let maxConnections = ConfigVariable<Int>(
        "RISC_MAX_CONNECTIONS", default: .unset,
        help: "client connections held at once; at the cap the server accepts no more until one closes, and serves those it holds",
        rule: "must be a number from 1 to 1000000",
        note: "the file-descriptor limit less a reserve for the database and outbound calls: limit − (database pool + 128 + 3 per event loop)"
    ) { (1...1_000_000).contains($0) }

    public static let shutdownTimeout = seconds(
        "RISC_SHUTDOWN_TIMEOUT", default: 10,
        help:
            "seconds SIGTERM waits for in-flight requests and the worker batch before it cancels what is left and exits 0 (`serve` and `worker`; should that not end it either, it exits 1 five seconds later)"
    )

    public static let databaseTimeout = seconds(
        "RISC_DATABASE_TIMEOUT", default: 5,
        help: "seconds storing a SET, a sign-in or a session check waits for the database before answering 503 with Retry-After")

    public static let logLevel = ConfigVariable<Logger.Level>(
        "LOG_LEVEL", as: String.self, default: .value(.info), help: "swift-log level",
        rule: "must be one of \(Logger.Level.allCases.map(\.rawValue).joined(separator: ", "))"
    ) { text in
        guard let level = Logger.Level(rawValue: text.lowercased()) else { throw Problem.brokenRule }
        return level
    }

    public static let logFormat = ConfigVariable<LogFormat>(
        "LOG_FORMAT", as: String.self, default: .value(.text),
        help: "`json` for one JSON object per line (request lines carry `hb.request.id`), `text` for `key=value` lines",
        rule: "must be text or json"
    ) { text in
        guard let format = LogFormat(rawValue: text.lowercased()) else { throw Problem.brokenRule }
        return format
    }

    public static let migrationsDirectory = ConfigVariable<String>(
        "RISC_MIGRATIONS_DIR", default: .unset,
        help: "a directory of `NNNN_name.sql` files and `routines/NAME.sql` to use instead (`--migrations DIR` overrides it)",
        note: "the migrations built into the binary"
    ) { _ in true }

    /// The `stream` commands' service-account key, read from the file the variable names.
    public static let serviceAccountFile = ConfigVariable<ServiceAccountKey>(
        "GOOGLE_SERVICE_ACCOUNT_FILE", as: String.self, default: .unset,
        help: "the service-account key file (JSON) that signs management-API requests",
        rule: "must name a service-account key file", note: "required by `stream`", show: \.clientEmail
    ) { path in
        guard let data = FileManager.default.contents(atPath: path) else { throw Problem("cannot read \(path)") }
        do {
            return try ServiceAccountKey(json: data)
        } catch {
            throw Problem("\(path) is not a usable service-account key file: \(error)")
        }
    }

    public static let managementURL = ConfigVariable<String>(
        "RISC_MANAGEMENT_URL", default: .value(RISCManagement.defaultBaseURL), help: "Google's RISC management API",
        // The service-account JWT grants RISC admin rights for an hour: never send it in the clear,
        // except to a development transmitter on loopback.
        rule: httpsRule, valid: URLPolicy.isHTTPSOrLoopback)

    /// Every variable, in the configuration reference's order: those `serve` reads (and `config check` prints), then the `stream` commands' own.
    public static let publicURL = ConfigVariable<String>(
        "RISC_PUBLIC_URL", default: .unset,
        help: "the service's public base URL, from which the push endpoints of Shared Signals streams are made (URL/ssf/NAME/events)",
        rule: httpsRule, note: "required to create or replace a push stream", valid: URLPolicy.isHTTPSOrLoopback)

    public static let all: [any ConfigVariableDocumentation] =
        ServiceConfiguration.settings.map(\.variable) + [serviceAccountFile, managementURL]

    /// The configuration reference's table of variables; `risc-receiver config variables` prints it, and a test holds docs/configuration.md to it.
    /// A command's help text about its variables: name, default and meaning, from the same descriptions.
    public static func environmentHelp(_ variables: [any ConfigVariableDocumentation]) -> String {
        let lines = variables.map { variable in
            let defaultText = variable.documentedDefault.replacingOccurrences(of: "`", with: "")
            return
                "  \(variable.name) (\(defaultText)\(variable.isSecret ? ", secret" : "")): \(variable.help.replacingOccurrences(of: "`", with: ""))"
        }
        return (["Environment (or --config FILE):"] + lines).joined(separator: "\n")
    }

    /// The variables `serve` reads.
    public static var serve: [any ConfigVariableDocumentation] { ServiceConfiguration.settings.map(\.variable) }
    /// The logging variables every command reads.
    public static var logging: [any ConfigVariableDocumentation] { [logLevel, logFormat] }

    public static var markdownTable: String {
        let rows = all.map { variable in
            let name = "`\(variable.name)`" + (variable.isSecret ? " (secret)" : "")
            let meaning = variable.help + (variable.rule.map { "; \($0)" } ?? "")
            // A `|` inside a cell would end it.
            return "| \(name) | \(variable.documentedDefault) | \(meaning.replacingOccurrences(of: "|", with: #"\|"#)) |"
        }
        return (["| Variable | Default | Meaning |", "|---|---|---|"] + rows).joined(separator: "\n") + "\n"
    }

    // MARK: Kinds of variable that share a rule

    static let httpsRule = "must be an https:// URL (http:// only on loopback)"

    /// A discovery document's URL: the keys it leads to decide what is accepted, so it must not travel in the clear.
    static func keySourceURL(_ name: String, default url: String, help: String) -> ConfigVariable<String> {
        ConfigVariable(name, default: .value(url), help: help, rule: httpsRule, valid: URLPolicy.isHTTPSOrLoopback)
    }

    static func bearerToken(_ name: String, of api: String) -> ConfigVariable<String> {
        ConfigVariable(
            name, default: .unset, secret: true, help: "bearer token of the \(api) API; unset, the \(api) routes do not exist",
            rule: "must be at least 16 characters"
        ) { $0.count >= 16 }
    }

    static func seconds(_ name: String, default seconds: Double, help: String) -> ConfigVariable<Double> {
        ConfigVariable(
            name, default: .value(seconds), help: help, rule: "must be a number of seconds from 1 to 3600",
            show: { $0 == $0.rounded() ? String(Int($0)) : String($0) }
        ) { (1...3600).contains($0) }
    }

    /// The URL with its password replaced: what `config check` prints of `DATABASE_URL`.
    static func redactingPassword(_ url: String) -> String {
        // A URL that does not parse (a raw `#` in the password, say) could still hold one: print none of it.
        guard var components = URLComponents(string: url) else { return "<redacted>" }
        guard components.password != nil else { return url }
        components.password = "redacted"
        return components.string ?? "<redacted>"
    }
}

/// How log lines are written (`LOG_FORMAT`).
public enum LogFormat: String, Sendable {
    /// `key=value` lines.
    case text
    /// One JSON object per line, for log collectors.
    case json
}

/// What the configuration reference's table says of a variable, whatever its type.
public protocol ConfigVariableDocumentation: Sendable {
    var name: String { get }
    var isSecret: Bool { get }
    var help: String { get }
    var rule: String? { get }
    /// "required", "unset", or the default as `config check` prints it; and the note, if any.
    var documentedDefault: String { get }
}

extension ConfigVariable: ConfigVariableDocumentation {
    public var documentedDefault: String {
        let base =
            switch fallback {
            case .required: "required"
            case .unset: "unset"
            // An empty list is `<unset>` in `config check`, and no different from unset.
            case .value(let value): show(value) == "<unset>" ? "unset" : "`\(show(value))`"
            }
        return base + (note.map { " (\($0))" } ?? "")
    }
}
