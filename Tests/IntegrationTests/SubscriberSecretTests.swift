import Crypto
import Foundation
import PostgresNIO
import RISC
import RISCStore
import Testing

/// A subscriber's secret sealed under a vault key the service no longer has (RISC_VAULT_KEY changed without the old
/// one kept in RISC_VAULT_PREVIOUS_KEYS, or lost).
@Suite("A subscriber's secret that cannot be opened", .timeLimit(.minutes(3)))
struct SubscriberSecretTests {
    /// A vault key the service does not have, and its base64 form.
    static func otherKey() -> (cipher: VaultCipher, base64: String) {
        let key = SymmetricKey(size: .bits256)
        return (VaultCipher(current: key), key.withUnsafeBytes { Data($0) }.base64EncodedString())
    }

    /// Seals the subscriber's secret under `cipher`'s key, in place of the one the service sealed.
    static func reseal(_ subscriber: TestSubscriber, id: Int64, with cipher: VaultCipher, harness: Harness) async throws {
        let sealed = try cipher.seal(subscriber.secret, subscriberID: id)
        try await harness.database.query(
            "UPDATE risc_subscribers SET secret_sealed = \(sealed), secret_key_id = \(cipher.currentKeyID) WHERE id = \(id)")
    }

    /// (status, attempts) of each notification to subscriber `id`, oldest first.
    static func notifications(to id: Int64, harness: Harness) async throws -> [(status: String, attempts: Int)] {
        var found: [(String, Int)] = []
        for try await (status, attempts) in try await harness.database.query(
            "SELECT status, attempts FROM risc_notifications WHERE subscriber_id = \(id) ORDER BY id"
        ).decode((String, Int32).self) {
            found.append((status, Int(attempts)))
        }
        return found
    }

    static func worker(_ harness: Harness, log: String, previousKeys: String? = nil, metricsPort: Int? = nil) throws -> ChildProcess {
        var environment = ProcessInfo.processInfo.environment
        environment["DATABASE_URL"] = harness.databaseURL
        environment["LOG_LEVEL"] = "warning"
        environment["LOG_FORMAT"] = "json"
        environment["RISC_VAULT_KEY"] = Harness.vaultKey
        environment["RISC_VAULT_PREVIOUS_KEYS"] = previousKeys
        let metrics = metricsPort.map { ["--metrics-port", String($0)] } ?? []
        return try ChildProcess.spawn(riscReceiverBinary, ["worker"] + metrics, environment: environment, outputFile: log)
    }

    @Test("Its deliveries pause, attempts uncounted, reported at error level and in listings, and resume once the key is configured")
    func pausedUntilTheKeyIsBack() async throws {
        try await Harness.withIsolatedDatabase(NotificationTests.options) { harness in
            let lost = TestSubscriber()
            let healthy = TestSubscriber()
            try await lost.serving { lostURL in
                try await healthy.serving { healthyURL in
                    // Added first: each pass of a dispatcher takes its notifications before the healthy one's.
                    let lostID = try await harness.addSubscriber(lost, url: lostURL)
                    _ = try await harness.addSubscriber(healthy, url: healthyURL)
                    let other = Self.otherKey()
                    try await Self.reseal(lost, id: lostID, with: other.cipher, harness: harness)
                    _ = try await harness.sendAndWait("sessions-revoked", sub: "paused-\(UUID().uuidString)")

                    let log = FileManager.default.temporaryDirectory.appendingPathComponent("paused-\(UUID().uuidString).log").path
                    defer { try? FileManager.default.removeItem(atPath: log) }
                    let metricsPort = freePort()
                    let worker = try Self.worker(harness, log: log, metricsPort: metricsPort)
                    try await eventually("the healthy subscriber has the first notification") { healthy.accepted.withLock { $0.count } == 1 }
                    // The barrier: a later notification, which the dispatcher takes in a pass that came to the paused
                    // subscriber first.
                    _ = try await harness.sendAndWait("sessions-revoked", sub: "later-\(UUID().uuidString)")
                    try await eventually("the healthy subscriber has the later one") { healthy.accepted.withLock { $0.count } == 2 }
                    let waiting = try await Self.notifications(to: lostID, harness: harness)
                    #expect(waiting.map(\.status) == ["pending", "pending"])
                    #expect(waiting.map(\.attempts) == [0, 0], "no attempt counted toward dead-lettering")
                    #expect(lost.deliveries.isEmpty)

                    // Reported: in the listing (the admin API judges with the same keys), and at error level, once.
                    let listed = try await harness.call(.GET, "/admin/v1/subscribers", bearer: Harness.adminToken)
                    let rows = listed.json["subscribers"]?.arrayValue ?? []
                    let pausedByID = Dictionary(
                        uniqueKeysWithValues: rows.compactMap { row in
                            row["id"]?.number.map { (Int64($0), row["paused"]?.stringValue) }
                        })
                    #expect(pausedByID[lostID]??.contains("cannot be opened") == true, "\(listed.body)")
                    #expect(pausedByID.values.filter { $0 != nil }.count == 1)
                    let metrics = try await Client(base: "http://127.0.0.1:\(metricsPort)").send(.GET, "/metrics")
                    #expect(metrics.body.contains("risc_subscriber_secret_unopenable{subscriber=\"\(lostID)\"} 1"), "\(metrics.body)")
                    worker.kill(SIGTERM)
                    #expect(try await worker.wait() == 0)
                    let lines = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n")
                    let reports = lines.filter { $0.contains("paused") && $0.contains("\"level\":\"error\"") }
                    #expect(reports.count == 1, "\(lines)")
                    #expect(reports.first?.contains("\"subscriber_id\":\"\(lostID)\"") == true, "\(reports)")
                    #expect(!lines.contains { $0.contains(lost.secret) || $0.contains(lost.secret.dropFirst(6)) })

                    // Started again with the key it was sealed with among the previous keys: both go out, each on
                    // its first attempt, signed with the subscriber's secret.
                    let restarted = try Self.worker(harness, log: log, previousKeys: other.base64)
                    try await eventually("the paused subscriber has both") { lost.accepted.withLock { $0.count } == 2 }
                    try await eventually("both are recorded delivered") {
                        try await Self.notifications(to: lostID, harness: harness).map(\.status) == ["delivered", "delivered"]
                    }
                    #expect(try await Self.notifications(to: lostID, harness: harness).map(\.attempts) == [1, 1])
                    #expect(lost.deliveries.allSatisfy { $0.verified })
                    restarted.kill(SIGTERM)
                    #expect(try await restarted.wait() == 0)
                }
            }
        }
    }

    @Test("rotate-secret issues a new secret when the old one cannot be opened, keeps none, and the paused deliveries go out with it")
    func rotateWithLostKey() async throws {
        try await Harness.withIsolatedDatabase(NotificationTests.options) { harness in
            let subscriber = TestSubscriber()
            try await subscriber.serving { url in
                let id = try await harness.addSubscriber(subscriber, url: url)
                try await Self.reseal(subscriber, id: id, with: Self.otherKey().cipher, harness: harness)
                let sub = "rotated-\(UUID().uuidString)"
                _ = try await harness.sendAndWait("sessions-revoked", sub: sub)

                let rotated = try await harness.call(.POST, "/admin/v1/subscribers/\(id)/rotate-secret", bearer: Harness.adminToken)
                #expect(rotated.status == 200, "\(rotated.body)")
                #expect(rotated.json["previous_secret_kept"] == .bool(false), "\(rotated.body)")
                let secret = try #require(rotated.json["secret"]?.stringValue)
                let key = try #require(StandardWebhook.key(secret: secret))
                for try await (previous, until) in try await harness.database.query(
                    "SELECT previous_secret_sealed, previous_secret_until FROM risc_subscribers WHERE id = \(id)"
                ).decode((Data?, Date?).self) {
                    #expect(previous == nil && until == nil)
                }
                let listed = try await harness.call(.GET, "/admin/v1/subscribers", bearer: Harness.adminToken)
                #expect(listed.json["subscribers"]?.arrayValue?.first?["paused"] == .null, "\(listed.body)")

                // The CLI says so too, on a second rotation (the secret now opens: the old one is kept).
                let again = try await runRiscReceiver(
                    ["subscribers", "rotate-secret", String(id), "--json"],
                    environment: ["DATABASE_URL": harness.databaseURL, "RISC_VAULT_KEY": Harness.vaultKey, "LOG_LEVEL": "error"])
                #expect(again.status == 0, "\(again.output)")
                let printed = try JSONValue.parse(Data(again.output.utf8))
                #expect(printed["previous_secret_kept"] == .bool(true), "\(again.output)")
                let newest = try #require(printed["secret"]?.stringValue.flatMap(StandardWebhook.key(secret:)))

                try await withDispatchers(client: harness.database) {
                    try await eventually("the notification is delivered") { subscriber.accepted.withLock { $0.count } == 1 }
                }
                let delivery = try #require(subscriber.deliveries.first)
                #expect(try await Self.notifications(to: id, harness: harness).map(\.attempts) == [1])
                // Signed with the newest secret and the one before it, never with the one that could not be opened.
                #expect(delivery.signature.split(separator: " ").count == 2)
                #expect(!delivery.verified)
                for key in [key, newest] {
                    #expect(throws: Never.self) {
                        try StandardWebhook.verify(
                            id: delivery.webhookID, timestamp: delivery.timestamp, signatures: delivery.signature,
                            body: Data(delivery.body.utf8), key: key)
                    }
                }
            }
        }
    }

    @Test("The CLI's rotate-secret says when the old secret could not be kept")
    func rotateFromTheCommandLine() async throws {
        try await Harness.withIsolatedDatabase(NotificationTests.options) { harness in
            let subscriber = TestSubscriber()
            let id = try await harness.addSubscriber(subscriber, url: "https://hooks.example.com/risc")
            try await Self.reseal(subscriber, id: id, with: Self.otherKey().cipher, harness: harness)
            let environment = ["DATABASE_URL": harness.databaseURL, "RISC_VAULT_KEY": Harness.vaultKey, "LOG_LEVEL": "error"]
            let listed = try await runRiscReceiver(["subscribers", "list"], environment: environment)
            #expect(listed.status == 0 && listed.output.contains("Subscriber \(id): delivery paused:"), "\(listed.output)")
            let rotated = try await runRiscReceiver(["subscribers", "rotate-secret", String(id)], environment: environment)
            #expect(rotated.status == 0, "\(rotated.output)")
            #expect(rotated.output.contains("could not be opened"), "\(rotated.output)")
            let after = try await runRiscReceiver(["subscribers", "list"], environment: environment)
            #expect(after.status == 0 && !after.output.contains("paused"), "\(after.output)")
        }
    }
}
