import Configuration
import Foundation

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

    public static let googleRISCConfigurationURL = "https://accounts.google.com/.well-known/risc-configuration"

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

    public init(reader: ConfigReader) throws(Invalid) {
        let variables = VariableReader(reader)
        databaseURL = try Self.databaseURL(from: reader)
        clientIDs = try variables.required("RISC_CLIENT_IDS") { value in
            let ids = value.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            guard !ids.isEmpty else { throw Problem("must list at least one OAuth client ID, comma-separated") }
            return ids
        }
        riscConfigurationURL = try variables.optional("RISC_CONFIGURATION_URL", default: Self.googleRISCConfigurationURL) {
            try Self.httpURL($0)
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
    }

    static func httpURL(_ value: String) throws -> String {
        guard let url = URL(string: value), let scheme = url.scheme, ["http", "https"].contains(scheme), url.host != nil
        else { throw Problem("must be an http(s) URL") }
        return value
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
        guard let value = reader.string(forKey: ConfigKey(Self.key(for: variable)), isSecret: true) else { return nil }
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
