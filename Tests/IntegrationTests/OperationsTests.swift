import AsyncHTTPClient
import DevTransmitter
import Foundation
import NIOCore
import NIOHTTP1
import PostgresNIO
import RISC
import RISCStore
import TestSupport
import Testing

@Suite("Operations: readiness, metrics, logs, shutdown, configuration", .timeLimit(.minutes(3)))
struct OperationsTests {
    @Test("The pools of serve and worker carry PostgreSQL's own statement_timeout: twice the longest wait, never under 2 minutes")
    func statementTimeout() async throws {
        let url = Harness.environment("RISC_TEST_DATABASE_URL")
        for (bound, expected) in [(Duration.seconds(10), "2min"), (.seconds(600), "10min")] {
            let client = PostgresClient(
                configuration: try DatabaseURL.serviceConfiguration(from: url, statementTimeout: bound), backgroundLogger: Harness.logger)
            let shown = try await client.whileRunning { client in
                try await client.query("SHOW statement_timeout").collect().first?.decode(String.self)
            }
            #expect(shown == expected)
        }
    }

    @Test("A command's pool leased before run() says nothing: a command's standard error stays its one line")
    func commandPoolEarlyLease() async throws {
        let url = Harness.environment("RISC_TEST_DATABASE_URL")
        // A lease made before run() is answered once the pool runs. A command's body starts when run() is called,
        // which on another thread may not yet have marked the client running (seen in CI, on `migrate`).
        func leaseBeforeRun(_ client: PostgresClient, until seen: @escaping @Sendable () -> Bool) async throws -> Int? {
            try await withThrowingTaskGroup(of: Int?.self) { group in
                group.addTask { try await client.query("SELECT 7").collect().first?.decode(Int.self) }
                let deadline = ContinuousClock.now + .seconds(2)
                while !seen() && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
                group.addTask {
                    await client.run()
                    return nil
                }
                let answer = try await group.next()!
                group.cancelAll()
                return answer
            }
        }
        let message = "hasn't been called yet"
        let plain = LoggedWarnings()
        let plainClient = PostgresClient(configuration: try DatabaseURL.configuration(from: url), backgroundLogger: plain.logger())
        // The control: the same lease on a pool with the command's logger as it is warns.
        #expect(try await leaseBeforeRun(plainClient) { plain.contains(message) } == 7)
        #expect(plain.contains(message))
        let command = LoggedWarnings()
        let commandClient = try DatabaseURL.commandClient(url, logger: command.logger())
        #expect(try await leaseBeforeRun(commandClient) { command.contains(message) } == 7)
        #expect(!command.contains(message))
    }

    @Test("No session of the service compiles a statement with JIT, even in a database set to compile every one")
    func noJITCompilation() async throws {
        try await IsolatedDatabase.with { database in
            let name = String(database.url.split(separator: "/").last!.split(separator: "?").first!)
            try await database.client.query(PostgresQuery(unsafeSQL: "ALTER DATABASE \"\(name)\" SET jit_above_cost = 0"))
            let explain: PostgresQuery = "EXPLAIN (ANALYZE) SELECT count(*) FROM risc_notifications WHERE sub = 'nobody'"
            // A session with PostgreSQL's defaults shows that this server does compile them (JIT is there).
            var plain = try DatabaseURL.connectionConfiguration(from: database.url)
            plain.options.additionalStartupParameters = []
            let control = try await PostgresConnection.connect(configuration: plain, id: 1, logger: Harness.logger)
            let controlPlan = try await control.query(explain, logger: Harness.logger).collect().map { try $0.decode(String.self) }
            try await control.close()
            #expect(controlPlan.contains { $0.hasPrefix("JIT:") }, "\(controlPlan.joined(separator: "\n"))")
            // The pools of the commands, of serve and worker, and the single connections that hold a lock.
            for configuration in [try DatabaseURL.configuration(from: database.url), try DatabaseURL.serviceConfiguration(from: database.url)] {
                let plan = try await PostgresClient(configuration: configuration, backgroundLogger: Harness.logger).whileRunning { client in
                    try await client.query(explain).collect().map { try $0.decode(String.self) }
                }
                #expect(!plan.contains { $0.hasPrefix("JIT:") }, "\(plan.joined(separator: "\n"))")
            }
            let single = try await PostgresConnection.connect(
                configuration: try DatabaseURL.connectionConfiguration(from: database.url), id: 2, logger: Harness.logger)
            let plan = try await single.query(explain, logger: Harness.logger).collect().map { try $0.decode(String.self) }
            try await single.close()
            #expect(!plan.contains { $0.hasPrefix("JIT:") }, "\(plan.joined(separator: "\n"))")
        }
    }

    @Test("/readyz names what is missing until the keys load, then answers 200")
    func readiness() async throws {
        var options = Harness.Options()
        options.keysOutageAtStart = true
        try await Harness.with(options) { harness in
            // The database check has 2 s; under a loaded CI machine one check can miss it, so wait for the
            // state this test is about: the database reachable and only the keys missing.
            var notReady = try await harness.call(.GET, "/readyz")
            try await eventually("the database check passes while the keys are out", timeout: .seconds(30)) {
                notReady = try await harness.call(.GET, "/readyz")
                return notReady.json["checks"]?.objectValue?["database"] == "ok"
            }
            #expect(notReady.status == 503)
            #expect(notReady.json["missing"] == ["risc_keys", "openid_keys"])
            #expect(notReady.json["checks"]?.objectValue?["database"] == "ok")
            #expect(try await harness.call(.GET, "/healthz").status == 200)

            harness.transmitter.setKeysOutage(false)
            let deadline = ContinuousClock.now + .seconds(45)
            var reply = try await harness.call(.GET, "/readyz")
            while reply.status != 200, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(100))
                reply = try await harness.call(.GET, "/readyz")
            }
            #expect(reply.status == 200, "\(reply.body)")
            #expect(reply.json["status"] == "ready")
        }
    }

    /// In a `serve` process of its own: the metrics are the process's, so each figure is exactly this test's (in
    /// the test process, other tests' workers fed the same counters, and hid that events applied on receipt
    /// were never counted).
    @Test("/metrics exposes SETs by type and outcome, latency, sign-ins, JWKS fetches, and what actions changed, on receipt and by a worker")
    func metrics() async throws {
        try await ServeProcess.with { serve, transmitter in
            let client = Client(base: serve.url)
            let sub = "metrics-\(UUID().uuidString)"
            @Sendable func signIn() async throws {
                var request = IDTokenRequest(sub: sub)
                // Issued after any revocation before it (an earlier ID token no longer signs this user in).
                request.iat = Date().timeIntervalSince1970.rounded(.down) + 1
                let token = try await transmitter.makeIDToken(request)
                let reply = try await client.send(.POST, "/tokensignin", body: "idtoken=\(token)", contentType: "application/x-www-form-urlencoded")
                #expect(reply.status == 200, "\(reply.body)")
            }
            @Sendable func metrics() async throws -> [String: Double] {
                let reply = try await client.send(.GET, "/metrics")
                #expect(reply.status == 200)
                #expect(reply.headers.first(name: "content-type")?.hasPrefix("text/plain") == true)
                var values: [String: Double] = [:]
                for line in reply.body.split(separator: "\n") where !line.hasPrefix("#") {
                    guard let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...]) else { continue }
                    values[String(line[..<space])] = value
                }
                return values
            }

            // tokens-revoked ends the session and deletes the grant, applied on receipt.
            try await signIn()
            let grant = try await client.send(
                .POST, "/v1/grants", bearer: Harness.serviceToken,
                json: ["sub": .string(sub), "refresh_token": .string("1//metrics-\(UUID().uuidString)"), "client_id": .string(Harness.audience)])
            #expect(grant.status == 201)
            let set = try await transmitter.makeSET(SETRequest(type: "tokens-revoked", sub: sub))
            #expect(try await client.send(.POST, "/risc/events", body: set, contentType: "application/secevent+jwt").status == 202)
            #expect(try await client.send(.POST, "/risc/events", body: "not-a-jws", contentType: "application/secevent+jwt").status == 400)
            var values = try await metrics()
            for (name, expected) in [
                #"risc_sets_received_total{event_type="tokens-revoked",outcome="accepted"}"#: 1.0,
                #"risc_sets_received_total{event_type="unparsed",outcome="invalid_request"}"#: 1,
                #"risc_signins_total{outcome="success"}"#: 1, "risc_sessions_revoked_total": 1, "risc_grants_deleted_total": 1,
                "risc_worker_queue_depth": 0, "risc_worker_lag_seconds": 0,
            ] {
                #expect(values[name] == expected, "\(name)")
            }
            #expect(values[#"risc_jwks_fetches_total{issuer="risc",outcome="success"}"#] ?? 0 >= 1)
            #expect(values.keys.contains { $0.hasPrefix("risc_ingest_duration_seconds_bucket") })
            #expect((1...8).contains(values["risc_inbox_batches_allowed"] ?? 0), "the inbox's limit is reported")
            #expect(!values.keys.contains { $0.hasPrefix("risc_worker_events_total") }, "applied on receipt, not by a worker")

            // A worker applies an event left waiting (as a batch that fell back would be): a copy of the SET, after
            // a new sign-in. Its counts add to the same counters.
            try await signIn()
            let database = PostgresClient(configuration: try DatabaseURL.configuration(from: serve.databaseURL), backgroundLogger: Harness.logger)
            _ = try await database.whileRunning { database in
                try await database.query(
                    """
                    INSERT INTO risc_events (issuer, jti, event_types, subject_sub, events, claims, issued_at)
                    SELECT issuer, jti || '-copy', event_types, subject_sub, events, claims, issued_at FROM risc_events
                    WHERE subject_sub = \(sub)
                    """)
            }
            // Both figures waited for: the worker counts the event and what it changed one after the other.
            try await eventually("the worker applies the copy and counts what it changed") {
                values = try await metrics()
                return values[#"risc_worker_events_total{outcome="done"}"#] == 1 && values["risc_sessions_revoked_total"] == 2
            }
            #expect(values["risc_grants_deleted_total"] == 1)
            #expect(values.keys.contains { $0.hasPrefix("risc_worker_batch_duration_seconds") })
        }
    }

    @Test("No token or secret reaches the logs, through every endpoint, at trace level in JSON", .seeded)
    func logsHoldNoSecrets() async throws {
        try await ServeProcess.with(environment: ["LOG_LEVEL": "trace", "LOG_FORMAT": "json"]) { serve, transmitter in
            var secrets: [String: String] = [
                "service token": Harness.serviceToken, "vault key": Harness.vaultKey, "client secret": "dev-client-secret",
                "admin token": Harness.adminToken,
            ]
            let sub = "logs-\(UUID().uuidString)"
            let client = Client(base: serve.url)

            let set = try await transmitter.makeSET(SETRequest(type: "sessions-revoked", sub: sub))
            secrets["SET"] = set
            secrets["SET signature"] = String(set.split(separator: ".")[2])
            #expect(try await client.send(.POST, "/risc/events", body: set, contentType: "application/secevent+jwt").status == 202)
            let forged = set.dropLast(8) + "AAAAAAAA"
            secrets["forged SET"] = String(forged)
            #expect(try await client.send(.POST, "/risc/events", body: String(forged), contentType: "application/secevent+jwt").status == 400)

            var idRequest = IDTokenRequest(sub: sub)
            idRequest.email = "\(sub)@example.com"
            // Issued after the sessions-revoked above (an earlier ID token no longer signs this user in).
            idRequest.iat = Date().timeIntervalSince1970.rounded(.down) + 1
            let idToken = try await transmitter.makeIDToken(idRequest)
            secrets["ID token"] = idToken
            let signIn = try await client.send(.POST, "/tokensignin", body: "idtoken=\(idToken)", contentType: "application/x-www-form-urlencoded")
            let session = try #require(signIn.json["session_token"]?.stringValue)
            secrets["session token"] = session
            idRequest.expIn = -600
            let expired = try await transmitter.makeIDToken(idRequest)
            secrets["expired ID token"] = expired
            #expect(try await client.send(.POST, "/tokensignin", json: ["idToken": .string(expired)]).status == 401)
            #expect(try await client.send(.GET, "/v1/session", bearer: session).status == 200)

            let refreshToken = "1//logs-refresh-\(UUID().uuidString)"
            secrets["refresh token"] = refreshToken
            let stored = try await client.send(
                .POST, "/v1/grants", bearer: Harness.serviceToken,
                json: ["sub": .string(sub), "refresh_token": .string(refreshToken), "client_id": .string(Harness.audience)])
            #expect(stored.status == 201)
            #expect(try await client.send(.POST, "/v1/grants", bearer: "wrong-\(Harness.serviceToken)", json: [:]).status == 401)

            let verifier = "logs-verifier-\(UUID().uuidString)-\(UUID().uuidString)"
            secrets["code verifier"] = verifier
            let code = try #require(
                try await client.send(
                    .POST, transmitter.baseURL + "/dev/authorize",
                    json: ["sub": .string(sub), "redirect_uri": "http://127.0.0.1/callback", "code_challenge": .string(verifier)]
                ).json["code"]?.stringValue)
            secrets["authorization code"] = code
            let exchanged = try await client.send(
                .POST, "/v1/grants/exchange", bearer: Harness.serviceToken,
                json: [
                    "code": .string(code), "code_verifier": .string(verifier), "redirect_uri": "http://127.0.0.1/callback",
                    "client_id": .string(Harness.audience),
                ])
            #expect(exchanged.status == 200, "\(exchanged.body)")
            let grant = try #require(exchanged.json["grant_id"]?.stringValue)
            secrets["access token"] = try #require(exchanged.json["access_token"]?.stringValue)
            let refreshed = try await client.send(.POST, "/v1/grants/\(grant)/token", bearer: Harness.serviceToken)
            #expect(refreshed.status == 200)
            secrets["refreshed access token"] = try #require(refreshed.json["access_token"]?.stringValue)
            #expect(try await client.send(.DELETE, "/v1/grants/\(grant)", bearer: Harness.serviceToken).status == 204)
            #expect(try await client.send(.DELETE, "/v1/session", bearer: session).status == 204)
            #expect(try await client.send(.GET, "/admin/v1/users/\(sub)", bearer: Harness.adminToken).status == 200)
            #expect(try await client.send(.GET, "/admin/v1/stats", bearer: "wrong-\(Harness.adminToken)").status == 401)
            // A subscriber's secret travels to and from the database (postgres-nio's trace lines would show it).
            var random = SeededGenerator()
            let webhookSecret = "whsec_" + Data((0..<24).map { _ in UInt8.random(in: 0...255, using: &random) }).base64EncodedString()
            secrets["subscriber secret"] = String(webhookSecret.dropFirst(6))
            let subscriber = try await client.send(
                .POST, "/admin/v1/subscribers", bearer: Harness.adminToken,
                json: ["url": "http://127.0.0.1:9/logs", "secret": .string(webhookSecret)])
            #expect(subscriber.status == 201)
            let notified = try await transmitter.makeSET(SETRequest(type: "sessions-revoked", sub: sub))
            #expect(try await client.send(.POST, "/risc/events", body: notified, contentType: "application/secevent+jwt").status == 202)
            // Their lines are in the log too once the dispatcher's attempt is (the worker has nothing to do: serve
            // applied the event as it stored it, before the 202). A barrier, not a pause: the dispatcher logs a failed
            // attempt (nothing listens on port 9) only after reading the notification and the subscriber's secret
            // from the database and trying to send it, and the process writes its lines in order, through one queue.
            try await eventually("the dispatcher's failed attempt is logged", timeout: .seconds(30)) {
                serve.log.contains("A notification was not delivered")
            }

            let log = serve.log
            #expect(log.contains("Accepted a SET"), "the log was not captured")
            for (name, secret) in secrets {
                #expect(!log.contains(secret), "the \(name) appears in the log")
            }
            #expect(!log.contains("DataRow"), "postgres-nio's trace lines show the rows read")
            // Every line is a JSON object, and the lines about requests carry the request id.
            for line in log.split(separator: "\n") where line.hasPrefix("{") {
                let object = try #require((try? JSONValue.parse(Data(line.utf8)))?.objectValue, "\(line)")
                #expect(object["level"] != nil && object["message"] != nil)
                if let message = object["message"]?.stringValue,
                    ["Accepted a SET", "Signed in", "Rejected a SET", "Stored a grant"].contains(message)
                {
                    #expect(object["hb.request.id"] != nil, "\(line)")
                }
            }
        }
    }

    @Test("SIGTERM under load: every request is answered or refused, no 202 is lost, nothing is half-applied, exit 0")
    func gracefulShutdownUnderLoad() async throws {
        try await ServeProcess.with { serve, transmitter in
            let tokens = try await withThrowingTaskGroup(of: String.self) { group in
                for index in 0..<260 {
                    group.addTask { try await transmitter.makeSET(SETRequest(type: "sessions-revoked", sub: "term-\(index)-\(UUID().uuidString)")) }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            let client = Client(base: serve.url)
            let outcomes = try await withThrowingTaskGroup(of: (String, Int?).self) { group in
                var outcomes: [(String, Int?)] = []
                var sent = 0
                for token in tokens {
                    if sent >= 24, let outcome = try await group.next() { outcomes.append(outcome) }
                    group.addTask {
                        // Short timeouts: after SIGTERM a request may sit on a connection nobody reads any more.
                        (
                            token,
                            try? await client.send(
                                .POST, "/risc/events", body: token, contentType: "application/secevent+jwt", timeout: .seconds(3)
                            ).status
                        )
                    }
                    sent += 1
                    if sent == 200 { serve.process.kill(SIGTERM) }
                }
                for try await outcome in group { outcomes.append(outcome) }
                return outcomes
            }
            let status = try await withTimeout(.seconds(30)) { try await serve.process.wait() }
            #expect(status == 0, "\(serve.log.suffix(2000))")

            let accepted = outcomes.filter { $0.1 == 202 }.map { jti(of: $0.0) }
            #expect(accepted.count >= 100)
            #expect(outcomes.allSatisfy { $0.1 == nil || $0.1 == 202 || $0.1 == 503 }, "\(Set(outcomes.compactMap(\.1)))")
            let database = PostgresClient(configuration: try DatabaseURL.configuration(from: serve.databaseURL), backgroundLogger: Harness.logger)
            try await database.whileRunning { database in
                var stored = Set<String>()
                let jtis = outcomes.map { jti(of: $0.0) }
                for try await jti in try await database.query("SELECT jti FROM risc_events WHERE jti = ANY(\(jtis))").decode(String.self) {
                    stored.insert(jti)
                }
                #expect(Set(accepted).isSubset(of: stored), "a 202 was answered for a SET that was not stored")
                // Events are done with their action, or pending without one: never in between.
                var halfApplied = 0
                for try await count in try await database.query(
                    """
                    SELECT count(*)::int8 FROM risc_events e
                    WHERE e.jti = ANY(\(jtis))
                      AND (e.status = 'done') <> EXISTS (SELECT 1 FROM risc_event_actions a WHERE a.event_id = e.id)
                    """
                ).decode(Int64.self) { halfApplied = Int(count) }
                #expect(halfApplied == 0)
            }
        }
    }
}

/// A minimal HTTP client for tests that talk to a child process.
struct Client: Sendable {
    let base: String

    func send(
        _ method: NIOHTTP1.HTTPMethod, _ path: String, bearer: String? = nil, body: String? = nil, contentType: String? = nil,
        json: JSONValue? = nil, timeout: TimeAmount = .seconds(30)
    ) async throws -> Harness.Reply {
        var request = HTTPClientRequest(url: path.hasPrefix("http") ? path : base + path)
        request.method = method
        if let bearer { request.headers.add(name: "Authorization", value: "Bearer \(bearer)") }
        if let json {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(string: json.serialized))
        } else if let body {
            if let contentType { request.headers.add(name: "Content-Type", value: contentType) }
            request.body = .bytes(ByteBuffer(string: body))
        }
        let response = try await HTTPClient.shared.execute(request, timeout: timeout)
        let data = try await response.body.collect(upTo: 1 << 20)
        return Harness.Reply(status: Int(response.status.code), headers: response.headers, body: String(buffer: data))
    }
}
