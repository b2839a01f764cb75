import ArgumentParser
import Foundation
import PostgresNIO
import RISC
import RISCConfiguration
import RISCKeys
import RISCServer
import RISCStore

/// Registering the webhook with Google's RISC management API.
struct StreamCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "stream",
        abstract: "Register and check the webhook with Google's RISC management API (GOOGLE_SERVICE_ACCOUNT_FILE).",
        subcommands: [
            StreamGet.self, StreamUpdate.self, StreamEnable.self, StreamDisable.self, StreamStatus.self, StreamVerify.self, StreamHealth.self,
        ])
}

struct StreamOptions: ParsableArguments {
    @OptionGroup var config: ConfigFileOption

    func client() async throws -> (RISCManagement, baseURL: String) {
        let (key, baseURL) = try await Bootstrap.configuration(file: config.file) { reader throws(ServiceConfiguration.Invalid) in
            (try ConfigVariables.serviceAccountFile.value(from: reader), try ConfigVariables.managementURL.value(from: reader))
        }
        return (RISCManagement(baseURL: baseURL, key: key), baseURL)
    }

    func run<T>(_ call: () async throws(RISCManagement.Failure) -> T) async throws -> T {
        do {
            return try await call()
        } catch {
            throw Bootstrap.fail(error.description)
        }
    }

    /// Tells the delivery probe that the stream changed, when DATABASE_URL is set: `stream health` then says the
    /// last probe's view is out of date rather than repeating it, and a running prober probes again at once.
    /// The change itself is done by then, so a database that cannot be reached is a warning, not a failure.
    func recordChange(_ change: String) async throws {
        let databaseURL = try await Bootstrap.configuration(file: config.file) { reader throws(ServiceConfiguration.Invalid) in
            try ConfigVariables.databaseURL.optional(from: reader)
        }
        guard let databaseURL else { return }
        var quiet = try await Bootstrap.logger("risc-receiver.stream", file: config.file)
        quiet.logLevel = max(quiet.logLevel, .warning)  // the pool's routine lines are not the command's output
        let logger = quiet
        do {
            try await DatabaseURL.check(databaseURL, logger: logger, describeNetwork: NetworkErrors.describe)
            let client = try DatabaseURL.commandClient(databaseURL, logger: logger)
            try await client.whileRunning(timeout: .seconds(10)) { client in
                try await DeliveryProbes(logger: logger).recordStreamChange(change, client: client)
            }
        } catch {
            FileHandle.standardError.write(
                Data(
                    "risc-receiver: warning: the change was not recorded in the database (\(DatabaseErrors.describe(error))); stream health reports the last probe's view until the next probe\n"
                        .utf8))
        }
    }
}

struct StreamGet: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "get", abstract: "Print the stream's configuration (JSON).", discussion: EnvironmentHelp.stream)
    @Flag(help: "Print the management API's JSON object, instead of lines.") var json = false
    @OptionGroup var options: StreamOptions

    func run() async throws {
        let (management, _) = try await options.client()
        let stream = try await options.run { () async throws(RISCManagement.Failure) in try await management.stream() }
        print(json ? stream.serialized : Table.lines(stream))
    }
}

struct StreamUpdate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "update", abstract: "Point the stream at the receiver's URL and choose the event types.",
        discussion: EnvironmentHelp.streamChange)

    @Option(help: "The receiver's public HTTPS URL, ending in /risc/events.")
    var url: String

    @Option(parsing: .upToNextOption, help: "Event types (URIs or short names); default: every type this receiver acts on, and verification.")
    var events: [String] = []

    @OptionGroup var options: StreamOptions

    func validate() throws {
        for event in events where EventType(uriOrShortName: event) == nil && !event.hasPrefix("https://") {
            throw ValidationError("--events: '\(event)' is not an event type")
        }
    }

    func run() async throws {
        let (management, baseURL) = try await options.client()
        // Refused before Google is called: Google only delivers to HTTPS. The one exception is a loopback URL
        // while talking to the loopback development transmitter, so the round trip can be rehearsed locally.
        guard let parsed = URL(string: url), let host = parsed.host,
            parsed.scheme == "https" || (parsed.scheme == "http" && Self.isLoopback(host) && Self.isLoopback(URL(string: baseURL)?.host ?? ""))
        else {
            throw Bootstrap.fail("--url must be an https:// URL (Google only delivers to HTTPS): \(url)", code: 2)
        }
        let types =
            events.isEmpty
            ? EventType.googleRISCTypes.map(\.rawValue) : events.map { EventType(uriOrShortName: $0)?.rawValue ?? $0 }
        try await options.run { () async throws(RISCManagement.Failure) in try await management.update(url: url, events: types) }
        print("Stream updated: \(url) (\(types.count) event types).")
        try await options.recordChange("update \(url)")
    }

    static func isLoopback(_ host: String) -> Bool {
        URLPolicy.isLoopback(host: host)
    }
}

struct StreamEnable: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "enable", abstract: "Let Google deliver events.", discussion: EnvironmentHelp.streamChange)
    @OptionGroup var options: StreamOptions

    func run() async throws {
        let (management, _) = try await options.client()
        try await options.run { () async throws(RISCManagement.Failure) in try await management.setStatus(enabled: true) }
        print("Stream enabled.")
        try await options.recordChange("enable")
    }
}

struct StreamDisable: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "disable", abstract: "Stop deliveries (Google neither sends nor buffers events meanwhile).",
        discussion: EnvironmentHelp.streamChange)
    @OptionGroup var options: StreamOptions

    func run() async throws {
        let (management, _) = try await options.client()
        try await options.run { () async throws(RISCManagement.Failure) in try await management.setStatus(enabled: false) }
        print("Stream disabled.")
        try await options.recordChange("disable")
    }
}

struct StreamStatus: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "status", abstract: "Print enabled or disabled.", discussion: EnvironmentHelp.stream)
    @Flag(help: "Print the management API's JSON object, instead of the status alone.") var json = false
    @OptionGroup var options: StreamOptions

    func run() async throws {
        let (management, _) = try await options.client()
        let status = try await options.run { () async throws(RISCManagement.Failure) in try await management.status() }
        print(json ? status.serialized : status["status"]?.stringValue ?? status.serialized)
    }
}

struct StreamVerify: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Ask Google to send a verification SET; with --wait, wait until it is stored (needs DATABASE_URL).",
        discussion: EnvironmentHelp.streamVerify)

    @Option(help: "The state the verification SET echoes (default: a fresh random one).")
    var state: String?

    @Flag(help: "Wait until the verification SET has arrived and is stored (needs DATABASE_URL).")
    var wait = false

    @Option(help: "With --wait: seconds to wait before giving up.")
    var timeout: Double = 60

    @OptionGroup var options: StreamOptions

    func validate() throws {
        guard timeout > 0 && timeout <= 3600 else { throw ValidationError("--timeout must be 1 to 3600 seconds") }
    }

    func run() async throws {
        let (management, _) = try await options.client()
        let state = self.state ?? "risc-verify-\(UUID().uuidString.lowercased())"
        let databaseURL: String? =
            !wait
            ? nil
            : try await Bootstrap.configuration(file: options.config.file) { reader throws(ServiceConfiguration.Invalid) in
                try ConfigVariables.databaseURL.value(from: reader)
            }
        let requested = ContinuousClock.now
        try await options.run { () async throws(RISCManagement.Failure) in try await management.verify(state: state) }
        print("Verification requested (state \(state)).")
        guard wait, let databaseURL else { return }

        let logger = try await Bootstrap.logger("risc-receiver.stream", file: options.config.file)
        let client = try await Bootstrap.commandDatabase(databaseURL, logger: logger)
        let deadline = requested + .milliseconds(Int(timeout * 1000))
        let received = try await client.whileRunning(timeout: .seconds(Int64(timeout) + 30)) { client -> Bool in
            let probes = DeliveryProbes(logger: logger)
            while ContinuousClock.now < deadline {
                if try await probes.verificationStored(state: state, client: client) { return true }
                try await Task.sleep(for: .milliseconds(50))
            }
            return false
        }
        guard received else { throw Bootstrap.fail("no verification SET with state \(state) arrived within \(timeout) s") }
        let delay = ContinuousClock.now - requested
        let milliseconds = Double(delay.components.seconds) * 1000 + Double(delay.components.attoseconds) / 1e15
        print("Verification SET received and stored after \(String(format: "%.0f", milliseconds)) ms.")
    }
}

struct StreamHealth: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "health",
        abstract: "Whether Google's deliveries reach the service, as the delivery probes recorded it (exit 1 when not).",
        discussion: """
            Reads the database only; it does not call Google. Unhealthy: no verification SET within 2 intervals, the
            stream disabled, its URL not RISC_DELIVERY_URL, or an event type the service acts on not requested.

            """ + EnvironmentHelp.streamHealth)

    @Flag(help: "Print one JSON object, instead of lines.") var json = false
    @OptionGroup var config: ConfigFileOption

    func run() async throws {
        let (databaseURL, interval, deliveryURL) = try await Bootstrap.configuration(file: config.file) {
            reader throws(ServiceConfiguration.Invalid) in
            let interval = try ConfigVariables.verifyInterval.value(from: reader)
            guard interval > 0 else {
                throw ServiceConfiguration.Invalid(
                    variable: ConfigVariables.verifyInterval.name, problem: "is required by stream health (the probe's interval)")
            }
            guard let deliveryURL = try ConfigVariables.deliveryURL.optional(from: reader) else {
                throw ServiceConfiguration.Invalid(
                    variable: ConfigVariables.deliveryURL.name, problem: "is required when RISC_VERIFY_INTERVAL is set")
            }
            return (try ConfigVariables.databaseURL.value(from: reader), interval, deliveryURL)
        }
        let logger = try await Bootstrap.logger("risc-receiver.stream", file: config.file)
        let client = try await Bootstrap.commandDatabase(databaseURL, logger: logger)
        let facts: DeliveryHealth.Facts
        do {
            facts = try await client.whileRunning(timeout: .seconds(60)) { client in try await DeliveryProbes(logger: logger).facts(client: client) }
        } catch is TimeoutError {
            throw Bootstrap.fail("could not reach the database named by DATABASE_URL")
        }
        let health = DeliveryHealth(facts: facts, now: Date(), interval: interval, deliveryURL: deliveryURL)
        try Self.report(health.jsonValue, healthy: health.healthy, problems: health.problems, json: json)
    }

    /// A health report as `stream health` and `streams health` print it: the JSON object, or `healthy`/`UNHEALTHY`, its
    /// fields and one line per problem; exit 1 when unhealthy.
    static func report(_ report: JSONValue, healthy: Bool, problems: [String], json: Bool) throws {
        if json {
            print(report.serialized)
        } else {
            print(healthy ? "healthy" : "UNHEALTHY")
            print(Table.lines(report.objectValue.map { JSONValue.object($0.filter { $0.key != "problems" && $0.key != "healthy" }) } ?? .null))
            for problem in problems { print("problem: \(problem)") }
        }
        if !healthy { throw ExitCode(1) }
    }
}
