import AsyncHTTPClient
import Crypto
import DevTransmitter
import Foundation
import Hummingbird
import Logging
import NIOCore
import PostgresNIO
import RISC
import RISCStore
import RISCWorker
import ServiceLifecycle
import Synchronization
import TestSupport
import Testing

/// A subscriber on loopback, as an app's service would run one: it checks every delivery's Standard Webhooks
/// signature (with its own HMAC, not the service's code), records it, and answers as the test says.
final class TestSubscriber: Sendable {
    struct Delivery: Sendable {
        var webhookID: String
        var timestamp: String
        var signature: String
        var body: String
        var verified: Bool
        /// The W3C trace context the delivery carried (with tracing on).
        var traceparent: String? = nil
        var json: JSONValue { (try? JSONValue.parse(Data(body.utf8))) ?? .null }
        var sub: String? { json["sub"]?.stringValue }
    }

    enum Answer: Sendable {
        case status(Int)
        /// Answers 200 only after this long (past the dispatcher's timeout: no answer in time).
        case hang(Duration)
        /// Answers 200 at once, then sends its body a byte at a time over this long.
        case slowBody(Duration)
    }

    let secret = StandardWebhook.generateSecret()
    /// Every request, in the order they arrived.
    let received = Mutex<[Delivery]>([])
    /// The answer to a delivery, given how many times its webhook-id has been received (1 the first time).
    let answer: Mutex<@Sendable (Delivery, Int) -> Answer>

    init(answer: @escaping @Sendable (Delivery, Int) -> Answer = { _, _ in .status(204) }) {
        self.answer = Mutex(answer)
    }

    var deliveries: [Delivery] { received.withLock { $0 } }
    /// Deliveries the subscriber accepted (2xx), in order.
    let accepted = Mutex<[Delivery]>([])
    /// Set when the test is done with the subscriber: hanging answers end.
    let finished = Atomic<Bool>(false)

    func verify(id: String, timestamp: String, signature: String, body: String) -> Bool {
        let key = SymmetricKey(data: Data(base64Encoded: String(secret.dropFirst("whsec_".count)))!)
        let mac = HMAC<SHA256>.authenticationCode(for: Data("\(id).\(timestamp).\(body)".utf8), using: key)
        guard let seconds = Double(timestamp), abs(seconds - Date().timeIntervalSince1970) < 300 else { return false }
        return signature.split(separator: " ").contains { $0 == "v1," + Data(mac).base64EncodedString() }
    }

    /// Serves on 127.0.0.1 while `body` runs, with the URL to subscribe.
    func serving<T: Sendable>(_ body: @Sendable (String) async throws -> T) async throws -> T {
        let router = Router()
        router.post("/hook") { request, _ -> Response in
            var request = request
            let bytes = String(buffer: try await request.collectBody(upTo: 1 << 20))
            func header(_ name: String) -> String { request.headers.first { $0.name.canonicalName == name }?.value ?? "" }
            let id = header("webhook-id")
            let timestamp = header("webhook-timestamp")
            let signature = header("webhook-signature")
            let delivery = Delivery(
                webhookID: id, timestamp: timestamp, signature: signature, body: bytes,
                verified: self.verify(id: id, timestamp: timestamp, signature: signature, body: bytes),
                traceparent: request.headers.first { $0.name.canonicalName == "traceparent" }?.value)
            let count = self.received.withLock { received in
                received.append(delivery)
                return received.filter { $0.webhookID == id }.count
            }
            switch self.answer.withLock({ $0 })(delivery, count) {
            case .status(let code):
                if (200..<300).contains(code) { self.accepted.withLock { $0.append(delivery) } }
                return Response(status: .init(code: code))
            case .hang(let duration):
                // Cut short when the test is done, so shutting the server down does not wait for it.
                let deadline = ContinuousClock.now + duration
                while ContinuousClock.now < deadline && !self.finished.load(ordering: .relaxed) {
                    try? await Task.sleep(for: .milliseconds(50))
                }
                return Response(status: .ok)
            case .slowBody(let duration):
                self.accepted.withLock { $0.append(delivery) }
                return Response(
                    status: .ok,
                    body: ResponseBody { writer in
                        let deadline = ContinuousClock.now + duration
                        while ContinuousClock.now < deadline && !self.finished.load(ordering: .relaxed) {
                            try await writer.write(ByteBuffer(string: "."))
                            try? await Task.sleep(for: .milliseconds(200))
                        }
                        try await writer.finish(nil)
                    })
            }
        }
        return try await servingLocally(router) { base in
            // Hanging answers end before the server shuts down.
            defer { self.finished.store(true, ordering: .relaxed) }
            return try await body(base + "/hook")
        }
    }
}

/// Runs `services` in a service group while `body` runs, then shuts them down gracefully.
func whileRunning<T: Sendable>(_ services: [any Service], _ body: @Sendable () async throws -> T) async throws -> T {
    let group = ServiceGroup(configuration: .init(services: services.map { .init(service: $0) }, logger: Harness.logger))
    return try await withThrowingTaskGroup(of: Void.self) { tasks in
        tasks.addTask { try await group.run() }
        do {
            let result = try await body()
            await group.triggerGracefulShutdown()
            return result
        } catch {
            await group.triggerGracefulShutdown()
            throw error
        }
    }
}

/// Runs `count` dispatchers on `client` while `body` runs (each as `serve` or `worker` would run one).
func withDispatchers<T: Sendable>(
    _ count: Int = 1, client: PostgresClient, settings: NotificationDispatcher.Settings = .fast, _ body: @Sendable () async throws -> T
) async throws -> T {
    try await whileRunning((0..<count).map { _ in NotificationDispatcher(client: client, settings: settings, logger: Harness.logger) }, body)
}

extension NotificationDispatcher.Settings {
    /// Quick retries for tests: 50 ms doubling, 4 attempts. The timeout stays the service's 10 s: an answer slowed by
    /// a loaded machine must not count as a failure and be sent again, where a test counts deliveries.
    static var fast: Self {
        var settings = Self()
        settings.retryPolicy = RetryPolicy(maxAttempts: 4, baseDelay: 0.05, maxDelay: 1)
        settings.pollInterval = .milliseconds(100)
        settings.cipher = VaultCipher.from(key: Harness.vaultKey, previous: [])
        return settings
    }
}

/// Waits until `condition` holds, or fails the test after `timeout`.
func eventually(_ what: String, timeout: Duration = .seconds(45), _ condition: () async throws -> Bool) async throws {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if try await condition() { return }
        try await Task.sleep(for: .milliseconds(50))
    }
    Issue.record("timed out waiting until \(what)")
    throw SubprocessFailed(description: "timed out waiting until \(what)")
}

extension Harness {
    func addSubscriber(_ subscriber: TestSubscriber, url: String, actions: [String]? = nil) async throws -> Int64 {
        var body: [String: JSONValue] = ["url": .string(url), "secret": .string(subscriber.secret)]
        if let actions { body["actions"] = .array(actions.map(JSONValue.string)) }
        let reply = try await call(.POST, "/admin/v1/subscribers", bearer: Harness.adminToken, json: .object(body))
        #expect(reply.status == 201, "\(reply.body)")
        #expect(reply.json["secret"]?.stringValue == subscriber.secret)
        return Int64(try #require(reply.json["id"]?.number))
    }

    /// The actions argument of `risc_apply_actions` that revokes `sub`'s sessions again for the event `jti`: what a
    /// worker applies for it.
    func revocationActions(jti: String, sub: String) async throws -> String {
        var eventID: Int64 = 0
        for try await id in try await database.query("SELECT id FROM risc_events WHERE jti = \(jti)").decode(Int64.self) { eventID = id }
        return JSONValue.array([
            [
                "event": .number(Double(eventID)), "position": 0, "kind": "revoke_sessions", "sub": .string(sub), "argument": .null,
                "client_ids": [],
            ]
        ]).serialized
    }

    /// (status, attempts, webhook_id) of each notification about `sub`, oldest first.
    func notifications(sub: String) async throws -> [(status: String, attempts: Int, webhookID: String, kind: String)] {
        var found: [(String, Int, String, String)] = []
        for try await (status, attempts, id, kind) in try await database.query(
            "SELECT status, attempts, webhook_id, kind FROM risc_notifications WHERE sub = \(sub) ORDER BY id"
        ).decode((String, Int32, String, String).self) {
            found.append((status, Int(attempts), id, kind))
        }
        return found
    }

    /// `rows` pending notifications to `subscriber`, written as the trigger would, one per user for 6,000 users
    /// (`backlog-0` to `backlog-5999`): a 6,001st is a second one for `backlog-1`.
    func fillOutbox(subscriber: Int64, rows: Int) async throws {
        try await database.query(
            """
            INSERT INTO risc_notifications (subscriber_id, action_id, kind, sub, count, event_id, event_jti, event_type, occurred_at)
            SELECT \(subscriber), k, 'revoke_sessions', 'backlog-' || (k % 6000), 0, k, 'jti-' || k, 'sessions-revoked', now()
            FROM generate_series(1, \(rows)) AS k
            """)
    }

    /// The one number a query answers (-1 when it answers no row).
    func number(_ query: PostgresQuery) async throws -> Int64 {
        var found: Int64 = -1
        for try await value in try await database.query(query).decode(Int64.self) { found = value }
        return found
    }

    /// Leases the oldest `count` notifications for a minute, as dispatchers in flight hold them.
    func leaseOldest(_ count: Int) async throws {
        try await database.query(
            "INSERT INTO risc_notification_leases SELECT id, 1, now() + interval '1 minute' FROM risc_notifications ORDER BY id LIMIT \(count)")
    }

    /// Has PostgreSQL read the statistics of the outbox and of its leases again (which also renews cached plans).
    func analyzeOutboxAndLeases() async throws {
        try await database.query("ANALYZE risc_notifications")
        try await database.query("ANALYZE risc_notification_leases")
    }
}

@Suite("Notifications to the app's services", .timeLimit(.minutes(3)))
struct NotificationTests {
    static var options: Harness.Options {
        var options = Harness.Options()
        options.worker = true
        return options
    }

    /// A database of its own, the receiver applying actions on receipt or by its worker, and one test subscriber
    /// added and serving.
    static func withOneSubscriber(
        applyOnReceipt: Bool, _ body: @escaping @Sendable (Harness, TestSubscriber) async throws -> Void
    ) async throws {
        var options = Self.options
        options.applyOnReceipt = applyOnReceipt
        try await Harness.withIsolatedDatabase(options) { harness in
            let subscriber = TestSubscriber()
            try await subscriber.serving { url in
                _ = try await harness.addSubscriber(subscriber, url: url)
                try await body(harness, subscriber)
            }
        }
    }

    @Test(
        "Every action is delivered exactly once per matching subscriber, signed, with the documented body; nothing else is",
        arguments: [true, false])
    func exactlyOncePerAction(applyOnReceipt: Bool) async throws {
        var options = Self.options
        options.applyOnReceipt = applyOnReceipt
        try await Harness.withIsolatedDatabase(options) { harness in
            let everything = TestSubscriber()
            let revocations = TestSubscriber()
            try await everything.serving { everythingURL in
                try await revocations.serving { revocationsURL in
                    _ = try await harness.addSubscriber(everything, url: everythingURL)
                    _ = try await harness.addSubscriber(revocations, url: revocationsURL, actions: ["revoke_sessions"])
                    try await withDispatchers(2, client: harness.database) {
                        let hijacked = "hijacked-\(UUID().uuidString)"
                        _ = try await harness.newSession(sub: hijacked)
                        _ = try await harness.newSession(sub: hijacked)
                        let hijackJTI = try await harness.sendAndWait("account-disabled", sub: hijacked) { $0.reason = "hijacking" }
                        let quiet = "quiet-\(UUID().uuidString)"
                        _ = try await harness.sendAndWait("sessions-revoked", sub: quiet)
                        _ = try await harness.sendAndWait("verification", sub: nil) { $0.state = "no-notification" }

                        // account-disabled (hijacking): disable_sign_in, revoke_sessions; sessions-revoked: revoke_sessions.
                        try await eventually("three notifications are accepted") { everything.accepted.withLock { $0.count } == 3 }
                        try await eventually("one revocation per user") { revocations.accepted.withLock { $0.count } == 2 }
                        // Nothing more arrives. A barrier: a later sessions-revoked for each user, which both subscribers
                        // take. A subscriber is sent one user's notifications one at a time, in order: a claim takes only
                        // the user's oldest pending one, and it stays pending until recorded delivered. So once both have
                        // the later ones, every earlier notification of these users was delivered and recorded, and none
                        // is left to send again.
                        var barriers: Set<String> = []
                        for user in [hijacked, quiet] { barriers.insert(try await harness.sendAndWait("sessions-revoked", sub: user)) }
                        for subscriber in [everything, revocations] {
                            try await eventually("the later events' notifications arrive") {
                                barriers.isSubset(of: subscriber.accepted.withLock { $0 }.compactMap { $0.json["event"]?["jti"]?.stringValue })
                            }
                        }
                        let first = { (deliveries: [TestSubscriber.Delivery]) in
                            deliveries.filter { !barriers.contains($0.json["event"]?["jti"]?.stringValue ?? "") }
                        }
                        #expect(first(everything.deliveries).count == 3, "exactly once: \(everything.deliveries.map(\.body))")
                        #expect(first(revocations.deliveries).count == 2)
                        #expect(everything.deliveries.allSatisfy { $0.verified } && revocations.deliveries.allSatisfy { $0.verified })
                        #expect(Set(first(everything.deliveries).map(\.webhookID)).count == 3)
                        #expect(Set(revocations.deliveries.compactMap { $0.json["type"]?.stringValue }) == ["revoke_sessions"])

                        let hijack = first(everything.deliveries).filter { $0.sub == hijacked }
                        #expect(hijack.compactMap { $0.json["type"]?.stringValue } == ["disable_sign_in", "revoke_sessions"])
                        let revoked = try #require(hijack.last?.json)
                        #expect(Set(revoked.objectValue?.keys.map { $0 } ?? []) == ["type", "sub", "count", "event", "occurred_at"])
                        #expect(revoked["count"]?.number == 2, "two sessions ended: \(revoked.serialized)")
                        #expect(revoked["event"]?["jti"]?.stringValue == hijackJTI)
                        #expect(revoked["event"]?["type"]?.stringValue == EventType.accountDisabled.rawValue)
                        #expect(revoked["event"]?["id"]?.number != nil)
                        #expect(revoked["occurred_at"]?.stringValue?.hasSuffix("Z") == true)
                        // An action that changed nothing is still notified: the app may hold state for the user.
                        let quietDelivery = try #require(first(everything.deliveries).first { $0.sub == quiet })
                        #expect(quietDelivery.json["count"]?.number == 0)
                        // Never a secret, a token or the SET in a body.
                        for delivery in everything.deliveries + revocations.deliveries {
                            #expect(!delivery.body.contains(everything.secret.dropFirst(6)) && !delivery.body.contains("eyJ"))
                        }
                        // Deliveries are recorded by the dispatcher's loop, together, a moment after the 2xx.
                        try await eventually("the deliveries are recorded") {
                            try await harness.notifications(sub: hijacked).allSatisfy { $0.status == "delivered" }
                        }
                        #expect(try await harness.notifications(sub: hijacked).allSatisfy { $0.attempts == 1 })
                    }
                }
            }
            // A notification exists if and only if its action committed: one per notified action and matching subscriber.
            for try await (missing, extra) in try await harness.database.query(
                """
                WITH expected AS (
                    SELECT a.id AS action_id, s.id AS subscriber_id FROM risc_event_actions a, risc_subscribers s
                    WHERE a.kind = ANY(\(ActionKind.notified)) AND (s.actions IS NULL OR a.kind = ANY(s.actions)))
                SELECT (SELECT count(*) FROM expected e WHERE NOT EXISTS (
                            SELECT 1 FROM risc_notifications n WHERE n.action_id = e.action_id AND n.subscriber_id = e.subscriber_id))::int8,
                       (SELECT count(*) FROM risc_notifications n WHERE NOT EXISTS (
                            SELECT 1 FROM expected e WHERE n.action_id = e.action_id AND n.subscriber_id = e.subscriber_id))::int8
                """
            ).decode((Int64, Int64).self) {
                #expect(missing == 0 && extra == 0)
            }
        }
    }

    @Test(
        "A committed action wakes the process's dispatcher at once, not its poll; the storing transaction sends no NOTIFY",
        arguments: [true, false])
    func wokenByItsOwnProcess(applyOnReceipt: Bool) async throws {
        try await Self.withOneSubscriber(applyOnReceipt: applyOnReceipt) { harness, subscriber in
            // A poll that never comes within the test: only the signal (or a NOTIFY) can wake it.
            var settings = NotificationDispatcher.Settings.fast
            settings.pollInterval = .seconds(600)
            settings.outboxSignal = harness.outboxSignal
            // Heard on the channel the dispatchers listen on: a NOTIFY in the transaction that stores the actions
            // would make every such commit wait for the ones before it (a cluster-wide lock, held through the
            // commit's flush).
            let heard = Mutex<[String]>([])
            let listening = AsyncStream<Void>.makeStream()
            let listener = Task {
                defer { listening.continuation.finish() }
                try await harness.database.withConnection { connection in
                    try await connection.listen(on: NotificationOutbox.channel) { notifications in
                        listening.continuation.yield()
                        for try await notification in notifications { heard.withLock { $0.append(notification.payload) } }
                    }
                }
            }
            defer { listener.cancel() }
            var started = false
            for await _ in listening.stream {
                started = true
                break
            }
            if !started {
                let failure = await listener.result
                Issue.record("the LISTEN failed: \(failure)")
                return
            }
            try await withDispatchers(client: harness.database, settings: settings) {
                // The first is recorded delivered: the dispatcher's wake-up at start has passed, and it waits.
                let first = "woken-first-\(UUID().uuidString)"
                _ = try await harness.sendAndWait("sessions-revoked", sub: first)
                try await eventually("the first is delivered", timeout: .seconds(30)) {
                    let notifications = try await harness.notifications(sub: first)
                    return !notifications.isEmpty && notifications.allSatisfy { $0.status == "delivered" }
                }
                try await Task.sleep(for: .milliseconds(200))
                var subs: Set<String> = [first]
                for index in 0..<3 {
                    let sub = "woken-\(index)-\(UUID().uuidString)"
                    subs.insert(sub)
                    _ = try await harness.sendAndWait("sessions-revoked", sub: sub)
                }
                try await eventually("the next three are delivered", timeout: .seconds(30)) {
                    subs.isSubset(of: subscriber.accepted.withLock { $0 }.compactMap(\.sub))
                }
            }
            // NOTIFYs reach a listener in the order their transactions committed: once a sentinel sent now is heard,
            // any sent by those commits has been.
            _ = try await harness.database.query("SELECT pg_notify(\(NotificationOutbox.channel), 'sentinel')")
            try await eventually("the sentinel is heard") { heard.withLock { $0.contains("sentinel") } }
            #expect(heard.withLock { $0 } == ["sentinel"], "the commits that stored the actions sent NOTIFY")
        }
    }

    @Test("RISC_SUBSCRIBERS: the dispatcher makes the configured subscribers exactly the list, by URL, and leaves the others alone")
    func configuredSubscribers() async throws {
        try await Harness.withIsolatedDatabase(Self.options) { harness in
            let store = SubscriberStore(client: harness.database, cipher: NotificationDispatcher.Settings.fast.cipher, logger: Harness.logger)
            let secret = StandardWebhook.generateSecret()
            let byOperator = try await store.add(.init(url: "https://operator.example.com/hook", secret: nil, actions: nil))
            var settings = NotificationDispatcher.Settings.fast
            settings.configuredSubscribers = [
                try .init(url: "https://a.example.com/hook", secret: secret, actions: nil),
                try .init(url: "https://b.example.com/hook", secret: secret, actions: ["revoke_sessions"]),
            ]
            try await withDispatchers(2, client: harness.database, settings: settings) {
                try await eventually("the configured subscribers are in place") { try await store.subscribers().count == 3 }
            }
            func sealedSecret(_ url: String) async throws -> Data? {
                for try await sealed in try await harness.database.query("SELECT secret_sealed FROM risc_subscribers WHERE url = \(url)")
                    .decode(Data?.self)
                { return sealed }
                return nil
            }
            let sealedBefore = try await sealedSecret("https://b.example.com/hook")
            // Its secret lives in RISC_SUBSCRIBERS: a rotation here would be undone by the next dispatcher to start.
            let configuredID = try #require(try await store.subscribers().first { $0.url == "https://b.example.com/hook" }?.id)
            await #expect(throws: SubscriberStore.ConfiguredSubscriber.self) { _ = try await store.rotateSecret(subscriber: configuredID) }
            settings.configuredSubscribers = [
                try .init(url: "https://b.example.com/hook", secret: secret, actions: ["disable_sign_in"]),
                try .init(url: "https://c.example.com/hook", secret: secret, actions: nil),
            ]
            try await withDispatchers(client: harness.database, settings: settings) {
                try await eventually("the list is applied again") {
                    try await store.subscribers().map(\.url).sorted()
                        == ["https://b.example.com/hook", "https://c.example.com/hook", "https://operator.example.com/hook"]
                }
            }
            let subscribers = try await store.subscribers()
            #expect(subscribers.first { $0.url.hasPrefix("https://b.") }?.actions == [.disableSignIn], "updated in place")
            #expect(try await sealedSecret("https://b.example.com/hook") == sealedBefore, "an unchanged secret is not sealed again")
            #expect(subscribers.filter(\.configured).count == 2)
            #expect(subscribers.first { !$0.configured }?.id == byOperator, "an operator's subscriber is left alone")
        }
    }

    @Test("A delivery recorded after its lease ran out, once another attempt holds the row, changes nothing")
    func lateRecordChangesNothing() async throws {
        try await Harness.withIsolatedDatabase(Self.options) { harness in
            let subscriber = try await harness.addSubscriber(TestSubscriber(), url: "http://127.0.0.1:9/hook")
            let sub = "late-\(UUID().uuidString)"
            _ = try await harness.sendAndWait("sessions-revoked", sub: sub)
            let store = NotificationOutbox(client: harness.database, logger: Harness.logger)
            let first = try #require(try await store.claim(subscriber: subscriber, limit: 10, lease: .seconds(15)).first)
            #expect(first.attempt == 1)
            #expect(try await store.claim(subscriber: subscriber, limit: 10, lease: .seconds(15)).isEmpty, "the lease holds it")
            // Its lease runs out; another dispatcher takes it again, as the next attempt (the first never recorded one).
            try await harness.database.query("UPDATE risc_notification_leases SET until = now() WHERE notification_id = \(first.id)")
            let second = try #require(try await store.claim(subscriber: subscriber, limit: 10, lease: .seconds(15)).first)
            #expect(second.id == first.id && second.attempt == 2)
            // The first attempt's 2xx, recorded late: nothing changes, the row stays with the second attempt.
            #expect(try await store.record([(first.id, first.attempt, .delivered)]) == 0)
            #expect(try await harness.notifications(sub: sub).map(\.status) == ["pending"])
            #expect(try await store.record([(second.id, second.attempt, .delivered)]) == 1)
            #expect(try await harness.notifications(sub: sub).map(\.status) == ["delivered"])
            #expect(try await harness.notifications(sub: sub).map(\.attempts) == [2])
            #expect(try await store.record([(second.id, second.attempt, .delivered)]) == 0, "recorded once")
            let leases = try await harness.database.query("SELECT count(*)::int8 FROM risc_notification_leases WHERE notification_id = \(first.id)")
            for try await count in leases.decode(Int64.self) { #expect(count == 0, "the lease ended with the record") }
        }
    }

    @Test("A claim over a large backlog in a table never analyzed is answered at once, and takes only each user's oldest")
    func claimOverUnanalyzedBacklog() async throws {
        // A fresh database, as after a deployment: a burst fills the outbox before autovacuum's first ANALYZE.
        try await Harness.withIsolatedDatabase(Self.options) { harness in
            let subscriber = try await harness.addSubscriber(TestSubscriber(), url: "http://127.0.0.1:9/hook")
            try await harness.fillOutbox(subscriber: subscriber, rows: 6001)
            // The claim reads the due notifications in index order and stops at its limit: no sort of the backlog.
            func expectIndexOrder(_ state: String) async throws {
                // Planned as the claim is: prepared, in a transaction with its settings, which plan it once for any
                // subscriber and limit (the plan shown is that one: $1 and $2 stay parameters). A name of its own: a
                // prepared statement outlives a failed transaction on the pooled connection.
                let name = "claim_plan_\(UUID().uuidString.prefix(8).lowercased())"
                let plan = try await harness.database.transaction(logger: Harness.logger) { connection in
                    try await connection.query(NotificationOutbox.planSettings, logger: Harness.logger)
                    // The leases it takes are held until it commits: a claim that stalls first is cut off.
                    for try await timeout in try await connection.query(
                        "SELECT current_setting('idle_in_transaction_session_timeout')", logger: Harness.logger
                    ).decode(String.self) {
                        #expect(timeout == "30s")
                    }
                    try await connection.query(
                        PostgresQuery(unsafeSQL: "PREPARE \(name) (int8, int8, float8) AS " + NotificationOutbox.claimSQL), logger: Harness.logger)
                    var plan: [String] = []
                    for try await line in try await connection.query(
                        PostgresQuery(unsafeSQL: "EXPLAIN EXECUTE \(name) (\(subscriber), 8, 15)"), logger: Harness.logger
                    ).decode(String.self) {
                        plan.append(line)
                    }
                    try await connection.query(PostgresQuery(unsafeSQL: "DEALLOCATE \(name)"), logger: Harness.logger)
                    #expect(plan.contains { $0.contains("$1") }, "the plan for any subscriber:\n\(plan.joined(separator: "\n"))")
                    return plan
                }
                #expect(!plan.contains { $0.contains("Sort") }, "\(state):\n\(plan.joined(separator: "\n"))")
                #expect(
                    plan.contains { $0.contains("Index Scan using risc_notifications_pending_due") },
                    "\(state):\n\(plan.joined(separator: "\n"))")
                // Each candidate's lease is looked up by its key: a plan for any limit must not hash the whole lease
                // table (every row deleted since its last vacuum) for a claim of a few.
                #expect(!plan.contains { $0.contains("Hash") }, "\(state):\n\(plan.joined(separator: "\n"))")
                #expect(
                    plan.contains { $0.contains("Index Scan using risc_notification_leases_pkey") },
                    "\(state):\n\(plan.joined(separator: "\n"))")
            }
            try await expectIndexOrder("never analyzed")
            // Once analyzed, a claim read and sorted every pending row (an outage's backlog), or with most rows
            // delivered every pending one: a claim cost the whole backlog, and a backlog drained quadratically.
            try await harness.database.query("ANALYZE risc_notifications")
            try await expectIndexOrder("analyzed, all pending")
            try await harness.database.query("UPDATE risc_notifications SET status = 'delivered' WHERE id % 20 <> 0 AND sub <> 'backlog-1'")
            try await harness.database.query("ANALYZE risc_notifications")
            try await expectIndexOrder("analyzed, most delivered")
            // Then every row pending again, and some in flight (leased): the estimate of the rows left unleased fell
            // to one, which made reading and sorting them all look cheapest.
            try await harness.database.query("UPDATE risc_notifications SET status = 'pending'")
            try await harness.leaseOldest(49)
            try await harness.analyzeOutboxAndLeases()
            try await expectIndexOrder("analyzed, all pending, some leased")
            try await harness.database.query("DELETE FROM risc_notification_leases")
            // As an anti-join, this took minutes (6,000 pending rows, 36 million comparisons); the plan above is what
            // shows it is not one. The bound here only has to tell minutes from seconds: beside the whole parallel
            // suite, claiming the 5,992 rows below took longer than the store's usual 10 s.
            let store = NotificationOutbox(client: harness.database, timeout: .seconds(60), logger: Harness.logger)
            let claimed = try await store.claim(subscriber: subscriber, limit: 8, lease: .seconds(15))
            #expect(claimed.count == 8)
            // backlog-1 has two rows (k = 1 and 6001): only the first can be taken.
            #expect(!claimed.contains { $0.notification.sub == "backlog-1" && $0.notification.eventID == 6001 })
            let all = try await store.claim(subscriber: subscriber, limit: 7000, lease: .seconds(15))
            #expect(all.count == 6000 - 8, "each user's oldest, once")
        }
    }

    @Test("A record looks each notification and lease up by its key, whatever the outbox held when its plan was made")
    func recordLooksUpByKey() async throws {
        try await Harness.withIsolatedDatabase(Self.options) { harness in
            let subscriber = try await harness.addSubscriber(TestSubscriber(), url: "http://127.0.0.1:9/hook")
            // Empty and vacuumed, as after a purge: PostgreSQL takes both tables for empty, and a connection keeps the
            // plan it makes then until the next ANALYZE, however many rows come.
            try await harness.database.query("VACUUM ANALYZE risc_notifications")
            try await harness.database.query("VACUUM ANALYZE risc_notification_leases")
            try await harness.database.withConnection { connection in
                let name = "record_plan_\(UUID().uuidString.prefix(8).lowercased())"
                // Planned as the record is: in a transaction with its settings, once, for any outcomes.
                func expectLookupsByKey(_ state: String) async throws {
                    let plan = try await connection.transaction(logger: Harness.logger) { connection in
                        try await connection.query(NotificationOutbox.planSettings, logger: Harness.logger)
                        var plan: [String] = []
                        for try await line in try await connection.query(
                            PostgresQuery(unsafeSQL: "EXPLAIN EXECUTE \(name) ('[]', 'pending')"), logger: Harness.logger
                        ).decode(String.self) {
                            plan.append(line)
                        }
                        return plan
                    }
                    let shown = "\(state):\n\(plan.joined(separator: "\n"))"
                    // Every scan of either table is bounded by a key: none reads the whole table, or every pending row.
                    var scanned: Set<String> = []
                    for (index, line) in plan.enumerated() {
                        guard
                            let table = ["risc_notifications", "risc_notification_leases"].first(where: {
                                line.contains(" on \($0) ") || line.contains("Index Scan on \($0)_")
                            }),
                            line.contains("Scan"), !line.contains("Bitmap Heap Scan")
                        else { continue }
                        scanned.insert(table)
                        let next = index + 1 < plan.count ? plan[index + 1].trimmingCharacters(in: .whitespaces) : ""
                        #expect(!line.contains("Seq Scan") && next.hasPrefix("Index Cond:"), "\(line.trimmingCharacters(in: .whitespaces)), \(shown)")
                    }
                    #expect(scanned == ["risc_notifications", "risc_notification_leases"], "\(shown)")
                }
                try await connection.transaction(logger: Harness.logger) { connection in
                    try await connection.query(NotificationOutbox.planSettings, logger: Harness.logger)
                    try await connection.query(
                        PostgresQuery(
                            unsafeSQL: "PREPARE \(name) (\(NotificationOutbox.recordParameterTypes)) AS " + NotificationOutbox.recordSQL),
                        logger: Harness.logger)
                }
                try await expectLookupsByKey("planned on an empty outbox")
                // A backlog comes, some of it in flight: the plan made on the empty tables is the one still used.
                try await harness.fillOutbox(subscriber: subscriber, rows: 6000)
                try await harness.leaseOldest(40)
                try await expectLookupsByKey("the same plan, with a backlog")
                try await harness.analyzeOutboxAndLeases()
                try await expectLookupsByKey("planned again, analyzed")
                // The usual state: every notification delivered when ANALYZE last looked, so PostgreSQL expects none
                // pending; then a subscriber's outage leaves a backlog.
                try await harness.database.query("UPDATE risc_notifications SET status = 'delivered'")
                try await harness.database.query("ANALYZE risc_notifications")
                try await expectLookupsByKey("planned again, nothing pending when analyzed")
                try await harness.database.query("UPDATE risc_notifications SET status = 'pending'")
                try await expectLookupsByKey("the same plan, with a backlog since")
                try await connection.query(PostgresQuery(unsafeSQL: "DEALLOCATE \(name)"), logger: Harness.logger)
            }
            // And the statement does its job over that backlog: each attempt recorded once, by its lease. Under a
            // bound of a minute, not the default 5 s: claiming and recording 6,000 at once is not what is timed here, and
            // CI's parallel tests once took longer.
            let store = NotificationOutbox(client: harness.database, timeout: .seconds(60), logger: Harness.logger)
            try await harness.database.query("DELETE FROM risc_notification_leases")
            let claimed = try await store.claim(subscriber: subscriber, limit: 8, lease: .seconds(15))
            #expect(claimed.count == 8)
            let outcomes = claimed.map { (id: $0.id, attempt: $0.attempt, outcome: NotificationOutbox.Outcome.delivered) }
            // Each twice, and one for an attempt that holds no lease: each is recorded once.
            #expect(try await store.record(outcomes + outcomes + [(claimed[0].id, claimed[0].attempt + 1, .dead(error: "not its attempt"))]) == 8)
            #expect(try await store.record(outcomes) == 0, "recorded once")
            // One no longer pending (an operator's hand, say): its lease ends, and it is not counted.
            let rest = try await store.claim(subscriber: subscriber, limit: 7000, lease: .seconds(15))
            #expect(rest.count == 6000 - 8)
            try await harness.database.query("UPDATE risc_notifications SET status = 'dead' WHERE id = \(rest[0].id)")
            // More outcomes than one statement takes: all recorded, in slices.
            #expect(try await store.record(rest.map { ($0.id, $0.attempt, .delivered) }) == 6000 - 9)
            #expect(try await harness.notifications(sub: rest[0].notification.sub ?? "").map(\.status) == ["dead"])
            let leases = try await harness.database.query("SELECT count(*)::int8 FROM risc_notification_leases")
            for try await count in leases.decode(Int64.self) { #expect(count == 0, "every lease ended with its record") }
        }
    }

    @Test("A SET that carries two events: each notification names the event that caused its action", arguments: [true, false])
    func notificationNamesItsOwnEvent(applyOnReceipt: Bool) async throws {
        var options = Self.options
        options.applyOnReceipt = applyOnReceipt
        try await Harness.withIsolatedDatabase(options) { harness in
            _ = try await harness.addSubscriber(TestSubscriber(), url: "http://127.0.0.1:9/hook")
            let sub = "two-events-\(UUID().uuidString)"
            let subject: JSONValue = ["subject_type": "iss-sub", "iss": "https://accounts.google.com", "sub": .string(sub)]
            let token = try await harness.sign(
                harness.claims { claims in
                    claims["events"] = [
                        EventType.sessionsRevoked.rawValue: ["subject": subject],
                        EventType.accountCredentialChangeRequired.rawValue: ["subject": subject],
                    ]
                })
            #expect(try await harness.post(token).status == 202)
            #expect(try await harness.waitUntilProcessed(jti: jti(of: token)) == "done")
            var types: [String: String] = [:]
            for try await (kind, type) in try await harness.database.query(
                "SELECT kind, event_type FROM risc_notifications WHERE sub = \(sub)"
            ).decode((String, String).self) {
                types[kind] = type
            }
            #expect(
                types == [
                    "revoke_sessions": EventType.sessionsRevoked.rawValue,
                    "require_credential_change": EventType.accountCredentialChangeRequired.rawValue,
                ], "\(types)")
        }
    }

    @Test(
        "A hijacking, then an older account-enabled: the skipped enable is recorded and never notified; each body says its event's issued_at",
        arguments: [true, false])
    func skippedStateChangeIsNotNotified(applyOnReceipt: Bool) async throws {
        try await Self.withOneSubscriber(applyOnReceipt: applyOnReceipt) { harness, subscriber in
            try await withDispatchers(client: harness.database) {
                let sub = "mirrored-\(UUID().uuidString)"
                let issued = Date().timeIntervalSince1970.rounded(.down) - 10
                _ = try await harness.sendAndWait("account-disabled", sub: sub) {
                    $0.reason = "hijacking"
                    $0.iat = issued
                }
                let enable = try await harness.sendAndWait("account-enabled", sub: sub) { $0.iat = issued - 60 }
                // Recorded, as skipped.
                let recorded = try await harness.database.query(
                    """
                    SELECT a.kind, a.rows_affected, a.skipped FROM risc_event_actions a JOIN risc_events e ON e.id = a.event_id
                    WHERE e.jti = \(enable)
                    """
                ).collect().map { try $0.decode((String, Int32, Bool).self) }
                #expect(recorded.map { "\($0.0):\($0.1):\($0.2)" } == ["enable_sign_in:0:true"])
                // A barrier: one user's notifications are delivered in order, so once a later event's arrives, an
                // enable_sign_in notification, had there been one, would have arrived before it.
                let later = try await harness.sendAndWait("sessions-revoked", sub: sub) { $0.iat = issued + 5 }
                try await eventually("the later event's notification arrives") {
                    subscriber.accepted.withLock { $0 }.contains { $0.json["event"]?["jti"]?.stringValue == later }
                }
                // Once per webhook-id: a loaded machine may retry a delivery whose 2xx came late.
                var seen = Set<String>()
                let delivered = subscriber.accepted.withLock { $0 }.filter { $0.sub == sub && seen.insert($0.webhookID).inserted }
                let kinds = delivered.compactMap { $0.json["type"]?.stringValue }
                #expect(kinds == ["disable_sign_in", "revoke_sessions", "revoke_sessions"], "\(kinds)")
                #expect(try await harness.notifications(sub: sub).map(\.kind).contains("enable_sign_in") == false)
                // Every body names when its event was issued (RFC 3339, the SET's iat).
                let issuedAts = delivered.map { $0.json["event"]?["issued_at"]?.stringValue }
                let formatter = ISO8601DateFormatter()
                #expect(
                    issuedAts == [issued, issued, issued + 5].map { formatter.string(from: Date(timeIntervalSince1970: $0)) },
                    "\(issuedAts)")
            }
        }
    }

    @Test("A 2xx status line is a delivery, however slowly its body follows: it is not sent again")
    func slowBodyAfterSuccess() async throws {
        try await Harness.withIsolatedDatabase(Self.options) { harness in
            let subscriber = TestSubscriber { _, _ in .slowBody(.seconds(20)) }
            try await subscriber.serving { url in
                _ = try await harness.addSubscriber(subscriber, url: url)
                var settings = NotificationDispatcher.Settings.fast
                // Longer than the status line can take on a starved machine (a late one would be a fair retry), far
                // shorter than the body: the body, not the wait for the status line, is what outlasts it.
                settings.timeout = .seconds(8)
                try await withDispatchers(client: harness.database, settings: settings) {
                    let sub = "slow-body-\(UUID().uuidString)"
                    _ = try await harness.sendAndWait("sessions-revoked", sub: sub)
                    try await eventually("the delivery is recorded", timeout: .seconds(30)) {
                        try await harness.notifications(sub: sub).first?.status == "delivered"
                    }
                    #expect(try await harness.notifications(sub: sub).first?.attempts == 1)
                    #expect(subscriber.deliveries.filter { $0.sub == sub }.count == 1)
                }
            }
        }
    }

    @Test("Each delivery goes to the address checked just before it: a name that resolves somewhere forbidden is not sent to")
    func deliveryAddressChecked() async throws {
        try await Harness.withIsolatedDatabase(Self.options) { harness in
            let subscriber = TestSubscriber()
            try await subscriber.serving { url in
                let port = try #require(URL(string: url)?.port)
                // Names the system cannot resolve: the dispatcher's resolver below answers for them, as a DNS server
                // would, one name for the subscriber's loopback address and one for the metadata service.
                let pinned = try await harness.addSubscriber(subscriber, url: url)
                try await harness.database.query(
                    "UPDATE risc_subscribers SET url = \("http://pinned.risc.test:\(port)/hook") WHERE id = \(pinned)")
                let rebound = try await harness.addSubscriber(TestSubscriber(), url: "https://hooks.example.com/hook")
                try await harness.database.query("UPDATE risc_subscribers SET url = 'https://rebound.risc.test/hook' WHERE id = \(rebound)")
                let literal = try await harness.addSubscriber(TestSubscriber(), url: "https://hooks.example.com/hook")
                // As a database from before the rule might hold it.
                try await harness.database.query("UPDATE risc_subscribers SET url = 'https://169.254.169.254/hook' WHERE id = \(literal)")
                var settings = NotificationDispatcher.Settings.fast
                settings.resolve = { host in
                    switch host {
                    case "pinned.risc.test": [IPAddress(literal: "127.0.0.1")!]
                    case "rebound.risc.test": [IPAddress(literal: "10.0.0.8")!, IPAddress(literal: "169.254.169.254")!]
                    default: []
                    }
                }
                try await withDispatchers(client: harness.database, settings: settings) {
                    let sub = "addresses-\(UUID().uuidString)"
                    _ = try await harness.sendAndWait("sessions-revoked", sub: sub)
                    try await eventually("the pinned subscriber has it") { subscriber.accepted.withLock { $0.count } == 1 }
                    try await eventually("the other two failed without connecting") {
                        var errors: [Int64: String] = [:]
                        for try await (id, error) in try await harness.database.query(
                            "SELECT subscriber_id, coalesce(last_error, '') FROM risc_notifications WHERE sub = \(sub)"
                        ).decode((Int64, String).self) {
                            errors[id] = error
                        }
                        return [rebound, literal].allSatisfy {
                            errors[$0]?.hasPrefix("not sent:") == true && errors[$0]?.contains("link-local") == true
                        }
                    }
                }
            }
        }
    }

    @Test("A slow subscriber, or one that never answers, does not hold up another's notifications")
    func slowSubscriberDoesNotStarveOthers() async throws {
        try await Harness.withIsolatedDatabase(Self.options) { harness in
            // The slow one holds each delivery a minute, within the dispatcher's timeout: far longer than a loaded
            // machine ever delays the healthy one.
            let slow = TestSubscriber { _, _ in .hang(.seconds(60)) }
            let healthy = TestSubscriber()
            let settings = {
                var settings = NotificationDispatcher.Settings.fast
                settings.timeout = .seconds(90)
                return settings
            }()
            try await slow.serving { slowURL in
                try await healthy.serving { healthyURL in
                    _ = try await harness.addSubscriber(slow, url: slowURL)
                    _ = try await harness.addSubscriber(healthy, url: healthyURL)
                    try await withDispatchers(client: harness.database, settings: settings) {
                        // The held deliveries end before the dispatcher drains them at shutdown.
                        defer { slow.finished.store(true, ordering: .relaxed) }
                        // Many users: each has a notification of its own to each subscriber, all due at once.
                        for index in 0..<40 {
                            _ = try await harness.send("sessions-revoked", sub: "starved-\(index)-\(UUID().uuidString)")
                        }
                        // Sharing slots, the healthy one's notifications would wait that minute behind the slow one's.
                        try await eventually("the healthy subscriber has every notification", timeout: .seconds(30)) {
                            healthy.accepted.withLock { $0.count } == 40
                        }
                        // Many held at once: the slots they fill are not the healthy one's.
                        try await eventually("the slow subscriber holds many deliveries") { slow.deliveries.count >= 10 }
                    }
                }
            }
        }
    }

    @Test("Secrets are sealed at rest; rotate-secret keeps every notification and signs with both for a day; vault rotate re-seals", .seeded)
    func sealedAndRotatedSecrets() async throws {
        try await Harness.withIsolatedDatabase(Self.options) { harness in
            let subscriber = TestSubscriber()
            try await subscriber.serving { url in
                let id = try await harness.addSubscriber(subscriber, url: url)
                func stored() async throws -> (clear: String?, sealed: Data?, keyID: String?, previous: Data?) {
                    for try await row in try await harness.database.query(
                        "SELECT secret, secret_sealed, secret_key_id, previous_secret_sealed FROM risc_subscribers WHERE id = \(id)"
                    ).decode((String?, Data?, String?, Data?).self) {
                        return row
                    }
                    return (nil, nil, nil, nil)
                }
                let atRest = try await stored()
                let key = Data(base64Encoded: String(subscriber.secret.dropFirst(6)))!
                #expect(atRest.clear == nil && atRest.sealed != nil)
                #expect(atRest.sealed.map { $0.range(of: key) == nil && $0.range(of: Data(subscriber.secret.utf8)) == nil } == true)

                // A notification waits (no dispatcher yet); the secret is rotated; it is still there, and goes out signed
                // with the new secret and the old one.
                let sub = "rotated-\(UUID().uuidString)"
                _ = try await harness.sendAndWait("sessions-revoked", sub: sub)
                let rotated = try await harness.call(.POST, "/admin/v1/subscribers/\(id)/rotate-secret", bearer: Harness.adminToken)
                #expect(rotated.status == 200, "\(rotated.body)")
                let newSecret = try #require(rotated.json["secret"]?.stringValue)
                #expect(newSecret != subscriber.secret && StandardWebhook.key(secret: newSecret) != nil)
                #expect(try await harness.notifications(sub: sub).map(\.status) == ["pending"])
                #expect(try await stored().previous != nil)
                try await withDispatchers(client: harness.database) {
                    try await eventually("the notification is delivered") { subscriber.accepted.withLock { $0.count } == 1 }
                }
                let delivery = try #require(subscriber.deliveries.first)
                #expect(delivery.verified, "the old secret still verifies")
                #expect(delivery.signature.split(separator: " ").count == 2)
                let newKey = try #require(StandardWebhook.key(secret: newSecret))
                #expect(throws: Never.self) {
                    try StandardWebhook.verify(
                        id: delivery.webhookID, timestamp: delivery.timestamp, signatures: delivery.signature, body: Data(delivery.body.utf8),
                        key: newKey)
                }
                let missing = try await harness.call(.POST, "/admin/v1/subscribers/999999/rotate-secret", bearer: Harness.adminToken)
                #expect(missing.status == 404)

                // A new vault key: `vault rotate` re-seals the secrets under it, the old key kept for reading.
                var random = SeededGenerator()
                let newVaultKey = Data((0..<32).map { _ in UInt8.random(in: 0...255, using: &random) }).base64EncodedString()
                let result = try await runRiscReceiver(
                    ["vault", "rotate"],
                    environment: [
                        "DATABASE_URL": harness.databaseURL, "RISC_VAULT_KEY": newVaultKey, "RISC_VAULT_PREVIOUS_KEYS": Harness.vaultKey,
                        "LOG_LEVEL": "warning",
                    ])
                #expect(result.status == 0 && result.output.contains("Re-sealed 1 subscriber secret"), "\(result.output)")
                let resealed = try await stored()
                #expect(resealed.keyID == VaultCipher.keyID(VaultCipher.key(base64: newVaultKey)!))
                let cipher = try #require(VaultCipher.from(key: newVaultKey, previous: []))
                #expect(try cipher.open(try #require(resealed.sealed), keyID: cipher.currentKeyID, subscriberID: id) == newSecret)
            }
        }
    }

    @Test("A rolled-back action leaves no notification")
    func rolledBackActionNotifiesNobody() async throws {
        try await Harness.withIsolatedDatabase(Self.options) { harness in
            let subscriber = TestSubscriber()
            _ = try await harness.addSubscriber(subscriber, url: "http://127.0.0.1:9/hook")
            let sub = "rolled-back-\(UUID().uuidString)"
            let jti = try await harness.sendAndWait("sessions-revoked", sub: sub)
            #expect(try await harness.notifications(sub: sub).count == 1)
            // The worker's own path: apply again inside a transaction that then fails.
            let actions = try await harness.revocationActions(jti: jti, sub: sub)
            await #expect(throws: (any Error).self) {
                try await harness.database.transaction(logger: Harness.logger) { connection in
                    try await connection.query("SELECT * FROM risc_apply_actions(\(actions)::jsonb, NULL, '{}')", logger: Harness.logger)
                    try await connection.query("SELECT 1/0", logger: Harness.logger)
                }
            }
            #expect(try await harness.notifications(sub: sub).count == 1)
        }
    }

    @Test("500s and timeouts are retried with the same webhook-id until a 2xx; after the last attempt it is dead, then replayed")
    func retriesDeadLetterAndReplay() async throws {
        try await Harness.withIsolatedDatabase(Self.options) { harness in
            let failing = Mutex<Set<String>>([])
            let subscriber = TestSubscriber { delivery, count in
                if let sub = delivery.sub, failing.withLock({ $0.contains(sub) }) { return .status(503) }
                // Flaky: a 500, then no answer in time, then accepted.
                switch count {
                case 1: return .status(500)
                case 2: return .hang(.seconds(30))
                default: return .status(200)
                }
            }
            try await subscriber.serving { url in
                _ = try await harness.addSubscriber(subscriber, url: url)
                // Short enough for the hanging answer; long enough that on a starved machine an answer that comes is
                // not cut off (the counts below would be one too many).
                var settings = NotificationDispatcher.Settings.fast
                settings.timeout = .seconds(8)
                try await withDispatchers(client: harness.database, settings: settings) {
                    let flaky = "flaky-\(UUID().uuidString)"
                    _ = try await harness.sendAndWait("sessions-revoked", sub: flaky)
                    try await eventually("the third attempt is accepted") { subscriber.accepted.withLock { $0.count } == 1 }
                    let attempts = subscriber.deliveries.filter { $0.sub == flaky }
                    #expect(attempts.count == 3)
                    #expect(Set(attempts.map(\.webhookID)).count == 1, "the same webhook-id on every attempt")
                    #expect(Set(attempts.map(\.body)).count == 1, "the same body on every attempt")
                    #expect(attempts.allSatisfy { $0.verified })
                    try await eventually("the delivery is recorded") { try await harness.notifications(sub: flaky).first?.status == "delivered" }
                    #expect(try await harness.notifications(sub: flaky).first?.attempts == 3)

                    // Always refused: dead after the last attempt (4), and it does not hold back what follows.
                    let doomed = "doomed-\(UUID().uuidString)"
                    failing.withLock { _ = $0.insert(doomed) }
                    _ = try await harness.sendAndWait("sessions-revoked", sub: doomed)
                    try await eventually("the notification is dead") { try await harness.notifications(sub: doomed).first?.status == "dead" }
                    #expect(try await harness.notifications(sub: doomed).first?.attempts == 4)
                    #expect(subscriber.deliveries.filter { $0.sub == doomed }.count == 4)
                    failing.withLock { _ = $0.remove(doomed) }
                    _ = try await harness.sendAndWait("account-enabled", sub: doomed)
                    try await eventually("the next one is delivered") {
                        try await harness.notifications(sub: doomed).last?.status == "delivered"
                    }

                    // Replayed through the admin API: delivered, with the webhook-id of its failed attempts.
                    let dead = try await harness.call(.GET, "/admin/v1/notifications?status=dead&sub=\(doomed)", bearer: Harness.adminToken)
                    let deadID = try #require(dead.json["notifications"]?.arrayValue?.first?["id"]?.number)
                    #expect(dead.json["notifications"]?.arrayValue?.first?["last_error"]?.stringValue == "HTTP 503")
                    let replay = try await harness.call(.POST, "/admin/v1/notifications/\(Int64(deadID))/replay", bearer: Harness.adminToken)
                    #expect(replay.status == 202, "\(replay.body)")
                    try await eventually("the replay is delivered") {
                        try await harness.notifications(sub: doomed).allSatisfy { $0.status == "delivered" }
                    }
                    let webhookID = try #require(try await harness.notifications(sub: doomed).first?.webhookID)
                    #expect(subscriber.accepted.withLock { $0.filter { $0.webhookID == webhookID }.count } == 1)
                    #expect(subscriber.deliveries.filter { $0.webhookID == webhookID }.count == 5)
                    let again = try await harness.call(.POST, "/admin/v1/notifications/999999/replay", bearer: Harness.adminToken)
                    #expect(again.status == 404)
                }
            }
        }
    }

    @Test("One user's notifications are delivered in the order their actions were taken, across dispatchers; others are not held back")
    func orderedPerUser() async throws {
        try await Harness.withIsolatedDatabase(Self.options) { harness in
            let slow = "slow-\(UUID().uuidString)"
            // The user's first notification is refused until the test lets it through: the later ones must wait for it.
            let refusing = Atomic<Bool>(true)
            let subscriber = TestSubscriber { delivery, _ in
                let first = delivery.sub == slow && delivery.json["type"]?.stringValue == "revoke_sessions"
                return first && refusing.load(ordering: .relaxed) ? .status(500) : .status(204)
            }
            try await subscriber.serving { url in
                _ = try await harness.addSubscriber(subscriber, url: url)
                var settings = NotificationDispatcher.Settings.fast
                // Enough attempts that the first never goes dead while a starved machine runs the sends below.
                settings.retryPolicy = RetryPolicy(maxAttempts: 1000, baseDelay: 0.3, maxDelay: 1)
                try await withDispatchers(3, client: harness.database, settings: settings) {
                    _ = try await harness.sendAndWait("sessions-revoked", sub: slow)
                    _ = try await harness.sendAndWait("account-disabled", sub: slow) { $0.reason = "bulk-account" }
                    _ = try await harness.sendAndWait("account-enabled", sub: slow)
                    _ = try await harness.sendAndWait("account-credential-change-required", sub: slow)
                    let other = "other-\(UUID().uuidString)"
                    _ = try await harness.sendAndWait("sessions-revoked", sub: other)
                    try await eventually("the other user is not held back") { subscriber.accepted.withLock { $0.contains { $0.sub == other } } }
                    try await eventually("the slow user's first is refused twice") {
                        subscriber.deliveries.filter { $0.sub == slow }.count >= 2
                    }
                    #expect(!subscriber.accepted.withLock { $0.contains { $0.sub == slow } }, "nothing of the slow user's went ahead of the first")
                    refusing.store(false, ordering: .relaxed)
                    try await eventually("all of the slow user's are delivered") {
                        subscriber.accepted.withLock { $0.filter { $0.sub == slow }.count } == 5
                    }
                    let order = subscriber.accepted.withLock { $0.filter { $0.sub == slow }.compactMap { $0.json["type"]?.stringValue } }
                    #expect(order == ["revoke_sessions", "disable_sign_in", "flag_for_review", "enable_sign_in", "require_credential_change"])
                    let ids = try await harness.notifications(sub: slow).map(\.webhookID)
                    #expect(subscriber.accepted.withLock { $0.filter { $0.sub == slow }.map(\.webhookID) } == ids)
                }
            }
        }
    }

    @Test("kill -9 of the dispatcher mid-delivery loses nothing: another delivers it, with the same webhook-id")
    func killedDispatcherLosesNothing() async throws {
        try await Harness.withIsolatedDatabase(Self.options) { harness in
            let subscriber = TestSubscriber { _, count in count == 1 ? .hang(.seconds(30)) : .status(204) }
            try await subscriber.serving { url in
                _ = try await harness.addSubscriber(subscriber, url: url)
                let sub = "killed-\(UUID().uuidString)"
                _ = try await harness.sendAndWait("sessions-revoked", sub: sub)
                let log = FileManager.default.temporaryDirectory.appendingPathComponent("dispatcher-\(UUID().uuidString).log").path
                defer { try? FileManager.default.removeItem(atPath: log) }
                var environment = ProcessInfo.processInfo.environment
                environment["DATABASE_URL"] = harness.databaseURL
                environment["LOG_LEVEL"] = "warning"
                environment["RISC_VAULT_KEY"] = Harness.vaultKey
                let worker = try ChildProcess.spawn(riscReceiverBinary, ["worker"], environment: environment, outputFile: log)
                try await eventually("the dispatcher is mid-delivery") { subscriber.deliveries.count == 1 }
                worker.kill(SIGKILL)
                #expect(try await worker.wait() == 128 + SIGKILL)
                #expect(try await harness.notifications(sub: sub).first?.status == "pending")
                // Its lease (the 10 s timeout and 5 s) runs out; then another dispatcher sends it again.
                try await withDispatchers(client: harness.database) {
                    try await eventually("another dispatcher delivers it", timeout: .seconds(40)) {
                        try await harness.notifications(sub: sub).first?.status == "delivered"
                    }
                }
                let deliveries = subscriber.deliveries
                #expect(deliveries.count == 2)
                #expect(Set(deliveries.map(\.webhookID)).count == 1)
                #expect(deliveries.allSatisfy { $0.verified })
            }
        }
    }

    @Test(
        "A subscriber removed while an action commits: the action commits, and no notification outlives the subscriber",
        arguments: [true, false])
    func removalBesideAnAction(removalFirst: Bool) async throws {
        try await Harness.withIsolatedDatabase(Self.options) { harness in
            let kept = try await harness.addSubscriber(TestSubscriber(), url: "http://127.0.0.1:9/kept")
            let removed = try await harness.addSubscriber(TestSubscriber(), url: "http://127.0.0.1:9/removed")
            let sub = "removal-\(UUID().uuidString)"
            let jti = try await harness.sendAndWait("sessions-revoked", sub: sub)
            // The same action applied again, as a worker would: it notifies each subscriber once more.
            let actions = try await harness.revocationActions(jti: jti, sub: sub)
            func count(_ subscriber: Int64) async throws -> Int64 {
                try await harness.number("SELECT count(*)::int8 FROM risc_notifications WHERE subscriber_id = \(subscriber)")
            }
            #expect(try await count(kept) == 1)
            #expect(try await count(removed) == 1)
            // One transaction is held open while the other starts beside it, then commits.
            try await harness.database.withConnection { first in
                try await first.query("BEGIN", logger: Harness.logger)
                let apply: PostgresQuery = "SELECT * FROM risc_apply_actions(\(actions)::jsonb, NULL, '{}')"
                let remove: PostgresQuery = "DELETE FROM risc_subscribers WHERE id = \(removed)"
                // Rows read to the end: an error while a statement runs comes with its rows.
                for try await _ in try await first.query(removalFirst ? remove : apply, logger: Harness.logger) {}
                let second = Task {
                    try await harness.database.withConnection { connection in
                        for try await _ in try await connection.query(removalFirst ? apply : remove, logger: Harness.logger) {}
                    }
                }
                // Committed only once the second waits for the first's lock: the moment the race is about.
                var firstPID: Int32 = 0
                for try await pid in try await first.query("SELECT pg_backend_pid()", logger: Harness.logger).decode(Int32.self) { firstPID = pid }
                try await eventually("the second transaction waits for the first") {
                    var waiting: Int64 = 0
                    for try await n in try await harness.database.query(
                        "SELECT count(*)::int8 FROM pg_stat_activity WHERE \(firstPID) = ANY (pg_blocking_pids(pid))"
                    ).decode(Int64.self) { waiting = n }
                    return waiting > 0
                }
                try await first.query("COMMIT", logger: Harness.logger)
                do {
                    try await second.value
                } catch let error as PSQLError {
                    Issue.record("the second transaction failed: \(error.serverInfo?[.message] ?? "\(error.code)")")
                }
            }
            #expect(try await count(removed) == 0, "no notification outlives its subscriber")
            #expect(try await count(kept) == 2, "the action committed, and notified the subscriber that stays")
            // Under REPEATABLE READ a removal would miss what was written meanwhile: it is refused.
            try await harness.database.withConnection { connection in
                try await connection.query("BEGIN ISOLATION LEVEL REPEATABLE READ", logger: Harness.logger)
                await #expect(throws: PSQLError.self) {
                    for try await _ in try await connection.query("DELETE FROM risc_subscribers WHERE id = \(kept)", logger: Harness.logger) {}
                }
                try await connection.query("ROLLBACK", logger: Harness.logger)
            }
            #expect(try await count(kept) == 2)
            // Truncating the subscribers takes their notifications too, as TRUNCATE ... CASCADE did under a foreign key.
            for try await _ in try await harness.database.query("TRUNCATE risc_subscribers") {}
            #expect(try await count(kept) == 0)
        }
    }

    @Test(
        "A removal reads only the subscriber's pending and dead notifications, not the whole outbox; its delivered ones stay, and are not replayed"
    )
    func removalReadsOnlyWhatItDeletes() async throws {
        try await Harness.withIsolatedDatabase(Self.options) { harness in
            let removed = try await harness.addSubscriber(TestSubscriber(), url: "http://127.0.0.1:9/removed")
            let kept = try await harness.addSubscriber(TestSubscriber(), url: "http://127.0.0.1:9/kept")
            // An outbox of delivered notifications, as after weeks of traffic, with a few pending and dead for each, as
            // PostgreSQL last analyzed it; then the other subscriber's backlog grew. Pending ones are due in an hour: no
            // dispatcher takes them meanwhile.
            func insert(_ subscriber: Int64, _ status: String, _ rows: Int) async throws {
                try await harness.database.query(
                    """
                    INSERT INTO risc_notifications (subscriber_id, action_id, kind, sub, count, event_id, event_jti, event_type,
                                                    occurred_at, status, next_attempt_at)
                    SELECT \(subscriber), k, 'revoke_sessions', 'removal-' || k, 0, k, 'jti-' || k, 'sessions-revoked', now(),
                           \(status), now() + interval '1 hour'
                    FROM generate_series(1, \(rows)) AS k
                    """)
            }
            for subscriber in [removed, kept] {
                for (status, rows) in [("delivered", 20_000), ("pending", 3), ("dead", 2)] { try await insert(subscriber, status, rows) }
            }
            try await harness.analyzeOutboxAndLeases()
            try await insert(kept, "pending", 1_997)
            try await insert(kept, "dead", 1_998)
            func counts(_ subscriber: Int64) async throws -> [String: Int64] {
                var found: [String: Int64] = [:]
                for try await (status, n) in try await harness.database.query(
                    "SELECT status, count(*)::int8 FROM risc_notifications WHERE subscriber_id = \(subscriber) GROUP BY status"
                ).decode((String, Int64).self) { found[status] = n }
                return found
            }
            // The removal's own reads, counted in its transaction: with millions of rows, a read of the whole outbox held
            // the subscriber's row (and every SET that would notify it) for seconds; so did a read of every subscriber's
            // pending rows, once a backlog had grown.
            let (sequentialScans, fetchedByIndex) = try await harness.database.transaction(logger: Harness.logger) { connection in
                for try await _ in try await connection.query("DELETE FROM risc_subscribers WHERE id = \(removed)", logger: Harness.logger) {}
                var reads: (Int64, Int64) = (-1, -1)
                for try await row in try await connection.query(
                    "SELECT seq_scan, idx_tup_fetch FROM pg_stat_xact_user_tables WHERE relname = 'risc_notifications'",
                    logger: Harness.logger
                ).decode((Int64, Int64).self) { reads = row }
                return reads
            }
            #expect(sequentialScans == 0, "the removal read the outbox through its indexes of pending and dead rows")
            #expect(fetchedByIndex <= 20, "only the removed subscriber's 5, looked up again to be deleted; not the other's 4,000")
            #expect(try await counts(removed) == ["delivered": 20_000], "its pending and dead notifications went; delivered ones stay")
            #expect(try await counts(kept) == ["delivered": 20_000, "pending": 2_000, "dead": 2_000])
            // A replay of a delivered notification of the removed subscriber is refused, and changes nothing.
            let outbox = NotificationOutbox(client: harness.database, logger: Harness.logger)
            func first(of subscriber: Int64) async throws -> Int64 {
                try await harness.number(
                    "SELECT id FROM risc_notifications WHERE subscriber_id = \(subscriber) AND status = 'delivered' ORDER BY id LIMIT 1")
            }
            let orphan = try await first(of: removed)
            #expect(try await outbox.replay(id: orphan) == .subscriberRemoved)
            let refused = try await harness.call(.POST, "/admin/v1/notifications/\(orphan)/replay", bearer: Harness.adminToken)
            #expect(refused.status == 409)
            #expect(refused.body.contains("subscriber was removed"))
            #expect(try await counts(removed) == ["delivered": 20_000])
            // One of the subscriber that stays is replayed as before.
            #expect(try await outbox.replay(id: try await first(of: kept)) == .replayed)
            #expect(try await outbox.replay(id: Int64.max) == .notFound)
        }
    }

    @Test("subscribers add|list|remove and notifications list|show|replay from the CLI; https only, except on loopback")
    func commandLine() async throws {
        try await Harness.withIsolatedDatabase(Self.options) { harness in
            let environment = ["DATABASE_URL": harness.databaseURL, "LOG_LEVEL": "warning", "RISC_VAULT_KEY": Harness.vaultKey]
            func run(_ arguments: [String]) async throws -> (status: Int32, output: String) {
                try await runRiscReceiver(arguments, environment: environment)
            }
            // Secrets are stored sealed with the vault key: without it, nothing can be added.
            let keyless = try await runRiscReceiver(
                ["subscribers", "add", "--url", "https://hooks.example.com/risc"], environment: environment.filter { $0.key != "RISC_VAULT_KEY" })
            #expect(keyless.status == 1 && keyless.output.contains("RISC_VAULT_KEY"), "\(keyless.output)")
            let added = try await run([
                "subscribers", "add", "--url", "https://hooks.example.com/risc", "--actions", "revoke_sessions,disable_sign_in", "--json",
            ])
            #expect(added.status == 0, "\(added.output)")
            let json = try JSONValue.parse(Data(added.output.utf8))
            #expect(Set(json.objectValue?.keys.map { $0 } ?? []) == ["id", "secret"])
            let secret = try #require(json["secret"]?.stringValue)
            #expect(StandardWebhook.key(secret: secret) != nil, "a generated whsec_ secret")
            let id = Int64(try #require(json["id"]?.number))

            let list = try await run(["subscribers", "list", "--json"])
            #expect(list.status == 0)
            #expect(!list.output.contains(secret.dropFirst(6)), "a listing never shows a secret")
            let listed = try JSONValue.parse(Data(list.output.utf8))["subscribers"]?.arrayValue?.first
            #expect(listed?["url"]?.stringValue == "https://hooks.example.com/risc")
            #expect(listed?["actions"] == ["revoke_sessions", "disable_sign_in"])
            #expect(try await run(["subscribers", "list"]).output.contains("revoke_sessions,disable_sign_in"))

            for (arguments, message) in [
                (["--url", "http://hooks.example.com/risc"], "https"),
                (["--url", "https://hooks.example.com/risc", "--secret", StandardWebhook.generateSecret()], "standard input"),
                (["--url", "https://169.254.169.254/risc"], "link-local"),
                (["--url", "https://hooks.example.com/risc", "--actions", "record_verification"], "record_verification"),
            ] {
                let refused = try await run(["subscribers", "add"] + arguments)
                #expect(refused.status == 2, "\(arguments): \(refused.output)")
                #expect(refused.output.contains(message) && refused.output.contains("Usage"), "\(refused.output)")
            }
            // A given secret comes from standard input; a bad one is refused by name.
            let given = StandardWebhook.generateSecret()
            func addWithSecret(_ secret: String) async throws -> (status: Int32, output: String) {
                let command =
                    "printf '%s\\n' \"$1\" | \"$0\" subscribers add --url 'https://user:pw@hooks.example.com/in?token=abc' --secret - --json"
                return try await runShell(command, arguments: [riscReceiverBinary, secret], environment: environment)
            }
            let fromInput = try await addWithSecret(given)
            #expect(fromInput.status == 0, "\(fromInput.output)")
            #expect(try JSONValue.parse(Data(fromInput.output.utf8))["secret"]?.stringValue == given)
            let badInput = try await addWithSecret("plain-secret")
            #expect(badInput.status == 2 && badInput.output.contains("whsec_"), "\(badInput.output)")
            // Listings never show user-info or a query string: either may be a credential.
            for listing in [
                try await run(["subscribers", "list", "--json"]).output, try await run(["subscribers", "list"]).output,
                try await harness.call(.GET, "/admin/v1/subscribers", bearer: Harness.adminToken).body,
            ] {
                #expect(listing.contains("hooks.example.com/in") && !listing.contains("pw") && !listing.contains("abc"), "\(listing)")
            }
            for loopback in ["http://127.0.0.1:9/hook", "http://localhost:9/hook", "http://[::1]:9/hook"] {
                #expect(try await run(["subscribers", "add", "--url", loopback]).status == 0, "\(loopback)")
            }
            let refusedByAPI = try await harness.call(
                .POST, "/admin/v1/subscribers", bearer: Harness.adminToken, json: ["url": "http://10.0.0.1/hook"])
            #expect(refusedByAPI.status == 400 && refusedByAPI.json["parameter"]?.stringValue == "url")

            // A revocation for the https subscriber: pending (no dispatcher runs here), listed and shown.
            let sub = "cli-\(UUID().uuidString)"
            _ = try await harness.sendAndWait("sessions-revoked", sub: sub)
            let page = try await run(["notifications", "list", "--sub", sub, "--subscriber", String(id), "--json"])
            let notification = try #require(try JSONValue.parse(Data(page.output.utf8))["notifications"]?.arrayValue?.first)
            #expect(notification["status"]?.stringValue == "pending")
            #expect(notification["body"]?["type"]?.stringValue == "revoke_sessions")
            #expect(notification["body"]?["sub"]?.stringValue == sub)
            let notificationID = Int64(try #require(notification["id"]?.number))
            let show = try await run(["notifications", "show", String(notificationID)])
            let webhookID = try #require(notification["webhook_id"]?.stringValue)
            #expect(show.status == 0 && show.output.contains(webhookID))
            let pendingReplay = try await run(["notifications", "replay", String(notificationID)])
            #expect(pendingReplay.status == 1 && pendingReplay.output.contains("still pending"), "\(pendingReplay.output)")
            try await harness.database.query("UPDATE risc_notifications SET status = 'dead' WHERE id = \(notificationID)")
            let replayed = try await run(["notifications", "replay", "--dead", "--json"])
            #expect(try JSONValue.parse(Data(replayed.output.utf8))["replayed"] == [.number(Double(notificationID))])
            #expect(try await run(["notifications", "list", "--status", "nope"]).status == 2)

            #expect(try await run(["subscribers", "remove", String(id)]).status == 0)
            var left: Int64 = -1
            for try await count in try await harness.database.query(
                "SELECT count(*)::int8 FROM risc_notifications WHERE subscriber_id = \(id)"
            ).decode(Int64.self) { left = count }
            #expect(left == 0, "its notifications go with it")
            #expect(try await harness.notifications(sub: sub).count == 4, "the other subscribers' stay")
            #expect(try await run(["subscribers", "remove", String(id)]).status == 1)
        }
    }

    @Test("A delivery verifies with the Standard Webhooks library from PyPI")
    func standardWebhooksLibraryAgrees() async throws {
        try await Harness.withIsolatedDatabase(Self.options) { harness in
            let subscriber = TestSubscriber()
            let delivery = try await subscriber.serving { url in
                _ = try await harness.addSubscriber(subscriber, url: url)
                return try await withDispatchers(client: harness.database) {
                    _ = try await harness.sendAndWait("sessions-revoked", sub: "pypi-\(UUID().uuidString)")
                    try await eventually("a delivery arrives") { !subscriber.deliveries.isEmpty }
                    return try #require(subscriber.deliveries.first)
                }
            }
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("standardwebhooks-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            let input: JSONValue = [
                "secret": .string(subscriber.secret), "body": .string(delivery.body),
                "headers": [
                    "webhook-id": .string(delivery.webhookID), "webhook-timestamp": .string(delivery.timestamp),
                    "webhook-signature": .string(delivery.signature),
                ],
            ]
            let inputPath = directory.appendingPathComponent("input.json").path
            #expect(FileManager.default.createFile(atPath: inputPath, contents: Data(input.serialized.utf8)))
            let script = """
                import json, sys
                from standardwebhooks.webhooks import Webhook
                given = json.load(open(sys.argv[1]))
                payload = Webhook(given["secret"]).verify(given["body"], given["headers"])
                try:
                    Webhook(given["secret"]).verify(given["body"].replace("revoke", "revoce"), given["headers"])
                    print("a tampered body verified")
                except Exception:
                    print("verified", payload["type"])
                """
            let log = directory.appendingPathComponent("out.log").path
            let status = try await ChildProcess.spawn("/usr/bin/env", ["python3", "-c", script, inputPath], outputFile: log).wait()
            let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            #expect(status == 0 && output.contains("verified revoke_sessions"), "\(output)")
        }
    }
}

@Suite("The development webhook sink")
struct WebhookSinkTests {
    @Test("It accepts a signed delivery at its root URL (204), and answers 401 to a wrong signature")
    func sink() async throws {
        let secret = StandardWebhook.generateSecret()
        let key = try #require(StandardWebhook.key(secret: secret))
        let received = Mutex<[WebhookSink.Received]>([])
        let (ports, port) = AsyncStream.makeStream(of: Int.self)
        let app = WebhookSink(key: key, port: 0).makeApplication(logger: Harness.logger) {
            port.yield($0)
        } onDelivery: { delivery in
            received.withLock { $0.append(delivery) }
        }
        try await whileRunning([app]) {
            var iterator = ports.makeAsyncIterator()
            let url = "http://127.0.0.1:\(await iterator.next()!)/"
            let body = Array(#"{"type":"revoke_sessions"}"#.utf8)
            for (signingKey, expected) in [(key, 204), (SymmetricKey(size: .bits256), 401)] {
                var request = HTTPClientRequest(url: url)
                request.method = .POST
                for (name, value) in StandardWebhook.headers(
                    id: "msg_1", timestamp: Int64(Date().timeIntervalSince1970), body: body, keys: [signingKey])
                {
                    request.headers.add(name: name, value: value)
                }
                request.body = .bytes(ByteBuffer(bytes: body))
                let response = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
                #expect(Int(response.status.code) == expected)
            }
        }
        let deliveries = received.withLock { $0 }
        #expect(deliveries.count == 2)
        #expect(deliveries.first?.body?["type"] == "revoke_sessions" && deliveries.first?.rejection == nil)
        #expect(deliveries.last?.rejection == .badSignature)
    }
}
