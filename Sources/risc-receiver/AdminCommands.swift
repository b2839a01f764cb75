import ArgumentParser
import Foundation
import Logging
import PostgresNIO
import RISC
import RISCConfiguration
import RISCServer
import RISCStore
import RISCWorker

/// The database connection the admin commands share (DATABASE_URL, or --config FILE).
struct AdminOptions: ParsableArguments {
    @Flag(help: "Print the JSON object the admin HTTP API returns, instead of a table.")
    var json = false

    @OptionGroup var config: ConfigFileOption

    /// RISC_ENFORCE says which mode `stats` and `events explain` report, as the service's admin API does.
    func withQueries<T: Sendable>(_ body: @escaping @Sendable (AdminReports, EventAdmin) async throws -> T) async throws -> T {
        let enforce = try await Bootstrap.configuration(file: config.file) { reader throws(ServiceConfiguration.Invalid) in
            try ConfigVariables.enforce.value(from: reader)
        }
        return try await withDatabase { client, timeout, logger in
            try await body(
                AdminReports(client: client, timeout: timeout, mode: EnforcementMode(enforce: enforce), logger: logger),
                EventAdmin(client: client, timeout: timeout, enforce: enforce, logger: logger))
        }
    }

    /// The vault keys (RISC_VAULT_KEY and the previous ones), or nil without the key.
    private func vaultCipher() async throws -> VaultCipher? {
        try await Bootstrap.configuration(file: config.file) { reader throws(ServiceConfiguration.Invalid) in
            VaultCipher.from(
                key: try ConfigVariables.vaultKey.optional(from: reader), previous: try ConfigVariables.vaultPreviousKeys.value(from: reader))
        }
    }

    func withNotifications<T: Sendable>(
        _ body: @escaping @Sendable (SubscriberStore, NotificationOutbox) async throws -> T
    ) async throws -> T {
        let cipher = try await vaultCipher()
        do {
            return try await withDatabase { client, timeout, logger in
                try await body(
                    SubscriberStore(client: client, timeout: timeout, cipher: cipher, logger: logger),
                    NotificationOutbox(client: client, timeout: timeout, cipher: cipher, logger: logger))
            }
        } catch let error as VaultKeyMissing {
            throw Bootstrap.fail(error.description)
        } catch let error as SubscriberStore.ConfiguredSubscriber {
            throw Bootstrap.fail(error.description)
        }
    }

    /// The transmitters: the built-in google (RISC_CONFIGURATION_URL) and those added.
    func withTransmitters<T: Sendable>(_ body: @escaping @Sendable (TransmitterRegistry) async throws -> T) async throws -> T {
        let cipher = try await vaultCipher()
        let googleURL = try await Bootstrap.configuration(file: config.file) { reader throws(ServiceConfiguration.Invalid) in
            try ConfigVariables.riscConfigurationURL.value(from: reader)
        }
        do {
            return try await withDatabase { client, timeout, logger in
                let store = TransmitterStore(client: client, timeout: timeout, cipher: cipher, logger: logger)
                return try await body(TransmitterRegistry(store: store, googleConfigurationURL: googleURL))
            }
        } catch let error as VaultKeyMissing {
            throw Bootstrap.fail(error.description)
        } catch let error as TransmitterStore.AlreadyRegistered {
            throw Bootstrap.fail(error.description)
        } catch let error as TransmitterRegistry.MetadataRefused {
            throw Bootstrap.fail(error.description)
        }
    }

    /// Each database call is bounded by RISC_DATABASE_TIMEOUT, as the admin API's are.
    private func withDatabase<T: Sendable>(
        _ body: @escaping @Sendable (PostgresClient, Duration, Logger) async throws -> T
    ) async throws -> T {
        let (databaseURL, timeoutSeconds) = try await Bootstrap.configuration(file: config.file) { reader throws(ServiceConfiguration.Invalid) in
            (try ConfigVariables.databaseURL.value(from: reader), try ConfigVariables.databaseTimeout.value(from: reader))
        }
        let timeout = Duration.milliseconds(Int64(timeoutSeconds * 1000))
        let logger = try await Bootstrap.logger("risc-receiver.admin", file: config.file)
        let client = try await Bootstrap.commandDatabase(databaseURL, logger: logger)
        do {
            return try await client.whileRunning(timeout: .seconds(600)) { client in try await body(client, timeout, logger) }
        } catch is TimeoutError {
            throw Bootstrap.fail("the database named by DATABASE_URL did not answer within RISC_DATABASE_TIMEOUT (\(timeoutSeconds) s)")
        }
    }

    func printJSON(_ value: JSONValue) {
        print(value.serialized)
    }

    /// A typed answer, in the same JSON as the admin API's.
    func printJSON(_ value: some Encodable) throws {
        printJSON(try JSONValueEncoder().encode(value))
    }
}

struct Events: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Stored events: list, show, explain, replay.",
        subcommands: [EventsList.self, EventsShow.self, EventsExplain.self, EventsReplay.self])
}

struct EventsList: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list", abstract: "Stored events, newest first.", discussion: EnvironmentHelp.database)

    @Option(help: "\(EventStatus.allCases.map(\.rawValue).joined(separator: ", ")).") var status: String?
    @Option(help: "An event-type URI or short name (sessions-revoked, ...).") var type: String?
    @Option(help: "The Google account sub.") var sub: String?
    @Option(help: "Received at or after (RFC 3339).") var since: String?
    @Option(help: "Received before (RFC 3339).") var until: String?
    @Option(help: "Events per page (1-500).") var limit: String?
    @Option(help: "The next cursor printed by the previous page.") var cursor: String?
    @OptionGroup var options: AdminOptions

    func validate() throws {
        do {
            _ = try EventAdmin.Filter.parse(
                status: status, type: type, sub: sub, since: since, until: until, limit: limit, cursor: cursor)
        } catch {
            throw ValidationError("--\(error.description)")
        }
    }

    func run() async throws {
        let filter = try EventAdmin.Filter.parse(
            status: status, type: type, sub: sub, since: since, until: until, limit: limit, cursor: cursor)
        let page = try await options.withQueries { _, events in try await events.events(filter) }
        if options.json { return try options.printJSON(page) }
        print(Table.events(page.events))
        if let next = page.nextCursor { print("\nmore: \(nextPageCommand(cursor: next))") }
    }

    func nextPageCommand(cursor: String) -> String {
        Table.nextPageCommand(
            "risc-receiver events list",
            [("status", status), ("type", type), ("sub", sub), ("since", since), ("until", until), ("limit", limit)], cursor: cursor)
    }
}

struct EventsShow: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "show", abstract: "One event, its claims and its actions.", discussion: EnvironmentHelp.database)

    @Argument(help: "The event id.") var id: Int64
    @OptionGroup var options: AdminOptions

    func run() async throws {
        let id = self.id
        guard let event = try await options.withQueries({ _, events in try await events.event(id: id) }) else {
            throw Bootstrap.fail("no event \(id)")
        }
        let json = try JSONValueEncoder().encode(event)
        if options.json { return options.printJSON(json) }
        for key in [
            "id", "jti", "issuer", "type", "sub", "status", "shadow", "attempts", "received_at", "issued_at", "completed_at", "run_after",
            "last_error",
        ] {
            print("\(key.padding(toLength: 13, withPad: " ", startingAt: 0)) \(Table.text(json[key]))")
        }
        print("claims        \(event.claims.serialized)")
        print("\nactions:")
        print(
            Table.render(
                headers: ["KIND", "SUB", "ROWS", "MODE", "DETAIL", "APPLIED"],
                rows: event.actions.map { action in
                    [
                        action.kind.rawValue, action.sub ?? "-", String(action.rowsAffected), action.shadow ? "shadow" : "enforced",
                        action.detail ?? "-", Table.text(.timestamp(action.appliedAt)),
                    ]
                }))
    }
}

struct EventsExplain: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "explain", abstract: "What replaying an event would do now, without changing anything.",
        discussion: EnvironmentHelp.database)

    @Argument(help: "The event id.") var id: Int64
    @OptionGroup var options: AdminOptions

    func run() async throws {
        let id = self.id
        guard let explanation = try await options.withQueries({ _, events in try await events.explain(id: id) }) else {
            throw Bootstrap.fail("no event \(id)")
        }
        if options.json { return try options.printJSON(explanation) }
        print(
            "A replay now, in \(explanation.mode.rawValue) mode (RISC_ENFORCE), would \(explanation.mode == .enforce ? "change" : "record as shadow actions"):"
        )
        if explanation.actions.isEmpty { return print("(no actions)") }
        print(
            Table.render(
                headers: ["KIND", "SUB", "ROWS", "DETAIL"],
                rows: explanation.actions.map { [$0.kind.rawValue, $0.sub ?? "-", String($0.rowsAffected), $0.detail ?? "-"] }))
    }
}

struct EventsReplay: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "replay",
        abstract: "Run an event again (its actions are idempotent), every dead letter with --dead, or what arrived in shadow mode with --since.",
        discussion: EnvironmentHelp.database)

    @Argument(help: "The event id.") var id: Int64?
    @Flag(help: "Replay every dead event.") var dead = false
    @Option(help: "Replay every event received at or after this time (RFC 3339) whose actions were only recorded as shadow actions.")
    var since: String?
    @OptionGroup var options: AdminOptions

    func validate() throws {
        if [id != nil, dead, since != nil].filter({ $0 }).count > 1 { throw ValidationError("give one of an event id, --dead or --since") }
        if id == nil && !dead && since == nil { throw ValidationError("give an event id, --dead or --since") }
        if let since {
            do { _ = try EventAdmin.Filter.timestamp(since, name: "since") } catch { throw ValidationError("--\(error.description)") }
        }
    }

    func run() async throws {
        let id = self.id
        let json = options.json
        if let since {
            let from = try EventAdmin.Filter.timestamp(since, name: "since")
            let replayed = try await options.withQueries { _, events in
                let progress = ProgressBar(label: "Replaying")
                let ids = try await events.replayShadow(since: from) { done in if !json { progress.update(done: done, total: nil) } }
                if !json { progress.finish() }
                return ids
            }
            return report(replayed)
        }
        let (replayed, missing) = try await options.withQueries { _, events -> ([Int64], String?) in
            let ids: [Int64]
            if let id { ids = [id] } else { ids = try await events.deadEventIDs() }
            let progress = ProgressBar(label: "Replaying")
            var replayed: [Int64] = []
            for (index, id) in ids.enumerated() {
                switch try await events.replay(id: id) {
                case .replayed: replayed.append(id)
                case .notFound where self.id != nil: return ([], "no event \(id)")
                case .ignored where self.id != nil: return ([], "event \(id) has no known type, so nothing to replay")
                case .notFound, .ignored: break
                }
                if ids.count > 1 && !json { progress.update(done: index + 1, total: ids.count) }
            }
            if ids.count > 1 && !json { progress.finish() }
            return (replayed, nil)
        }
        if let missing { throw Bootstrap.fail(missing) }
        report(replayed)
    }

    func report(_ replayed: [Int64]) {
        if options.json { return options.printJSON(["replayed": .array(replayed.map { .number(Double($0)) })]) }
        print("Replayed \(replayed.count) event\(replayed.count == 1 ? "" : "s").")
    }
}

struct Users: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Users: what happened to them and why.", subcommands: [UsersShow.self])
}

struct UsersShow: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "show", abstract: "A user's account state, flags, sessions, grants and recent events.", discussion: EnvironmentHelp.database)

    @Argument(help: "The Google account sub.") var sub: String
    @OptionGroup var options: AdminOptions

    func run() async throws {
        let sub = self.sub
        guard let user = try await options.withQueries({ queries, _ in try await queries.user(sub: sub) }) else {
            throw Bootstrap.fail("no user \(sub)")
        }
        let json = try JSONValueEncoder().encode(user)
        if options.json { return options.printJSON(json) }
        func line(_ key: String, _ value: String) { print("\(key.padding(toLength: 19, withPad: " ", startingAt: 0)) \(value)") }
        line("sub", sub)
        if let account = json["account"]?.objectValue {
            for key in account.keys.sorted() { line(key, Table.text(account[key])) }
        } else {
            line("account", "(never signed in)")
        }
        line("flags", user.flags.joined(separator: ", "))
        for (kind, counts) in [("sessions", user.sessions), ("grants", user.grants)] {
            line(kind, "\(counts.active) active, \(counts.revoked) revoked")
        }
        print("\nrecent events:")
        print(Table.events(user.recentEvents))
    }
}

struct Stats: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Counts by status and type, queue depth, oldest pending, dead letters.", discussion: EnvironmentHelp.database)

    @OptionGroup var options: AdminOptions

    func run() async throws {
        let stats = try await options.withQueries { queries, _ in try await queries.stats() }
        if options.json { return try options.printJSON(stats) }
        print("mode          \(stats.mode.rawValue)")
        print("shadow events \(stats.shadowEvents)")
        print("queue depth   \(stats.queueDepth)")
        print("oldest        \(stats.oldestPendingAgeSeconds.map { "\(Table.text(.number($0))) s" } ?? "- (nothing waiting)")")
        print("dead          \(stats.dead)\n")
        let statuses = EventStatus.allCases.sorted { $0.rawValue < $1.rawValue }
        print(Table.render(headers: ["STATUS", "EVENTS"], rows: statuses.map { [$0.rawValue, String(stats.byStatus[$0] ?? 0)] }))
        print()
        print(Table.render(headers: ["TYPE", "EVENTS"], rows: stats.byType.keys.sorted().map { [$0, String(stats.byType[$0]!)] }))
    }
}

/// Plain aligned columns: no colours or other escape sequences, so output is the same on a terminal or a pipe.
enum Table {
    static func render(headers: [String], rows: [[String]]) -> String {
        var widths = headers.map(\.count)
        for row in rows {
            for (index, cell) in row.enumerated() { widths[index] = max(widths[index], cell.count) }
        }
        func line(_ cells: [String]) -> String {
            cells.enumerated().map { index, cell in
                index == cells.count - 1 ? cell : cell.padding(toLength: widths[index], withPad: " ", startingAt: 0)
            }.joined(separator: "  ")
        }
        return ([line(headers)] + rows.map(line)).joined(separator: "\n")
    }

    static func events(_ events: [EventSummary]) -> String {
        if events.isEmpty { return "(no events)" }
        return render(
            headers: ["ID", "RECEIVED", "TYPE", "STATUS", "ATTEMPTS", "SUB"],
            rows: events.map { event in
                [
                    String(event.id), text(.timestamp(event.receivedAt)), event.typeName,
                    event.status.rawValue + (event.shadow ? " (shadow)" : ""), String(event.attempts), event.sub ?? "-",
                ]
            })
    }

    /// A JSON object as aligned `key  value` lines, nested keys joined with dots, lists comma-separated.
    static func lines(_ value: JSONValue) -> String {
        func flatten(_ value: JSONValue, _ prefix: String) -> [(String, String)] {
            switch value {
            case .object(let members):
                return members.keys.sorted().flatMap { flatten(members[$0]!, prefix.isEmpty ? $0 : prefix + "." + $0) }
            case .array(let items) where items.allSatisfy({ $0.stringValue != nil }):
                return [(prefix, items.compactMap(\.stringValue).joined(separator: ", "))]
            default:
                return [(prefix, text(value))]
            }
        }
        let pairs = flatten(value, "")
        let width = pairs.map(\.0.count).max() ?? 0
        return pairs.map { $0.0.padding(toLength: width, withPad: " ", startingAt: 0) + "  " + $0.1 }.joined(separator: "\n")
    }

    /// The command for a listing's next page: the same filters (a cursor only says where the last page ended),
    /// then the cursor.
    static func nextPageCommand(_ command: String, _ filters: [(String, String?)], cursor: String) -> String {
        let options = (filters + [("cursor", cursor)]).compactMap { name, value in value.map { "--\(name) \(shellQuoted($0))" } }
        return ([command] + options).joined(separator: " ")
    }

    /// As typed in a shell: bare when that is safe, else in single quotes.
    static func shellQuoted(_ value: String) -> String {
        let safe = value.unicodeScalars.allSatisfy {
            $0.isASCII && (CharacterSet.alphanumerics.contains($0) || "-_.:/@+=,".unicodeScalars.contains($0))
        }
        return safe && !value.isEmpty ? value : "'" + value.replacingOccurrences(of: "'", with: #"'\''"#) + "'"
    }

    static func text(_ value: JSONValue?) -> String {
        switch value {
        case .string(let string)?: string
        case .number(let number)?: number == number.rounded() && abs(number) < 1e15 ? String(Int64(number)) : String(number)
        case .bool(let bool)?: String(bool)
        case .null?, nil: "-"
        case let other?: other.serialized
        }
    }
}
