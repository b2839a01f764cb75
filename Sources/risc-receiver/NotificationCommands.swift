import ArgumentParser
import Foundation
import RISC
import RISCServer
import RISCStore

/// Subscribers: the app's services told of every action.
struct Subscribers: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "The app's services notified of actions (Standard Webhooks): add, list, remove, rotate-secret.",
        subcommands: [SubscribersAdd.self, SubscribersList.self, SubscribersRemove.self, SubscribersRotateSecret.self])
}

struct SubscribersAdd: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "add", abstract: "Add a subscriber; prints its id and secret (shown this once).", discussion: EnvironmentHelp.database)

    @Option(help: "Where notifications are POSTed: https://, or http:// on loopback.") var url: String
    @Option(
        help: "- to read the secret (whsec_ and 24 to 64 bytes in base64) from standard input, never the command line (default: a new random one).")
    var secret: String?
    @Option(help: "Action kinds to be told of, comma-separated (default: all): \(ActionKind.notified.map(\.rawValue).joined(separator: ", ")).")
    var actions: String?
    @OptionGroup var options: AdminOptions

    func subscriber(secret: String?) throws(InvalidParameter) -> NewSubscriber {
        try NewSubscriber(
            url: url, secret: secret, actions: actions.map { $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) } })
    }

    func validate() throws {
        // A secret on the command line is in `ps` and the shell's history.
        if let secret, secret != "-" {
            throw ValidationError("--secret takes -: the secret is read from standard input, never from the command line")
        }
        do {
            _ = try subscriber(secret: nil)
        } catch {
            throw ValidationError("--\(error.description)")
        }
    }

    func run() async throws {
        let given = secret == nil ? nil : (readLine(strippingNewline: true) ?? "").trimmingCharacters(in: .whitespaces)
        let subscriber: NewSubscriber
        do {
            subscriber = try self.subscriber(secret: given)
        } catch {
            throw Bootstrap.fail("--\(error.description)", code: 2)
        }
        let id = try await options.withNotifications { subscribers, _ in try await subscribers.add(subscriber) }
        if options.json { return options.printJSON(["id": .number(Double(id)), "secret": .string(subscriber.secret)]) }
        print("Subscriber \(id) added: \(URLPolicy.redacted(subscriber.url))")
        print("Secret (shown once; the subscriber verifies deliveries with it): \(subscriber.secret)")
    }
}

struct SubscribersList: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list", abstract: "Every subscriber (never its secret).", discussion: EnvironmentHelp.database)
    @OptionGroup var options: AdminOptions

    func run() async throws {
        let subscribers = try await options.withNotifications { subscribers, _ in try await subscribers.subscribers() }
        if options.json { return try options.printJSON(SubscriberList(subscribers)) }
        if subscribers.isEmpty { return print("(no subscribers)") }
        print(
            Table.render(
                headers: ["ID", "URL", "ACTIONS", "PENDING", "DEAD", "ADDED"],
                rows: subscribers.map { subscriber in
                    [
                        String(subscriber.id), subscriber.url, subscriber.actions.map { $0.map(\.rawValue).joined(separator: ",") } ?? "all",
                        String(subscriber.pending), String(subscriber.dead), Table.text(.timestamp(subscriber.createdAt)),
                    ]
                }))
        for subscriber in subscribers {
            if let paused = subscriber.paused { print("Subscriber \(subscriber.id): delivery paused: \(paused)") }
        }
    }
}

struct SubscribersRotateSecret: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rotate-secret",
        abstract: "Give a subscriber a new secret; prints it (shown this once). The old one signs beside it for 24 hours.",
        discussion: """
            An old secret that cannot be opened (sealed under a vault key no longer configured) is dropped: the new \
            one is issued all the same and signs alone, and deliveries paused for want of the secret resume.

            """ + EnvironmentHelp.database)
    @Argument(help: "The subscriber id.") var id: Int64
    @OptionGroup var options: AdminOptions

    func run() async throws {
        let id = self.id
        guard let rotation = try await options.withNotifications({ subscribers, _ in try await subscribers.rotateSecret(subscriber: id) }) else {
            throw Bootstrap.fail("no subscriber \(id)")
        }
        if options.json {
            return options.printJSON([
                "id": .number(Double(id)), "secret": .string(rotation.secret), "previous_secret_kept": .bool(rotation.previousKept),
            ])
        }
        if rotation.previousKept {
            print("Subscriber \(id) has a new secret (shown once; the old one also signs deliveries for 24 hours): \(rotation.secret)")
        } else {
            print(
                "Subscriber \(id) has a new secret (shown once; the old one could not be opened with the vault keys configured, "
                    + "so it signs nothing more: give the subscriber the new one now): \(rotation.secret)")
        }
    }
}

struct SubscribersRemove: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "remove",
        abstract: "Remove a subscriber and its undelivered notifications (never sent now; delivered ones stay until retention).",
        discussion: EnvironmentHelp.database)
    @Argument(help: "The subscriber id.") var id: Int64
    @OptionGroup var options: AdminOptions

    func run() async throws {
        let id = self.id
        guard try await options.withNotifications({ subscribers, _ in try await subscribers.remove(subscriber: id) }) else {
            throw Bootstrap.fail("no subscriber \(id)")
        }
        if options.json { return options.printJSON(["removed": .number(Double(id))]) }
        print("Subscriber \(id) removed.")
    }
}

/// Notifications and their delivery.
struct Notifications: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Notifications to subscribers: list, show, replay.",
        subcommands: [NotificationsList.self, NotificationsShow.self, NotificationsReplay.self])
}

struct NotificationsList: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list", abstract: "Notifications, newest first.", discussion: EnvironmentHelp.database)

    @Option(help: "\(NotificationStatus.allCases.map(\.rawValue).joined(separator: ", ")).") var status: String?
    @Option(help: "A subscriber id.") var subscriber: String?
    @Option(help: "The Google account sub.") var sub: String?
    @Option(help: "Notifications per page (1-500).") var limit: String?
    @Option(help: "The next cursor printed by the previous page.") var cursor: String?
    @OptionGroup var options: AdminOptions

    func filter() throws(InvalidParameter) -> NotificationOutbox.Filter {
        try NotificationOutbox.Filter.parse(status: status, subscriber: subscriber, sub: sub, limit: limit, cursor: cursor)
    }

    func validate() throws {
        do {
            _ = try filter()
        } catch {
            throw ValidationError("--\(error.description)")
        }
    }

    func run() async throws {
        let filter = try filter()
        let page = try await options.withNotifications { _, outbox in try await outbox.notifications(filter) }
        if options.json { return try options.printJSON(page) }
        if page.notifications.isEmpty { return print("(no notifications)") }
        print(
            Table.render(
                headers: ["ID", "OCCURRED", "TYPE", "SUB", "SUBSCRIBER", "STATUS", "ATTEMPTS", "LAST ERROR"],
                rows: page.notifications.map { record in
                    [
                        String(record.id), Table.text(record.body["occurred_at"]), Table.text(record.body["type"]),
                        Table.text(record.body["sub"]), String(record.subscriberID), record.status.rawValue, String(record.attempts),
                        record.lastError ?? "-",
                    ]
                }))
        if let next = page.nextCursor {
            let filters = [("status", status), ("subscriber", subscriber), ("sub", sub), ("limit", limit)]
            print("\nmore: " + Table.nextPageCommand("risc-receiver notifications list", filters, cursor: next))
        }
    }
}

struct NotificationsShow: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "show", abstract: "One notification: the body sent, its webhook-id and delivery.", discussion: EnvironmentHelp.database)
    @Argument(help: "The notification id.") var id: Int64
    @OptionGroup var options: AdminOptions

    func run() async throws {
        let id = self.id
        guard let record = try await options.withNotifications({ _, outbox in try await outbox.notification(id: id) }) else {
            throw Bootstrap.fail("no notification \(id)")
        }
        let json = try JSONValueEncoder().encode(record)
        if options.json { return options.printJSON(json) }
        print(Table.lines(json))
    }
}

struct NotificationsReplay: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "replay", abstract: "Send a notification again (same webhook-id), or every dead one with --dead.",
        discussion: EnvironmentHelp.database)

    @Argument(help: "The notification id.") var id: Int64?
    @Flag(help: "Replay every dead notification.") var dead = false
    @OptionGroup var options: AdminOptions

    func validate() throws {
        if id != nil && dead { throw ValidationError("give a notification id or --dead, not both") }
        if id == nil && !dead { throw ValidationError("give a notification id, or --dead") }
    }

    func run() async throws {
        let id = self.id
        let (replayed, problem) = try await options.withNotifications { _, outbox -> ([Int64], String?) in
            let ids: [Int64]
            if let id { ids = [id] } else { ids = try await outbox.deadIDs() }
            var replayed: [Int64] = []
            for candidate in ids {
                switch try await outbox.replay(id: candidate) {
                case .replayed: replayed.append(candidate)
                case .notFound where id != nil: return ([], "no notification \(candidate)")
                case .pending where id != nil: return ([], "notification \(candidate) is still pending: it will be sent")
                case .subscriberRemoved where id != nil: return ([], "notification \(candidate)'s subscriber was removed")
                case .notFound, .pending, .subscriberRemoved: break
                }
            }
            return (replayed, nil)
        }
        if let problem { throw Bootstrap.fail(problem) }
        if options.json { return options.printJSON(["replayed": .array(replayed.map { .number(Double($0)) })]) }
        print("Replayed \(replayed.count) notification\(replayed.count == 1 ? "" : "s").")
    }
}
