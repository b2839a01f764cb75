import DevTransmitter
import Foundation
import PostgresNIO
import RISC
import RISCKeys
import RISCStore
import RISCWorker
import ServiceLifecycle
import Testing

/// Runs a delivery prober with a connection pool of its own (as a `serve` process would have) while `body` runs;
/// when it ends, the pool closes, as it would when the process dies.
func withProber<T: Sendable>(
    _ harness: Harness, interval: Duration, deliveryURL: String, _ body: @Sendable () async throws -> T
) async throws -> T {
    try await whileRunning(try proberProcess(harness, interval: interval, deliveryURL: deliveryURL), body)
}

/// A prober and the connection pool of its own it runs on.
func proberProcess(_ harness: Harness, interval: Duration, deliveryURL: String) throws -> [any Service] {
    let client = PostgresClient(configuration: try DatabaseURL.configuration(from: harness.databaseURL), backgroundLogger: Harness.logger)
    let key = try ServiceAccountKey(json: Data(harness.transmitter.serviceAccountFile().serialized.utf8))
    var settings = DeliveryProber.Settings(interval: interval, deliveryURL: deliveryURL)
    settings.followerRetry = .milliseconds(300)
    let prober = DeliveryProber(
        client: client, lockConnection: try DatabaseURL.connectionConfiguration(from: harness.databaseURL),
        management: RISCManagement(baseURL: harness.transmitter.baseURL + "/v1beta", key: key), settings: settings, logger: Harness.logger)
    return [client, prober]
}

// Serialized: the tests' probers share the process's metrics.
@Suite("Delivery health", .serialized, .timeLimit(.minutes(3)))
struct DeliveryHealthTests {
    /// Long enough that a probe's round trip fits in it with the whole suite running on a small CI machine (at 1.5 s
    /// a probe could time out there); "unhealthy" then takes 2 intervals.
    static let interval = 3.0

    static func problems(_ json: JSONValue) -> [String] { json["problems"]?.arrayValue?.compactMap(\.stringValue) ?? [] }

    func health(_ harness: Harness) async throws -> (status: Int32, json: JSONValue) {
        let result = try await runRiscReceiver(
            ["stream", "health", "--json"],
            environment: [
                "DATABASE_URL": harness.databaseURL, "RISC_VERIFY_INTERVAL": String(Self.interval),
                "RISC_DELIVERY_URL": harness.eventsURL, "LOG_LEVEL": "warning",
            ])
        return (result.status, (try? JSONValue.parse(Data(result.output.utf8))) ?? .string(result.output))
    }

    func eventuallyHealth(_ harness: Harness, _ what: String, _ condition: @escaping (Int32, JSONValue) -> Bool) async throws -> JSONValue {
        var last: JSONValue = .null
        try await eventually(what, timeout: .seconds(60)) {
            let (status, json) = try await health(harness)
            last = json
            return condition(status, json)
        }
        return last
    }

    @Test("Healthy once a probe's SET arrives; pointing the stream elsewhere or disabling it turns it unhealthy, fixing it healthy again")
    func breakAndRepair() async throws {
        var options = Harness.Options()
        options.worker = true
        try await Harness.withIsolatedDatabase(options) { harness in
            let key = try ServiceAccountKey(json: Data(harness.transmitter.serviceAccountFile().serialized.utf8))
            let management = RISCManagement(baseURL: harness.transmitter.baseURL + "/v1beta", key: key)
            let everyType = EventType.googleRISCTypes.map(\.rawValue)
            try await management.update(url: harness.eventsURL, events: everyType)

            let before = try await health(harness)
            #expect(before.status == 1)
            #expect(before.json["problems"] == ["no verification SET has arrived yet"], "\(before.json)")
            #expect(before.json["round_trip_seconds"] == .null)

            try await withProber(harness, interval: .milliseconds(Int64(Self.interval * 1000)), deliveryURL: harness.eventsURL) {
                let healthy = try await eventuallyHealth(harness, "a probe's SET arrives") { status, _ in status == 0 }
                #expect(
                    Set(healthy.objectValue?.keys.map { $0 } ?? []) == [
                        "healthy", "last_verified_at", "round_trip_seconds", "probes_timed_out", "stream_enabled", "delivery_url_matches", "problems",
                    ])
                #expect(healthy["healthy"] == true && healthy["stream_enabled"] == true && healthy["delivery_url_matches"] == true)
                #expect(healthy["problems"] == [])
                let roundTrip = try #require(healthy["round_trip_seconds"]?.number)
                // A plausible figure: within the minute this test waits (a loaded CI machine has taken over 3 s).
                #expect(roundTrip >= 0 && roundTrip < 60)
                // The same facts as metrics, for alerting.
                try await eventually("the metrics say healthy", timeout: .seconds(60)) {
                    let metrics = try await harness.call(.GET, "/metrics").body
                    return metrics.contains("risc_delivery_healthy 1") && metrics.contains("risc_stream_enabled 1")
                        && metrics.contains("risc_delivery_last_verified_timestamp_seconds ") && metrics.contains("risc_delivery_round_trip_seconds ")
                }

                // Pointed elsewhere: the URL no longer matches, and the probes' SETs stop arriving.
                try await management.update(url: "http://127.0.0.1:9/risc/events", events: everyType)
                let elsewhere = try await eventuallyHealth(harness, "the probe sees the other URL and its SET never arrives") { status, json in
                    status == 1 && json["delivery_url_matches"] == false
                        && Self.problems(json).contains { $0.hasPrefix("no verification SET has arrived for") }
                        && (json["probes_timed_out"]?.number ?? 0) >= 1
                }
                #expect(Self.problems(elsewhere).contains { $0.contains("not to RISC_DELIVERY_URL") })
                #expect(try await harness.call(.GET, "/metrics").body.contains("risc_delivery_probes_timed_out_total "))

                try await management.update(url: harness.eventsURL, events: everyType)
                _ = try await eventuallyHealth(harness, "healthy again") { status, _ in status == 0 }

                // Disabled: the prober still asks, and nothing comes.
                try await management.setStatus(enabled: false)
                let disabled = try await eventuallyHealth(harness, "the stream is seen disabled") { status, json in
                    status == 1 && json["stream_enabled"] == false
                }
                #expect(Self.problems(disabled).contains("the stream is disabled"))
                try await eventually("the metrics say disabled and unhealthy", timeout: .seconds(60)) {
                    let metrics = try await harness.call(.GET, "/metrics").body
                    return metrics.contains("risc_stream_enabled 0") && metrics.contains("risc_delivery_healthy 0")
                }
                try await management.setStatus(enabled: true)
                _ = try await eventuallyHealth(harness, "healthy again") { status, _ in status == 0 }

                // A type the service acts on is no longer requested.
                try await management.update(url: harness.eventsURL, events: everyType.filter { $0 != EventType.accountDisabled.rawValue })
                // Waited for by name: on a loaded machine a late probe's SET makes the service unhealthy first, for another reason.
                let narrowed = try await eventuallyHealth(harness, "a missing event type is seen") { status, json in
                    status == 1 && Self.problems(json).contains("the stream does not request account-disabled")
                }
                #expect(narrowed["stream_enabled"] == true && narrowed["delivery_url_matches"] == true, "\(narrowed)")
            }
        }
    }

    @Test("stream update through the CLI: stream health no longer repeats the last probe's view, and a probe follows within seconds")
    func probeAfterStreamChange() async throws {
        var options = Harness.Options()
        options.worker = true
        try await Harness.withIsolatedDatabase(options) { harness in
            let keyFile = StreamTests.writeKeyFile(harness.transmitter.serviceAccountFile().serialized)
            defer { try? FileManager.default.removeItem(atPath: keyFile) }
            // An interval far longer than this test waits: only a probe prompted by the change can make it healthy.
            let interval = 120
            let environment = [
                "DATABASE_URL": harness.databaseURL, "RISC_VERIFY_INTERVAL": String(interval), "RISC_DELIVERY_URL": harness.eventsURL,
                "GOOGLE_SERVICE_ACCOUNT_FILE": keyFile, "RISC_MANAGEMENT_URL": harness.transmitter.baseURL + "/v1beta", "LOG_LEVEL": "warning",
            ]
            @Sendable func health() async throws -> (status: Int32, json: JSONValue) {
                let result = try await runRiscReceiver(["stream", "health", "--json"], environment: environment)
                return (result.status, (try? JSONValue.parse(Data(result.output.utf8))) ?? .string(result.output))
            }
            try await withProber(harness, interval: .seconds(interval), deliveryURL: harness.eventsURL) {
                // The first probe finds no stream: Google's 404.
                try await eventually("the first probe records that no stream exists", timeout: .seconds(60)) {
                    Self.problems(try await health().json).contains { $0.lowercased().contains("no stream configuration exists") }
                }
                let update = try await runRiscReceiver(["stream", "update", "--url", harness.eventsURL], environment: environment)
                #expect(update.status == 0, "\(update.output)")
                // Right after: the 404 is the previous stream's, and is not repeated (it was, for a whole interval).
                let after = try await health()
                #expect(!Self.problems(after.json).contains { $0.lowercased().contains("no stream configuration exists") }, "\(after.json)")
                let started = ContinuousClock.now
                try await eventually("a probe after the change finds the stream healthy", timeout: .seconds(30)) {
                    try await health().status == 0
                }
                #expect(ContinuousClock.now - started < .seconds(interval / 2))
                // Disabled through the CLI: seen at once too, not at the next interval.
                #expect(try await runRiscReceiver(["stream", "disable"], environment: environment).status == 0)
                try await eventually("the disabled stream is seen", timeout: .seconds(30)) {
                    let (status, json) = try await health()
                    return status == 1 && json["stream_enabled"] == false
                }
            }
        }
    }

    @Test("Exactly one instance probes; when it dies another takes over")
    func oneProber() async throws {
        var options = Harness.Options()
        options.worker = true
        try await Harness.withIsolatedDatabase(options) { harness in
            let key = try ServiceAccountKey(json: Data(harness.transmitter.serviceAccountFile().serialized.utf8))
            try await RISCManagement(baseURL: harness.transmitter.baseURL + "/v1beta", key: key)
                .update(url: harness.eventsURL, events: EventType.googleRISCTypes.map(\.rawValue))
            let interval = Duration.seconds(1)
            /// How many probes each instance (told apart by its start time) has made.
            @Sendable func probesByInstance() async throws -> [Int] {
                var counts: [Int] = []
                for try await count in try await harness.database.query(
                    "SELECT count(*)::int8 FROM risc_delivery_probes GROUP BY prober_started_at ORDER BY min(id)"
                ).decode(Int64.self) {
                    counts.append(Int(count))
                }
                return counts
            }
            // The first instance leads; the second starts beside it and must not probe.
            let first = ServiceGroup(
                configuration: .init(
                    services: try proberProcess(harness, interval: interval, deliveryURL: harness.eventsURL).map { .init(service: $0) },
                    logger: Harness.logger))
            let firstRun = Task { try await first.run() }
            defer { firstRun.cancel() }
            try await eventually("the first instance probes") { try await probesByInstance().first ?? 0 >= 1 }
            try await withProber(harness, interval: interval, deliveryURL: harness.eventsURL) {
                let before = try await probesByInstance()
                try await eventually("three more probes with both instances running", timeout: .seconds(60)) {
                    try await probesByInstance().first ?? 0 >= before[0] + 3
                }
                #expect(try await probesByInstance().count == 1, "only the first instance probed")

                // The leader stops: its prober closes its connection, and with it the lock. The second takes over.
                await first.triggerGracefulShutdown()
                try await firstRun.value
                try await eventually("the second instance probes", timeout: .seconds(30)) {
                    let counts = try await probesByInstance()
                    return counts.count == 2 && counts[1] >= 2
                }
            }
        }
    }

    @Test("Real serve processes: cutting the leader's connection, then kill -9 of the leader, and probing goes on in another")
    func killedLeader() async throws {
        try await IsolatedDatabase.with { database in
            let transmitter = try await DevTransmitter(settings: .init(port: 0, audience: Harness.audience), logger: Harness.logger)
            try await serving(transmitter) {
                let keyFile = StreamTests.writeKeyFile(transmitter.serviceAccountFile().serialized)
                defer { try? FileManager.default.removeItem(atPath: keyFile) }
                let ports = (freePort(), freePort())
                // Google delivers to the second process; either may probe: both store into the one database.
                let deliveryURL = "http://127.0.0.1:\(ports.1)/risc/events"
                let key = try ServiceAccountKey(json: Data(transmitter.serviceAccountFile().serialized.utf8))
                try await RISCManagement(baseURL: transmitter.baseURL + "/v1beta", key: key)
                    .update(url: deliveryURL, events: EventType.googleRISCTypes.map(\.rawValue))
                let environment = [
                    "RISC_VERIFY_INTERVAL": "1", "RISC_DELIVERY_URL": deliveryURL, "GOOGLE_SERVICE_ACCOUNT_FILE": keyFile,
                    "RISC_MANAGEMENT_URL": transmitter.baseURL + "/v1beta",
                ]
                let leads = "This instance now probes delivery"
                @Sendable func leaderships(_ serve: ServeProcess) -> Int { serve.log.components(separatedBy: leads).count - 1 }
                /// Probes requested since `since`, and how many of their SETs arrived.
                @Sendable func probes(since: Date) async throws -> (requested: Int, arrived: Int) {
                    for try await (requested, arrived) in try await database.client.query(
                        "SELECT count(*)::int8, count(arrived_at)::int8 FROM risc_delivery_probes WHERE requested_at > \(since)"
                    ).decode((Int64, Int64).self) {
                        return (Int(requested), Int(arrived))
                    }
                    return (0, 0)
                }

                let first = try ServeProcess.start(databaseURL: database.url, transmitter: transmitter, port: ports.0, environment: environment)
                defer { first.stop() }
                try await first.waitUntilReady()
                try await eventually("the first process leads") { leaderships(first) == 1 }
                let second = try ServeProcess.start(databaseURL: database.url, transmitter: transmitter, port: ports.1, environment: environment)
                defer { second.stop() }
                try await second.waitUntilReady()
                let bothRunning = Date()
                try await eventually("three probes arrive with both running", timeout: .seconds(60)) {
                    try await probes(since: bothRunning).arrived >= 3
                }
                #expect(leaderships(first) == 1 && leaderships(second) == 0, "one prober at a time")

                // The leader's connection is cut (a network failure, an administrator): the lock goes with it.
                let cut = Date()
                try await database.client.query(
                    """
                    SELECT pg_terminate_backend(pid) FROM pg_locks
                    WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
                    """)
                try await eventually("a process leads again and its probes arrive", timeout: .seconds(60)) {
                    let arrived = try await probes(since: cut).arrived
                    return leaderships(first) + leaderships(second) >= 2 && arrived >= 2
                }
                let (leader, other) = leaderships(second) == 1 ? (second, first) : (first, second)

                // kill -9 of the leader: its connection closes with it, and the other process takes over.
                let (killed, otherLeaderships) = (Date(), leaderships(other))
                leader.process.kill(SIGKILL)
                try await eventually("the other process leads and probes", timeout: .seconds(60)) {
                    let requested = try await probes(since: killed).requested
                    return leaderships(other) == otherLeaderships + 1 && requested >= 2
                }
                if other.url == second.url {
                    try await eventually("the survivor receives its probes' SETs", timeout: .seconds(60)) {
                        try await probes(since: killed).arrived >= 1
                    }
                }
            }
        }
    }

    @Test("Probe records are kept 7 days (the latest arrival always), their error text is capped, and health reads by index")
    func probeRecordsBounded() async throws {
        try await Harness.withIsolatedDatabase { harness in
            let started = Date()
            try await harness.database.withConnection { connection in
                let probes = DeliveryProbes(logger: Harness.logger)
                for state in ["old-1", "old-2"] {
                    try await probes.start(state: state, proberStartedAt: started, streamReadAt: started, report: .init(), on: connection)
                }
                try await connection.query(
                    "UPDATE risc_delivery_probes SET requested_at = now() - interval '8 days' WHERE state LIKE 'old-%'", logger: Harness.logger)
                var report = DeliveryProbes.Report()
                report.error = String(repeating: "e", count: 100_000)
                try await probes.start(state: "noisy", proberStartedAt: started, streamReadAt: started, report: report, on: connection)
                try await probes.recordError(state: "noisy", String(repeating: "f", count: 100_000), on: connection)
                for try await length in try await connection.query(
                    "SELECT length(error)::int8 FROM risc_delivery_probes WHERE state = 'noisy'", logger: Harness.logger
                ).decode(Int64.self) {
                    #expect(length <= Int64(DeliveryProbes.maxErrorLength))
                }
                // With sequential scans priced out, a plan that still holds one has no index to use.
                try await connection.query("SET enable_seqscan = off", logger: Harness.logger)
                var plan: [String] = []
                for try await line in try await connection.query(
                    PostgresQuery(unsafeSQL: "EXPLAIN " + DeliveryProbes.factsSQL), logger: Harness.logger
                ).decode(String.self) {
                    plan.append(line)
                }
                try await connection.query("RESET enable_seqscan", logger: Harness.logger)
                #expect(!plan.contains { $0.contains("Seq Scan on risc_delivery_probes") }, "\(plan.joined(separator: "\n"))")
            }
            try await withProber(harness, interval: .seconds(Self.interval), deliveryURL: harness.eventsURL) {
                try await eventually("a probe deleted the records older than 7 days") {
                    var old: Int64 = -1
                    for try await count in try await harness.database.query(
                        "SELECT count(*)::int8 FROM risc_delivery_probes WHERE requested_at < now() - interval '7 days'"
                    ).decode(Int64.self) {
                        old = count
                    }
                    return old == 0
                }
            }
        }
    }

    @Test("RISC_VERIFY_INTERVAL without RISC_DELIVERY_URL: serve and stream health exit 2 with one line naming it")
    func configuration() async throws {
        let environment = [
            "DATABASE_URL": Harness.environment("RISC_TEST_DATABASE_URL"), "RISC_CLIENT_IDS": "a.apps.googleusercontent.com",
            "RISC_VERIFY_INTERVAL": "60", "RISC_PORT": "1",
        ]
        for command in [["serve"], ["stream", "health"]] {
            let result = try await runRiscReceiver(command, environment: environment)
            #expect(result.status == 2, "\(command): \(result.output)")
            #expect(
                result.output.trimmingCharacters(in: .whitespacesAndNewlines)
                    == "risc-receiver: configuration error: RISC_DELIVERY_URL: is required when RISC_VERIFY_INTERVAL is set", "\(result.output)")
        }
        var withURL = environment
        withURL["RISC_DELIVERY_URL"] = "https://receiver.example.com/risc/events"
        let serve = try await runRiscReceiver(["serve"], environment: withURL)
        #expect(serve.status == 2)
        #expect(serve.output.contains("GOOGLE_SERVICE_ACCOUNT_FILE: is required when RISC_VERIFY_INTERVAL is set"), "\(serve.output)")
        withURL["RISC_VERIFY_INTERVAL"] = "0.5"
        let tooShort = try await runRiscReceiver(["stream", "health"], environment: withURL)
        #expect(tooShort.status == 2 && tooShort.output.contains("RISC_VERIFY_INTERVAL"), "\(tooShort.output)")
    }
}
