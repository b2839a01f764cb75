import ArgumentParser
import Foundation
import RISC
import RISCConfiguration
import RISCKeys
import RISCServer
import RISCStore

/// The stream the service manages at each Shared Signals transmitter (Google's is the `stream` command's).
struct Streams: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "The stream at a Shared Signals transmitter: create, show, update, replace, delete, status, verify, subjects.",
        subcommands: [
            StreamsCreate.self, StreamsShow.self, StreamsUpdate.self, StreamsReplace.self, StreamsDelete.self, StreamsStatus.self,
            StreamsVerify.self, StreamsSubjects.self, StreamsHealth.self,
        ])
}

extension ManagedStream {
    /// Runs `body` with the stream of the transmitter `text` names (one database client for the whole command); a
    /// failure is the command's, in one line.
    static func with<T: Sendable>(
        _ text: String, options: AdminOptions, publicURL: String? = nil, _ body: @escaping @Sendable (ManagedStream) async throws -> T
    ) async throws -> T {
        let name = try transmitterName(text)
        do {
            return try await options.withTransmitters { registry in
                try await body(try await ManagedStream.open(name, store: registry.store, publicURL: publicURL))
            }
        } catch let failure as ManagedStream.Failure {
            switch failure.kind {
            case .invalid, .notConfigured: throw Bootstrap.fail(failure.description, code: 2)
            default: throw Bootstrap.fail(failure.description)
            }
        }
    }

    /// RISC_PUBLIC_URL, read before the database is opened.
    static func publicURL(_ options: AdminOptions) async throws -> String? {
        try await Bootstrap.configuration(file: options.config.file) { reader throws(ServiceConfiguration.Invalid) in
            try ConfigVariables.publicURL.optional(from: reader)
        }
    }
}

struct StreamsCreate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "create",
        abstract: "Create the stream at the transmitter (push to RISC_PUBLIC_URL/ssf/NAME/events, or poll), or take over the one it has.",
        discussion: """
            A transmitter that keeps one stream per receiver answers 409 when it has one: the service then reads its \
            streams and takes over the first whose issuer is the transmitter's, replacing its configuration with what \
            is asked. A stream whose iss is not the transmitter's issuer is never used: it is deleted at once and the \
            command fails.

            """ + EnvironmentHelp.database)
    @Argument(help: "The transmitter's name.") var name: String
    @OptionGroup var options: AdminOptions

    func run() async throws {
        let publicURL = try await ManagedStream.publicURL(options)
        let created = try await ManagedStream.with(name, options: options, publicURL: publicURL) { try await $0.create() }
        if options.json { return options.printJSON(created.json) }
        print("\(name): stream \(created.stream.streamID) \(created.takenOver ? "taken over" : "created").")
        if !created.notDelivered.isEmpty { print("Not delivered by the transmitter: \(created.notDelivered.joined(separator: ", "))") }
    }
}

struct StreamsShow: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "show", abstract: "The stream's configuration and status, read from the transmitter.", discussion: EnvironmentHelp.database)
    @Argument(help: "The transmitter's name.") var name: String
    @OptionGroup var options: AdminOptions

    func run() async throws {
        let fields = try await ManagedStream.with(name, options: options) { try await $0.show() }
        if options.json { return options.printJSON(.object(Dictionary(uniqueKeysWithValues: fields))) }
        for (key, value) in fields { print("\(key): \(Table.text(value))") }
    }
}

struct StreamsUpdate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "update", abstract: "Change the event types asked for (PATCH).", discussion: EnvironmentHelp.database)
    @Argument(help: "The transmitter's name.") var name: String
    @Option(help: "Event types, comma-separated: short names or URIs.") var events: String
    @OptionGroup var options: AdminOptions

    func run() async throws {
        let types = events.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        let delivered = try await ManagedStream.with(name, options: options) { try await $0.update(events: types) }
        print("\(name): stream updated; delivered: \(delivered.joined(separator: ", "))")
    }
}

struct StreamsReplace: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "replace",
        abstract: "Replace the stream's configuration with what the transmitter was registered with (PUT; a push stream gets a new secret).",
        discussion: EnvironmentHelp.database)
    @Argument(help: "The transmitter's name.") var name: String
    @OptionGroup var options: AdminOptions

    func run() async throws {
        let publicURL = try await ManagedStream.publicURL(options)
        try await ManagedStream.with(name, options: options, publicURL: publicURL) { try await $0.replace() }
        print("\(name): stream replaced.")
    }
}

struct StreamsDelete: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "delete", abstract: "Delete the stream at the transmitter, and forget it here.", discussion: EnvironmentHelp.database)
    @Argument(help: "The transmitter's name.") var name: String
    @OptionGroup var options: AdminOptions

    func run() async throws {
        let streamID = try await ManagedStream.with(name, options: options) { try await $0.delete() }
        print("\(name): stream \(streamID) deleted.")
    }
}

struct StreamsStatus: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status", abstract: "The stream's status at the transmitter, or set it (enabled, paused, disabled).",
        discussion: EnvironmentHelp.database)
    @Argument(help: "The transmitter's name.") var name: String
    @Argument(help: "enabled, paused or disabled; without it, the status is read.") var status: String?
    @Option(help: "Why (with a new status).") var reason: String?
    @OptionGroup var options: AdminOptions

    func validate() throws {
        if let status, RISC.StreamStatus.State(rawValue: status) == nil { throw ValidationError("the status must be enabled, paused or disabled") }
        if reason != nil, status == nil { throw ValidationError("--reason goes with a new status") }
    }

    func run() async throws {
        let wanted = status.flatMap(RISC.StreamStatus.State.init(rawValue:)).map { RISC.StreamStatus(state: $0, reason: reason) }
        let current = try await ManagedStream.with(name, options: options) { try await $0.status(setting: wanted) }
        if options.json {
            let json: JSONValue = ["status": .string(current.state.rawValue), "reason": current.reason.map(JSONValue.string) ?? .null]
            return options.printJSON(json)
        }
        print("\(name): \(current.state.rawValue)\(current.reason.map { " (\($0))" } ?? "")")
    }
}

struct StreamsVerify: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Ask the transmitter for a verification event with a fresh random state; with --wait, wait until it is stored.",
        discussion: EnvironmentHelp.database)
    @Argument(help: "The transmitter's name.") var name: String
    @Flag(help: "Wait until the verification event has arrived and is stored.") var wait = false
    @Option(help: "Seconds to wait (default 60).") var timeout: Int = 60
    @OptionGroup var options: AdminOptions

    func validate() throws {
        guard (1...3600).contains(timeout) else { throw ValidationError("--timeout must be 1 to 3600 seconds") }
    }

    func run() async throws {
        let wait = self.wait ? Duration.seconds(timeout) : nil
        let (state, waited) = try await ManagedStream.with(name, options: options) { try await $0.verify(wait: wait) }
        if let waited {
            print(
                "\(name): verification with state \(state) arrived and stored after \(waited.formatted(.units(allowed: [.seconds, .milliseconds])))")
        } else {
            print("\(name): verification asked for, with state \(state)")
        }
    }
}

struct StreamsSubjects: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "subjects", abstract: "Add a subject to the stream, or remove one (the transmitter's subject endpoints).",
        subcommands: [StreamsSubjectsAdd.self, StreamsSubjectsRemove.self])
}

/// The subject named on the command line: exactly one of --email, --iss-sub ISS SUB, --opaque ID.
struct SubjectOptions: ParsableArguments {
    @Option(help: "An email subject.") var email: String?
    @Option(name: .customLong("iss-sub"), parsing: .upToNextOption, help: "An issuer and subject: --iss-sub ISS SUB.") var issSub: [String] = []
    @Option(help: "An opaque subject.") var opaque: String?

    var subject: Subject? {
        if let email, issSub.isEmpty, opaque == nil { return .email(email) }
        if issSub.count == 2, email == nil, opaque == nil { return .issuerAndSubject(iss: issSub[0], sub: issSub[1]) }
        if let opaque, email == nil, issSub.isEmpty { return .opaque(opaque) }
        return nil
    }

    func validate() throws {
        guard let subject else { throw ValidationError("name one subject: --email E, --iss-sub ISS SUB, or --opaque ID") }
        for value in [email, opaque].compactMap({ $0 }) + issSub where value.isEmpty || !ClaimBounds.fits(value) {
            throw ValidationError("a subject's identifier must be 1 to \(ClaimBounds.maxIdentifierBytes) bytes")
        }
        _ = subject
    }
}

struct StreamsSubjectsAdd: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "add", abstract: "Ask the transmitter to send events about this subject too.", discussion: EnvironmentHelp.database)
    @Argument(help: "The transmitter's name.") var name: String
    @OptionGroup var subject: SubjectOptions
    @OptionGroup var options: AdminOptions

    func run() async throws {
        try await StreamsSubjectsRemove.change(name, subject.subject, add: true, options: options)
        print("\(name): subject added.")
    }
}

struct StreamsSubjectsRemove: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "remove",
        abstract: "Ask the transmitter to stop sending events about this subject (events about it still arriving are taken).",
        discussion: EnvironmentHelp.database)
    @Argument(help: "The transmitter's name.") var name: String
    @OptionGroup var subject: SubjectOptions
    @OptionGroup var options: AdminOptions

    func run() async throws {
        try await Self.change(name, subject.subject, add: false, options: options)
        print("\(name): subject removed.")
    }

    static func change(_ name: String, _ subject: Subject?, add: Bool, options: AdminOptions) async throws {
        guard let subject else { throw Bootstrap.fail("name one subject", code: 2) }
        try await ManagedStream.with(name, options: options) { try await $0.subject(subject, add: add) }
    }
}

struct StreamsHealth: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "health",
        abstract: "Whether the transmitter's stream delivers to the service, as its delivery probes recorded it (exit 1 when not).",
        discussion: """
            Reads the database only; it does not call the transmitter. serve probes each stream every \
            RISC_VERIFY_INTERVAL seconds. Unhealthy: no verification event within 2 intervals (or none yet), the stream \
            paused or disabled, a push stream delivering elsewhere than RISC_PUBLIC_URL/ssf/NAME/events, or the stream \
            unreadable at the last probe.

            """ + EnvironmentHelp.database)
    @Argument(help: "The transmitter's name.") var name: String
    @OptionGroup var options: AdminOptions

    func run() async throws {
        let (interval, publicURL) = try await Bootstrap.configuration(file: options.config.file) { reader throws(ServiceConfiguration.Invalid) in
            (try ConfigVariables.verifyInterval.value(from: reader), try ConfigVariables.publicURL.optional(from: reader))
        }
        let name = try transmitterName(name)
        guard name != .google else { throw Bootstrap.fail("google's delivery health is `risc-receiver stream health`") }
        let health = try await options.withTransmitters { registry -> SharedStreamHealth in
            guard let record = try await registry.store.transmitter(named: name),
                let facts = try await StreamProbes(store: registry.store).facts(of: name)
            else { throw Bootstrap.fail("no transmitter \(name) (transmitters add \(name) ...)") }
            let expected = record.delivery == .push ? publicURL.map { ManagedStream.pushEndpoint(publicURL: $0, name: name) } : nil
            return SharedStreamHealth(facts: facts, now: Date(), interval: interval, expectedEndpointURL: expected)
        }
        try StreamHealth.report(health.jsonValue, healthy: health.healthy, problems: health.problems, json: options.json)
    }
}
