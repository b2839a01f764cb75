import ArgumentParser
import Crypto
import Foundation
import RISC
import RISCConfiguration
import RISCKeys
import RISCStore

/// The stream the service manages at each Shared Signals transmitter (Google's is the `stream` command's).
struct Streams: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "The stream at a Shared Signals transmitter: create, show, update, replace, delete, status, verify, subjects.",
        subcommands: [
            StreamsCreate.self, StreamsShow.self, StreamsUpdate.self, StreamsReplace.self, StreamsDelete.self, StreamsStatus.self,
            StreamsVerify.self, StreamsSubjects.self,
        ])
}

/// What every `streams` command does first: the transmitter's record and a client for its stream endpoints.
struct StreamContext {
    let name: TransmitterName
    let store: TransmitterStore
    let connection: TransmitterStore.Connection
    let management: StreamManagement

    /// Runs `body` with the transmitter `text` names (one database client for the whole command).
    static func with<T: Sendable>(
        _ text: String, options: AdminOptions, _ body: @escaping @Sendable (StreamContext) async throws -> T
    ) async throws -> T {
        let name = try transmitterName(text)
        guard name != .google else { throw Bootstrap.fail("google's stream is managed with `risc-receiver stream`") }
        return try await options.withTransmitters { registry in
            guard let connection = try await registry.store.connection(named: name) else {
                throw Bootstrap.fail("no transmitter \(name) (transmitters add \(name) ...)")
            }
            let tokens = StreamAccessTokens(issuer: connection.metadata.issuer, authorization: connection.authorization)
            return try await body(
                StreamContext(
                    name: name, store: registry.store, connection: connection,
                    management: StreamManagement(metadata: connection.metadata, tokens: tokens)))
        }
    }

    var streamID: String {
        get throws {
            guard let id = connection.record.stream?.streamID else { throw Bootstrap.fail("\(name) has no stream yet (streams create \(name))") }
            return id
        }
    }

    /// What to ask for: the transmitter's delivery and events; for push a new URL secret, returned with its hash.
    /// RISC_PUBLIC_URL, read before the database is opened.
    static func publicURL(_ options: AdminOptions) async throws -> String? {
        try await Bootstrap.configuration(file: options.config.file) { reader throws(ServiceConfiguration.Invalid) in
            try ConfigVariables.publicURL.optional(from: reader)
        }
    }

    func request(publicURL: String?) throws -> (StreamRequest, pushSecretHash: Data?) {
        let record = connection.record
        switch record.delivery {
        case .poll:
            return (StreamRequest(delivery: .poll, eventsRequested: record.eventsRequested), nil)
        case .push:
            guard let publicURL else { throw Bootstrap.fail("RISC_PUBLIC_URL is not set: a push stream's URL is made from it", code: 2) }
            let base = publicURL.hasSuffix("/") ? String(publicURL.dropLast()) : publicURL
            let secret = Base64URL.random(bytes: 32)
            let request = StreamRequest(
                delivery: .push(endpointURL: "\(base)/ssf/\(name.value)/events", authorizationHeader: "Bearer " + secret),
                eventsRequested: record.eventsRequested)
            return (request, Data(SHA256.hash(data: Data(secret.utf8))))
        }
    }

    /// A transmitter's refusal, named after it; any other error as it is.
    func fail(_ error: any Error) -> any Error {
        guard let failure = error as? StreamManagement.Failure else { return error }
        return Bootstrap.fail("\(name): \(failure.description)")
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
        let publicURL = try await StreamContext.publicURL(options)
        let (stream, takenOver, missing) = try await StreamContext.with(name, options: options) { context in
            let (request, pushSecretHash) = try context.request(publicURL: publicURL)
            let stream: StreamConfiguration
            var takenOver = false
            do {
                switch try await context.management.create(request) {
                case .created(let created):
                    stream = created
                case .foreign(let streamID, let deleted):
                    throw Bootstrap.fail(
                        "\(context.name): the stream the transmitter made (\(streamID)) names another issuer; it was "
                            + (deleted ? "deleted there, and is not used" : "not used, and could not be deleted: delete it at the transmitter"))
                case .conflict:
                    let listed = try await context.management.streams()
                    guard let existing = listed.streams.first else {
                        throw Bootstrap.fail("\(context.name): the transmitter answered 409 but lists no stream of its issuer to take over")
                    }
                    stream = try await context.management.change(streamID: existing.streamID, request, replace: true)
                    takenOver = true
                }
            } catch let error as StreamManagement.Failure {
                throw context.fail(error)
            }
            try await context.store.recordStream(stream, of: context.name, pushSecretHash: pushSecretHash)
            return (stream, takenOver, Set(request.eventsRequested).subtracting(stream.eventsDelivered))
        }
        if options.json {
            return options.printJSON([
                "stream_id": .string(stream.streamID), "taken_over": .bool(takenOver),
                "events_delivered": .array(stream.eventsDelivered.map(JSONValue.string)),
            ])
        }
        print("\(name): stream \(stream.streamID) \(takenOver ? "taken over" : "created").")
        if !missing.isEmpty { print("Not delivered by the transmitter: \(missing.sorted().joined(separator: ", "))") }
    }
}

struct StreamsShow: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "show", abstract: "The stream's configuration and status, read from the transmitter.", discussion: EnvironmentHelp.database)
    @Argument(help: "The transmitter's name.") var name: String
    @OptionGroup var options: AdminOptions

    func run() async throws {
        let fields = try await StreamContext.with(name, options: options) { context -> [(String, JSONValue)] in
            let streamID = try context.streamID
            let stream: StreamConfiguration?
            let status: RISC.StreamStatus?
            do {
                stream = try await context.management.stream(id: streamID)
                status = context.connection.metadata.statusEndpoint == nil ? nil : try await context.management.status(streamID: streamID)
            } catch {
                throw context.fail(error)
            }
            guard let stream else { throw Bootstrap.fail("\(context.name): the transmitter no longer has stream \(streamID)") }
            if let status { try await context.store.recordStatus(status, of: context.name) }
            return [
                ("stream_id", .string(stream.streamID)), ("iss", .string(stream.issuer)), ("aud", .array(stream.audience.map(JSONValue.string))),
                ("delivery", stream.deliveryMethod.map { .string($0.rawValue) } ?? .null),
                ("endpoint_url", stream.endpointURL.map(JSONValue.string) ?? .null),
                ("events_requested", .array(stream.eventsRequested.map(JSONValue.string))),
                ("events_delivered", .array(stream.eventsDelivered.map(JSONValue.string))),
                ("status", status.map { .string($0.state.rawValue) } ?? .null), ("reason", status?.reason.map(JSONValue.string) ?? .null),
            ]
        }
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
        let delivered = try await StreamContext.with(name, options: options) { context in
            let streamID = try context.streamID
            let checked: NewTransmitter
            do {
                checked = try NewTransmitter(
                    name: context.name.value, issuer: context.connection.metadata.issuer, events: types,
                    authorization: context.connection.authorization)
            } catch let error as InvalidParameter {
                throw Bootstrap.fail("--\(error.description)", code: 2)
            }
            let stream: StreamConfiguration
            do {
                stream = try await context.management.change(
                    streamID: streamID, StreamRequest(delivery: .poll, eventsRequested: checked.eventsRequested), replace: false)
            } catch {
                throw context.fail(error)
            }
            try await context.store.recordStream(stream, of: context.name, pushSecretHash: nil)
            return stream.eventsDelivered
        }
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
        let publicURL = try await StreamContext.publicURL(options)
        try await StreamContext.with(name, options: options) { context in
            let streamID = try context.streamID
            let (request, pushSecretHash) = try context.request(publicURL: publicURL)
            let stream: StreamConfiguration
            do {
                stream = try await context.management.change(streamID: streamID, request, replace: true)
            } catch {
                throw context.fail(error)
            }
            try await context.store.recordStream(stream, of: context.name, pushSecretHash: pushSecretHash)
        }
        print("\(name): stream replaced.")
    }
}

struct StreamsDelete: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "delete", abstract: "Delete the stream at the transmitter, and forget it here.", discussion: EnvironmentHelp.database)
    @Argument(help: "The transmitter's name.") var name: String
    @OptionGroup var options: AdminOptions

    func run() async throws {
        let streamID = try await StreamContext.with(name, options: options) { context in
            let streamID = try context.streamID
            do {
                try await context.management.delete(streamID: streamID)
            } catch {
                throw context.fail(error)
            }
            try await context.store.forgetStream(of: context.name)
            return streamID
        }
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
        let current = try await StreamContext.with(name, options: options) { context in
            let streamID = try context.streamID
            let current: RISC.StreamStatus
            do {
                if let wanted {
                    current = try await context.management.setStatus(streamID: streamID, wanted)
                } else {
                    current = try await context.management.status(streamID: streamID)
                }
            } catch {
                throw context.fail(error)
            }
            try await context.store.recordStatus(current, of: context.name)
            return current
        }
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
        let state = Base64URL.random(bytes: 16)
        let (wait, timeout) = (self.wait, self.timeout)
        let waited = try await StreamContext.with(name, options: options) { context -> Duration? in
            let streamID = try context.streamID
            // Recorded first: the event may arrive before the transmitter has answered.
            try await context.store.requestVerification(of: context.name, state: state)
            let started = ContinuousClock.now
            do {
                try await context.management.verify(streamID: streamID, state: state)
            } catch {
                throw context.fail(error)
            }
            guard wait else { return nil }
            while ContinuousClock.now - started < .seconds(timeout) {
                if try await context.store.verificationHasArrived(of: context.name, state: state) { return ContinuousClock.now - started }
                try await Task.sleep(for: .milliseconds(200))
            }
            throw Bootstrap.fail("\(context.name): no verification event with state \(state) arrived within \(timeout) s")
        }
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
        try await StreamContext.with(name, options: options) { context in
            let streamID = try context.streamID
            do {
                try await context.management.subject(streamID: streamID, subject, add: add)
            } catch {
                throw context.fail(error)
            }
        }
    }
}
