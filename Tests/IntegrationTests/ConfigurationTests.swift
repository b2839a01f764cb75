import Configuration
import Foundation
import Logging
import RISCConfiguration
import RISCServer
import Synchronization
import Testing

/// Configuration read in-process from swift-configuration's in-memory provider: text where the environment has
/// text, typed values where a JSON or YAML file holds numbers, booleans and lists. `CommandTests` runs the binary
/// once to show what a configuration error does to the process.
@Suite("Configuration")
struct ConfigurationTests {
    static let validEnvironment: [String: String] = [
        "DATABASE_URL": "postgres://postgres@127.0.0.1:1/none?sslmode=disable", "RISC_CLIENT_IDS": "client-1",
    ]
    static let vaultKey = Data(repeating: 7, count: 32).base64EncodedString()

    /// A reader of these variables, text as in the environment.
    static func reader(_ environment: [String: String], accessReporter: (any AccessReporter)? = nil) -> ConfigReader {
        typedReader(environment.mapValues { ConfigValue(.string($0), isSecret: false) }, accessReporter: accessReporter)
    }

    /// A reader of these values, typed as a configuration file may hold them.
    static func typedReader(_ values: [String: ConfigValue], accessReporter: (any AccessReporter)? = nil) -> ConfigReader {
        let keyed = Dictionary(uniqueKeysWithValues: values.map { (AbsoluteConfigKey([$0.key]), $0.value) })
        return ConfigReader(provider: InMemoryProvider(values: keyed), accessReporter: accessReporter)
    }

    static func configuration(_ overrides: [String: String?]) throws(ServiceConfiguration.Invalid) -> ServiceConfiguration {
        var environment = validEnvironment
        for (variable, value) in overrides { environment[variable] = value }
        return try ServiceConfiguration(reader: reader(environment))
    }

    /// The error, checked to be one line that starts with the variable's name.
    static func invalid<T>(
        _ variable: String, sourceLocation: SourceLocation = #_sourceLocation,
        _ read: () throws(ServiceConfiguration.Invalid) -> T
    ) throws -> ServiceConfiguration.Invalid {
        let error = try #require(throws: ServiceConfiguration.Invalid.self, sourceLocation: sourceLocation) { _ = try read() }
        #expect(error.variable == variable, sourceLocation: sourceLocation)
        #expect("\(error)".hasPrefix("\(variable): "), sourceLocation: sourceLocation)
        #expect(!"\(error)".contains("\n"), sourceLocation: sourceLocation)
        return error
    }

    @Test(
        "Bad configuration is one line naming the variable",
        arguments: [
            ("DATABASE_URL", nil), ("DATABASE_URL", "mysql://x"), ("RISC_CLIENT_IDS", nil), ("RISC_CLIENT_IDS", " , "),
            ("RISC_PORT", "http"), ("RISC_PORT", "70000"), ("RISC_PORT", "0"), ("RISC_ALLOWED_ALGS", "RS256,none"), ("RISC_ALLOWED_ALGS", "HS256"),
            ("RISC_ALLOWED_ALGS", "XX1"), ("RISC_CONFIGURATION_URL", "ftp://example.com/x"),
            ("GOOGLE_OPENID_CONFIGURATION_URL", "not a url"), ("RISC_VAULT_KEY", "c2hvcnQ="),
            ("RISC_VAULT_PREVIOUS_KEYS", "c2hvcnQ="), ("GOOGLE_CLIENT_SECRET_FILES", "/nonexistent/client_secret.json"),
            ("GOOGLE_CLIENT_SECRET_FILES", "/etc/hostname"), ("RISC_MAX_ATTEMPTS", "0"), ("RISC_SESSION_TTL", "ten"),
            ("RISC_SESSION_CACHE", "maybe"), ("RISC_SERVICE_TOKEN", "short"), ("RISC_IDLE_TIMEOUT", "0"),
            ("RISC_SHUTDOWN_TIMEOUT", "forever"), ("LOG_LEVEL", "loud"), ("LOG_FORMAT", "xml"),
            ("RISC_NOTIFY_MAX_ATTEMPTS", "0"), ("RISC_NOTIFY_BACKOFF_BASE", "0"), ("RISC_SUBSCRIBERS", "https://x"),
            ("RISC_SUBSCRIBERS", #"[{"url": "http://hooks.example.com/", "secret": "whsec_MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTIz"}]"#),
            ("RISC_VERIFY_INTERVAL", "0.5"), ("RISC_DELIVERY_URL", "ftp://x/risc/events"), ("RISC_TRANSMITTERS", "{}"),
        ] as [(String, String?)])
    func configurationErrors(_ variable: String, _ value: String?) throws {
        _ = try Self.invalid(variable) { () throws(ServiceConfiguration.Invalid) in try Self.configuration([variable: value]) }
    }

    @Test("The messages say what is wrong")
    func messages() throws {
        for (variable, value, problem) in [
            ("DATABASE_URL", nil, "is required but not set"), ("RISC_PORT", "http", "must be a port number (1-65535)"),
            ("RISC_CLIENT_IDS", " , ", "must list at least one OAuth client ID, comma-separated"),
            ("RISC_ALLOWED_ALGS", "RS256,none", "none can never be allowed: SETs are verified with the transmitter's public keys"),
            ("RISC_ALLOWED_ALGS", "XX1", "XX1 is not a supported algorithm"),
            ("GOOGLE_CLIENT_SECRET_FILES", "/nonexistent/client_secret.json", "cannot read /nonexistent/client_secret.json"),
            ("LOG_LEVEL", "loud", "must be one of trace, debug, info, notice, warning, error, critical"),
            ("RISC_SUBSCRIBERS", #"[{"url": "https://hooks.example.com/"}]"#, "entry 1 has no secret (whsec_...)"),
            (
                "RISC_SUBSCRIBERS",
                #"[{"url": "https://hooks.example.com/", "secret": "whsec_MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTIz", "actions": ["skip"]}]"#,
                "entry 1: actions: 'skip' is not one of revoke_sessions, delete_grants, delete_grant_by_prefix, delete_grant_by_hash, disable_sign_in, enable_sign_in, flag_for_review, require_credential_change"
            ),
            ("RISC_TRANSMITTERS", #"[{"name": "okta"}]"#, "entry 1: issuer is required"),
            (
                "RISC_TRANSMITTERS", #"[{"name": "google", "issuer": "https://ssf.example", "bearer": "t"}]"#,
                "entry 1: name google is the built-in transmitter's name"
            ),
            (
                "RISC_TRANSMITTERS",
                #"[{"name": "a", "issuer": "https://a.example", "bearer": "t"}, {"name": "a", "issuer": "https://b.example", "bearer": "t"}]"#,
                "a name is given twice"
            ),
        ] as [(String, String?, String)] {
            let error = try Self.invalid(variable) { () throws(ServiceConfiguration.Invalid) in try Self.configuration([variable: value]) }
            #expect(error.problem == problem)
        }
    }

    @Test("RISC_TRANSMITTERS without a vault key names RISC_VAULT_KEY; with one, each entry is read")
    func transmittersNeedVaultKey() throws {
        let entry = #"[{"name": "okta", "issuer": "https://okta.example", "client_id": "c", "client_secret": "s"}]"#
        let error = try Self.invalid("RISC_VAULT_KEY") { () throws(ServiceConfiguration.Invalid) in
            try Self.configuration(["RISC_TRANSMITTERS": entry])
        }
        #expect(error.problem.contains("RISC_TRANSMITTERS"))
        let configured = try Self.configuration(["RISC_TRANSMITTERS": entry, "RISC_VAULT_KEY": Self.vaultKey])
        #expect(configured.transmitters?.map(\.name.value) == ["okta"] && configured.transmitters?.first?.issuer == "https://okta.example")
    }

    @Test("The vault's service token without a vault key names RISC_VAULT_KEY")
    func serviceTokenNeedsVaultKey() throws {
        let error = try Self.invalid("RISC_VAULT_KEY") { () throws(ServiceConfiguration.Invalid) in
            try Self.configuration(["RISC_SERVICE_TOKEN": "a-service-token-long-enough"])
        }
        #expect(error.problem.contains("RISC_SERVICE_TOKEN"))
        let vault = try Self.configuration(["RISC_SERVICE_TOKEN": "a-service-token-long-enough", "RISC_VAULT_KEY": Self.vaultKey])
        #expect(vault.serviceToken == "a-service-token-long-enough" && vault.vaultKey == Self.vaultKey)
    }

    @Test("Defaults apply when unset or blank, text is trimmed, and on/off, lists and seconds are understood")
    func environmentText() throws {
        let defaults = try Self.configuration([:])
        #expect(defaults.port == 8080 && defaults.host == "127.0.0.1" && defaults.allowedAlgorithms == ["RS256"])
        #expect(defaults.worker.maxAttempts == 10 && defaults.sessionLifetimeSeconds == 14 * 24 * 3600 && defaults.sessionCache)
        #expect(defaults.idleTimeoutSeconds == 30 && defaults.worker.shutdownTimeoutSeconds == 10)
        #expect(defaults.logLevel == .info && defaults.logFormat == .text && defaults.migrationsDirectory == nil)
        #expect(defaults.adminToken == nil && defaults.vaultPreviousKeys.isEmpty && defaults.hostedDomains.isEmpty)

        let set = try Self.configuration([
            "RISC_PORT": " 9090 ", "RISC_HOST": "", "RISC_CLIENT_IDS": "a, b,,c", "RISC_ALLOWED_ALGS": "ES256, RS256",
            "RISC_SESSION_CACHE": "off", "RISC_IDLE_TIMEOUT": "2.5", "RISC_HOSTED_DOMAINS": "Example.COM, example.org",
            "LOG_LEVEL": "WARNING", "LOG_FORMAT": "json", "RISC_MIGRATIONS_DIR": "/srv/migrations",
            "RISC_VAULT_PREVIOUS_KEYS": "\(Self.vaultKey), \(Self.vaultKey)",
        ])
        #expect(set.port == 9090 && set.host == "127.0.0.1")
        #expect(set.clientIDs == ["a", "b", "c"] && set.allowedAlgorithms == ["ES256", "RS256"])
        #expect(!set.sessionCache && set.idleTimeoutSeconds == 2.5 && set.hostedDomains == ["example.com", "example.org"])
        #expect(set.logLevel == .warning && set.logFormat == .json && set.migrationsDirectory == "/srv/migrations")
        #expect(set.vaultPreviousKeys == [Self.vaultKey, Self.vaultKey])
        #expect(try !Self.configuration(["RISC_SESSION_CACHE": "false"]).sessionCache)
        #expect(try Self.configuration(["RISC_SESSION_CACHE": "on"]).sessionCache)
    }

    @Test("A file's numbers, booleans and lists are read as such, and checked the same way")
    func typedValues() throws {
        let typed: [String: ConfigValue] = [
            "DATABASE_URL": "postgres://app@127.0.0.1/risc", "RISC_CLIENT_IDS": .init(.stringArray(["x", "y"]), isSecret: false),
            "RISC_PORT": 8181, "RISC_MAX_ATTEMPTS": 4, "RISC_SESSION_CACHE": false, "RISC_IDLE_TIMEOUT": 2.5,
            "RISC_SESSION_TTL": "3600", "RISC_ALLOWED_ALGS": .init(.stringArray(["RS256", "PS256"]), isSecret: false),
        ]
        let configuration = try ServiceConfiguration(reader: Self.typedReader(typed))
        #expect(configuration.clientIDs == ["x", "y"] && configuration.port == 8181 && configuration.worker.maxAttempts == 4)
        #expect(!configuration.sessionCache && configuration.idleTimeoutSeconds == 2.5)
        #expect(configuration.sessionLifetimeSeconds == 3600, "a number written as a string, as JSON may")
        #expect(configuration.allowedAlgorithms == ["RS256", "PS256"])
        var numericToken = typed
        numericToken["RISC_ADMIN_TOKEN"] = .init(.int(12_345_678_901_234_567), isSecret: true)
        #expect(
            try ServiceConfiguration(reader: Self.typedReader(numericToken)).adminToken == "12345678901234567",
            "a number where text is expected is its text, never silently unset")

        for (variable, value) in [
            ("RISC_PORT", 70000), ("RISC_MAX_ATTEMPTS", 0),
            ("RISC_ALLOWED_ALGS", .init(.stringArray(["RS256", "none"]), isSecret: false)),
            ("RISC_CLIENT_IDS", .init(.stringArray([" ", ""]), isSecret: false)),
        ] as [(String, ConfigValue)] {
            var values = typed
            values[variable] = value
            _ = try Self.invalid(variable) { () throws(ServiceConfiguration.Invalid) in
                try ServiceConfiguration(reader: Self.typedReader(values))
            }
        }
    }

    @Test("What other commands read alone: the vault key for rotation, the stream commands' key file and API")
    func commandVariables() throws {
        let empty = Self.reader([:])
        let keyError = try Self.invalid("RISC_VAULT_KEY") { () throws(ServiceConfiguration.Invalid) in
            try ConfigVariables.vaultKey.value(from: empty)
        }
        #expect(keyError.problem == "is required but not set")
        #expect(try ConfigVariables.vaultKey.value(from: Self.reader(["RISC_VAULT_KEY": Self.vaultKey])) == Self.vaultKey)
        _ = try Self.invalid("GOOGLE_SERVICE_ACCOUNT_FILE") { () throws(ServiceConfiguration.Invalid) in
            try ConfigVariables.serviceAccountFile.value(from: empty)
        }
        let unreadable = try Self.invalid("GOOGLE_SERVICE_ACCOUNT_FILE") { () throws(ServiceConfiguration.Invalid) in
            try ConfigVariables.serviceAccountFile.value(from: Self.reader(["GOOGLE_SERVICE_ACCOUNT_FILE": "/nonexistent/key.json"]))
        }
        #expect(unreadable.problem == "cannot read /nonexistent/key.json")
        #expect(try ConfigVariables.managementURL.value(from: empty) == "https://risc.googleapis.com/v1beta")
        _ = try Self.invalid("RISC_MANAGEMENT_URL") { () throws(ServiceConfiguration.Invalid) in
            try ConfigVariables.managementURL.value(from: Self.reader(["RISC_MANAGEMENT_URL": "http://example.com/v1beta"]))
        }
    }

    @Test("config check's summary: every variable serve reads, secrets redacted, the database password removed")
    func redactedSummary() throws {
        let configuration = try Self.configuration([
            "DATABASE_URL": "postgres://app:hunter2-secret@127.0.0.1:5432/risc", "RISC_ADMIN_TOKEN": "admin-token-0123456789",
            "RISC_SERVICE_TOKEN": "service-token-0123456789", "RISC_VAULT_KEY": Self.vaultKey,
            "RISC_VAULT_PREVIOUS_KEYS": "\(Self.vaultKey),\(Self.vaultKey)", "RISC_ALLOWED_ALGS": "RS256,ES256",
            "RISC_IDLE_TIMEOUT": "2.5",
        ])
        let lines = configuration.redactedSummary.map { "\($0)=\($1)" }
        for expected in [
            "DATABASE_URL=postgres://app:redacted@127.0.0.1:5432/risc", "RISC_CLIENT_IDS=client-1",
            "RISC_ADMIN_TOKEN=<redacted>", "RISC_SERVICE_TOKEN=<redacted>", "RISC_VAULT_KEY=<redacted>",
            "RISC_VAULT_PREVIOUS_KEYS=<redacted: 2 keys>", "GOOGLE_CLIENT_SECRET_FILES=<unset>", "RISC_ALLOWED_ALGS=ES256,RS256",
            "RISC_PORT=8080", "RISC_SESSION_CACHE=on", "RISC_SESSION_TTL=1209600", "RISC_HOSTED_DOMAINS=<unset>",
            "RISC_IDLE_TIMEOUT=2.5", "RISC_SHUTDOWN_TIMEOUT=10", "LOG_LEVEL=info", "LOG_FORMAT=text", "RISC_MIGRATIONS_DIR=<unset>",
        ] {
            #expect(lines.contains(expected), "\(lines)")
        }
        for secret in ["hunter2-secret", "admin-token-0123456789", "service-token-0123456789", Self.vaultKey] {
            #expect(!lines.joined().contains(secret))
        }
        #expect(try Self.configuration([:]).redactedSummary.first { $0.0 == "RISC_ADMIN_TOKEN" }?.1 == "<unset>")
        // A URL that does not parse (a raw `#` and `%` in the password) still shows no password.
        let unparsed = try Self.configuration(["DATABASE_URL": "postgres://app:hun#ter%2@127.0.0.1/risc"])
        #expect(unparsed.redactedSummary.first { $0.0 == "DATABASE_URL" }?.1 == "<redacted>")
        let documented = Set(ConfigVariables.all.map(\.name))
        #expect(configuration.redactedSummary.allSatisfy { documented.contains($0.0) })
    }

    /// Records whether each value was read as a secret.
    final class SecrecyRecorder: AccessReporter {
        let secrecy = Mutex<[String: Bool]>([:])

        func report(_ event: AccessEvent) {
            guard case .success(let value?) = event.result else { return }
            let name = event.metadata.key.description
            secrecy.withLock { $0[name] = ($0[name] ?? false) || value.isSecret }
        }
    }

    @Test("Exactly the real secrets are read as secrets, so swift-configuration's access reporting redacts only them")
    func onlySecretsAreSecret() throws {
        // RISC_SUBSCRIBERS holds the subscribers' signing secrets, RISC_TRANSMITTERS the transmitters' credentials.
        let secrets: Set = [
            "DATABASE_URL", "RISC_ADMIN_TOKEN", "RISC_SERVICE_TOKEN", "RISC_VAULT_KEY", "RISC_VAULT_PREVIOUS_KEYS", "RISC_SUBSCRIBERS",
            "RISC_TRANSMITTERS",
        ]
        #expect(Set(ConfigVariables.all.filter(\.isSecret).map(\.name)) == secrets)

        let recorder = SecrecyRecorder()
        let environment = Self.validEnvironment.merging([
            "RISC_ADMIN_TOKEN": "admin-token-0123456789", "RISC_SERVICE_TOKEN": "service-token-0123456789",
            "RISC_VAULT_KEY": Self.vaultKey, "RISC_VAULT_PREVIOUS_KEYS": Self.vaultKey, "RISC_PORT": "9090",
            "RISC_HOST": "0.0.0.0", "RISC_SESSION_CACHE": "off", "RISC_MAX_ATTEMPTS": "3", "LOG_LEVEL": "debug",
            "RISC_MANAGEMENT_URL": "https://example.com/v1beta",
            "RISC_SUBSCRIBERS": #"[{"url": "https://hooks.example.com/", "secret": "whsec_MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTIz"}]"#,
            "RISC_TRANSMITTERS": #"[{"name": "okta", "issuer": "https://okta.example", "bearer": "a-bearer-token"}]"#,
        ]) { $1 }
        let reader = Self.reader(environment, accessReporter: recorder)
        _ = try ServiceConfiguration(reader: reader)
        _ = try ConfigVariables.managementURL.value(from: reader)
        let secrecy = recorder.secrecy.withLock { $0 }
        #expect(Set(secrecy.keys) == Set(environment.keys))
        #expect(Set(secrecy.filter(\.value).keys) == secrets)
    }

    @Test("docs/configuration.md's table of variables is the one the binary prints (risc-receiver config variables)")
    func readmeTable() throws {
        let readme = try String(contentsOf: Harness.repositoryRoot.appendingPathComponent("docs/configuration.md"), encoding: .utf8)
        let begin = "<!-- config variables: generated by `risc-receiver config variables` -->\n"
        let end = "<!-- end of config variables -->"
        let start = try #require(readme.range(of: begin), "docs/configuration.md lacks the line \(begin)")
        let stop = try #require(readme.range(of: end, range: start.upperBound..<readme.endIndex))
        #expect(
            String(readme[start.upperBound..<stop.lowerBound]) == ConfigVariables.markdownTable,
            "docs/configuration.md's table is out of date: replace it with the output of `risc-receiver config variables`")
    }
}
