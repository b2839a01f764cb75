import Configuration
import Foundation

/// One configuration variable, described once: how it is read and checked, its default, whether it is a secret,
/// how `config check` shows it and what the configuration reference's table says of it. The variables are in `ConfigVariables`.
public struct ConfigVariable<Value: Sendable>: Sendable {
    /// What an unset variable means.
    public enum Fallback: Sendable {
        /// Every command that reads the variable needs it.
        case required
        /// Unset is a meaning of its own (no admin token: no admin routes); a command may still require it.
        case unset
        case value(Value)
    }

    public let name: String
    /// Read with `isSecret`, so swift-configuration's access reporting redacts it; `config check` prints no value.
    public let isSecret: Bool
    public let fallback: Fallback
    /// The configuration reference's "Meaning" column.
    public let help: String
    /// What a valid value is; the message of a refused value, unless the parser says more.
    public let rule: String?
    /// Said of the default in the configuration reference ("14 days", "required by `stream`").
    let note: String?
    /// The value as `config check` prints it.
    let show: @Sendable (Value) -> String
    private let read: @Sendable (ConfigReader) throws(Problem) -> Value?

    /// - Parameters:
    ///   - input: what the value is read as before `parse` turns it into a `Value` (throwing `Problem`).
    ///   - show: for `config check`; by default `<redacted>` for a secret, the value's description otherwise.
    init<Input: ConfigInput>(
        _ name: String, as input: Input.Type, default fallback: Fallback, secret: Bool = false, help: String,
        rule: String? = nil, note: String? = nil, show: (@Sendable (Value) -> String)? = nil,
        parse: @escaping @Sendable (Input) throws -> Value
    ) {
        self.name = name
        self.isSecret = secret
        self.fallback = fallback
        self.help = help
        self.rule = rule
        self.note = note
        self.show = show ?? { secret ? "<redacted>" : "\($0)" }
        // The key is the variable's name, as in the environment and in a `--config` file.
        self.read = { reader throws(Problem) in
            guard let input = try Input.read(from: reader, ConfigKey([name]), isSecret: secret) else { return nil }
            do {
                return try parse(input)
            } catch let problem as Problem {
                throw problem
            } catch {
                throw Problem("\(error)")
            }
        }
    }

    /// A variable whose value is used as read, once `valid` accepts it.
    init(
        _ name: String, default fallback: Fallback, secret: Bool = false, help: String, rule: String? = nil,
        note: String? = nil, show: (@Sendable (Value) -> String)? = nil, valid: @escaping @Sendable (Value) -> Bool
    ) where Value: ConfigInput {
        self.init(name, as: Value.self, default: fallback, secret: secret, help: help, rule: rule, note: note, show: show) {
            guard valid($0) else { throw Problem.brokenRule }
            return $0
        }
    }

    /// The value, its default, or nil when the variable is unset and has no default.
    public func optional(from reader: ConfigReader) throws(ServiceConfiguration.Invalid) -> Value? {
        let value: Value?
        do {
            value = try read(reader)
        } catch {
            throw .init(variable: name, problem: error.text ?? rule ?? "is not valid")
        }
        if let value { return value }
        if case .value(let fallback) = fallback { return fallback }
        return nil
    }

    /// The value or its default; unset without a default, the variable is required here.
    public func value(from reader: ConfigReader) throws(ServiceConfiguration.Invalid) -> Value {
        guard let value = try optional(from: reader) else { throw .init(variable: name, problem: "is required but not set") }
        return value
    }

    /// The default, for a property that starts out with it.
    public var defaultValue: Value {
        guard case .value(let value) = fallback else { preconditionFailure("\(name) has no default") }
        return value
    }
}

/// Why a value is refused; the variable's name is added when it becomes `ServiceConfiguration.Invalid`.
struct Problem: Error {
    /// nil: the value breaks the variable's rule, which says why.
    let text: String?
    init(_ text: String) { self.text = text }
    private init() { text = nil }

    static let brokenRule = Problem()
}

/// What a variable is read as. The environment only has text; a JSON or YAML file (`--config`) may hold a number,
/// a boolean or a list where the environment has its text, so the typed read comes first and text second.
protocol ConfigInput: Sendable {
    /// swift-configuration's typed read: a file's number or list, or the environment's text the provider converts.
    static func typed(from reader: ConfigReader, _ key: ConfigKey, isSecret: Bool) -> Self?
    /// The value from text the typed read did not take (`" 8080"`, a JSON string `"8080"`, `on`); nil if it is none.
    init?(text: String)
}

extension ConfigInput {
    /// nil when unset; blank text counts as unset, as `RISC_PORT=` in a shell script means no port.
    /// Text that is no such value breaks the variable's rule.
    static func read(from reader: ConfigReader, _ key: ConfigKey, isSecret: Bool) throws(Problem) -> Self? {
        if let value = typed(from: reader, key, isSecret: isSecret) { return value }
        guard let text = reader.string(forKey: key, isSecret: isSecret)?.trimmingCharacters(in: .whitespacesAndNewlines),
            !text.isEmpty
        else { return nil }
        guard let value = Self(text: text) else { throw .brokenRule }
        return value
    }
}

extension String: ConfigInput {
    /// Text is what `read` takes second. First only a file's number or boolean where text is expected
    /// (`RISC_ADMIN_TOKEN: 12345678901234567890` in YAML), as its text: such a value is never silently unset.
    static func typed(from reader: ConfigReader, _ key: ConfigKey, isSecret: Bool) -> String? {
        guard reader.string(forKey: key, isSecret: isSecret) == nil else { return nil }
        return reader.int(forKey: key, isSecret: isSecret).map { String($0) }
            ?? reader.double(forKey: key, isSecret: isSecret).map { String($0) }
            ?? reader.bool(forKey: key, isSecret: isSecret).map { String($0) }
    }
    init?(text: String) { self = text }
}

extension Int: ConfigInput {
    static func typed(from reader: ConfigReader, _ key: ConfigKey, isSecret: Bool) -> Int? {
        reader.int(forKey: key, isSecret: isSecret)
    }
    init?(text: String) { self.init(text) }
}

extension Double: ConfigInput {
    static func typed(from reader: ConfigReader, _ key: ConfigKey, isSecret: Bool) -> Double? {
        reader.double(forKey: key, isSecret: isSecret)
    }
    init?(text: String) { self.init(text) }
}

extension Bool: ConfigInput {
    static func typed(from reader: ConfigReader, _ key: ConfigKey, isSecret: Bool) -> Bool? {
        reader.bool(forKey: key, isSecret: isSecret)
    }
    /// swift-configuration's words (true, yes, 1) and on/off, which the docs have always used.
    init?(text: String) {
        switch text.lowercased() {
        case "on", "true", "yes", "1": self = true
        case "off", "false", "no", "0": self = false
        default: return nil
        }
    }
}

/// A comma-separated list: a list in a file, `a,b` in the environment. Blank items are dropped.
extension Array: ConfigInput where Element == String {
    static func typed(from reader: ConfigReader, _ key: ConfigKey, isSecret: Bool) -> [String]? {
        let items = reader.stringArray(forKey: key, isSecret: isSecret)?.map(Self.trimmed).filter { !$0.isEmpty }
        // Nothing but blanks: `read` decides from the text whether it is unset (``) or an empty list (` , `).
        return items?.isEmpty == false ? items : nil
    }
    init?(text: String) { self = text.split(separator: ",").map { Self.trimmed(String($0)) }.filter { !$0.isEmpty } }

    private static func trimmed(_ item: String) -> String { item.trimmingCharacters(in: .whitespaces) }
}
