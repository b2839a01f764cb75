import DevTransmitter
import Foundation
import RISC
import RISCServer
import RISCStore
import Testing

@Suite("Shared Signals transmitters: registered from their metadata, credentials sealed")
struct TransmitterTests {
    @Test("transmitters add reads the metadata at the issuer's well-known URL; list, show and remove never show the credential")
    func addListShowRemove() async throws {
        try await Harness.withIsolatedDatabase { harness in
            let environment = [
                "DATABASE_URL": harness.databaseURL, "LOG_LEVEL": "warning", "RISC_VAULT_KEY": Harness.vaultKey,
                "RISC_CONFIGURATION_URL": harness.transmitter.discoveryURL,
            ]
            let issuer = harness.transmitter.sharedSignalsIssuer
            let secret = harness.transmitter.sharedSignalsClientSecret
            func add(_ name: String, _ arguments: [String], input: String = secret) async throws -> (status: Int32, output: String) {
                // The secret on standard input, the name and options as given.
                try await runShell(
                    "secret=$1; shift; printf '%s\\n' \"$secret\" | \"$0\" transmitters add \"$@\"",
                    arguments: [riscReceiverBinary, input, name] + arguments, environment: environment)
            }
            let clientArguments = ["--issuer", issuer, "--client-id", harness.transmitter.sharedSignalsClientID, "--client-secret", "-"]
            let added = try await add("dev-ssf", clientArguments + ["--delivery", "poll"])
            #expect(added.status == 0, "\(added.output)")
            // The metadata was found at the issuer's well-known URL, the path after the inserted name.
            #expect(added.output.contains("/.well-known/ssf-configuration/ssf"), "\(added.output)")

            let listed = try await runRiscReceiver(["transmitters", "list", "--json"], environment: environment)
            #expect(listed.status == 0, "\(listed.output)")
            let transmitters = try JSONValue.parse(Data(listed.output.utf8))["transmitters"]?.arrayValue ?? []
            #expect(transmitters.map { $0["name"] } == ["google", "dev-ssf"])
            #expect(transmitters.first?["built_in"] == true)
            let devSSF = try #require(transmitters.last)
            #expect(devSSF["issuer"]?.stringValue == issuer)
            #expect(devSSF["delivery"] == "poll")
            #expect(devSSF["auth_method"] == "client_secret_basic")
            #expect(devSSF["credential"] == "redacted")
            #expect(devSSF["metadata"]?["configuration_endpoint"]?.stringValue == issuer + "/streams")
            #expect(devSSF["events_requested"]?.arrayValue?.contains(.string(EventType.caepSessionRevoked.rawValue)) == true)
            for output in [
                listed.output, try await runRiscReceiver(["transmitters", "list"], environment: environment).output,
                try await runRiscReceiver(["transmitters", "show", "dev-ssf"], environment: environment).output,
                try await runRiscReceiver(["transmitters", "show", "dev-ssf", "--json"], environment: environment).output,
            ] {
                #expect(!output.contains(secret), "a listing never shows the credential")
                #expect(output.contains("dev-ssf"), "\(output)")
            }
            // Sealed at rest: the database holds no copy of it in clear.
            let rows = try await harness.database.query(
                "SELECT count(*) FROM risc_transmitters WHERE position(\(Data(secret.utf8)) IN secret_sealed) > 0", logger: Harness.logger)
            for try await count in rows.decode(Int.self) { #expect(count == 0) }

            // The same name again, or the same issuer under another name: refused.
            #expect(try await add("dev-ssf", clientArguments).status == 1)
            #expect(try await add("dev-ssf-2", clientArguments).status == 1)
            // An issuer that is not the metadata's is refused by name, and nothing is stored.
            let wrongIssuer = try await add(
                "wrong", ["--issuer", issuer, "--config-url", harness.transmitter.discoveryURL] + clientArguments.dropFirst(2))
            #expect(wrongIssuer.status == 1 && wrongIssuer.output.contains("issuer"), "\(wrongIssuer.output)")
            for (name, arguments, message) in [
                ("google", clientArguments, "google"),
                ("Bad_Name", clientArguments, "a-z"),
                ("plain", ["--issuer", "http://ssf.example/t"] + clientArguments.dropFirst(2), "https"),
                ("inline", ["--issuer", issuer, "--client-id", "x", "--client-secret", "s3cret"], "standard input"),
                ("both", clientArguments + ["--bearer", "-"], "--bearer"),
                ("nothing", ["--issuer", issuer], "--client-id"),
                // Google is built in: nothing else may be registered with its issuer and speak for it.
                ("as-google", ["--issuer", "https://accounts.google.com/"] + clientArguments.dropFirst(2), "Google"),
            ] {
                let refused = try await add(name, arguments)
                #expect(refused.status == 2, "\(name): \(refused.output)")
                #expect(refused.output.contains(message), "\(name): \(refused.output)")
            }
            let names = try await runRiscReceiver(["transmitters", "list", "--json"], environment: environment)
            #expect((try JSONValue.parse(Data(names.output.utf8))["transmitters"]?.arrayValue ?? []).count == 2)

            // Without the vault key, nothing can be sealed.
            let keyless = try await runShell(
                "printf 'x\\n' | \"$0\" transmitters add keyless \"$@\"", arguments: [riscReceiverBinary] + clientArguments,
                environment: environment.filter { $0.key != "RISC_VAULT_KEY" })
            #expect(keyless.status == 1 && keyless.output.contains("RISC_VAULT_KEY"), "\(keyless.output)")

            #expect(try await runRiscReceiver(["transmitters", "remove", "google"], environment: environment).status == 1)
            #expect(try await runRiscReceiver(["transmitters", "remove", "dev-ssf"], environment: environment).status == 0)
            #expect(try await runRiscReceiver(["transmitters", "show", "dev-ssf"], environment: environment).status == 1)
        }
    }

    /// The environment of the CLI, and `transmitters add NAME` for this harness's Shared Signals transmitter.
    static func register(_ harness: Harness, name: String, delivery: String) async throws -> [String: String] {
        let environment = [
            "DATABASE_URL": harness.databaseURL, "LOG_LEVEL": "warning", "RISC_VAULT_KEY": Harness.vaultKey,
            "RISC_PUBLIC_URL": harness.receiverURL,
        ]
        let added = try await runShell(
            "printf '%s\\n' \"$1\" | \"$0\" transmitters add \"$2\" --issuer \"$3\" --client-id \"$4\" --client-secret - --delivery \"$5\"",
            arguments: [
                riscReceiverBinary, harness.transmitter.sharedSignalsClientSecret, name, harness.transmitter.sharedSignalsIssuer,
                harness.transmitter.sharedSignalsClientID, delivery,
            ], environment: environment)
        #expect(added.status == 0, "\(added.output)")
        return environment
    }

    static func devState(_ harness: Harness) async throws -> JSONValue {
        try await harness.call(.GET, harness.transmitter.baseURL + "/dev/ssf/state").json.asValue
    }

    @Test("streams create, show, status, update, replace and delete against the transmitter's stream API; a 409 takes the stream over")
    func streamLifecycle() async throws {
        try await Harness.withIsolatedDatabase { harness in
            let environment = try await Self.register(harness, name: "dev-ssf", delivery: "push")
            func run(_ arguments: [String]) async throws -> (status: Int32, output: String) {
                try await runRiscReceiver(arguments, environment: environment)
            }
            // Push needs the public URL the stream's endpoint is made from.
            let unset = try await runRiscReceiver(["streams", "create", "dev-ssf"], environment: environment.filter { $0.key != "RISC_PUBLIC_URL" })
            #expect(unset.status == 2 && unset.output.contains("RISC_PUBLIC_URL"), "\(unset.output)")
            let created = try await run(["streams", "create", "dev-ssf", "--json"])
            #expect(created.status == 0, "\(created.output)")
            let streamID = try #require(try JSONValue.parse(Data(created.output.utf8))["stream_id"]?.stringValue)
            #expect(try await Self.devState(harness)["stream_id"]?.stringValue == streamID)

            let shown = try await run(["streams", "show", "dev-ssf", "--json"])
            #expect(shown.status == 0, "\(shown.output)")
            let stream = try JSONValue.parse(Data(shown.output.utf8))
            #expect(stream["endpoint_url"]?.stringValue == harness.receiverURL + "/ssf/dev-ssf/events")
            #expect(stream["status"] == "enabled")
            #expect(stream["events_delivered"]?.arrayValue?.contains(.string(EventType.caepSessionRevoked.rawValue)) == true)
            // The push secret went to the transmitter only.
            #expect(!shown.output.contains("Bearer"))

            #expect(try await run(["streams", "status", "dev-ssf", "paused", "--reason", "maintenance"]).status == 0)
            let paused = try await run(["streams", "status", "dev-ssf", "--json"])
            #expect(try JSONValue.parse(Data(paused.output.utf8)) == ["status": "paused", "reason": "maintenance"])
            let listed = try await run(["transmitters", "show", "dev-ssf", "--json"])
            #expect(try JSONValue.parse(Data(listed.output.utf8))["stream"]?["status"] == "paused", "\(listed.output)")
            #expect(try await run(["streams", "status", "dev-ssf", "sleeping"]).status == 2)

            let updated = try await run(["streams", "update", "dev-ssf", "--events", "session-revoked,credential-change"])
            #expect(updated.status == 0, "\(updated.output)")
            #expect(
                try await Self.devState(harness)["events_requested"]
                    == [.string(EventType.caepSessionRevoked.rawValue), .string(EventType.caepCredentialChange.rawValue)])
            #expect(try await run(["streams", "replace", "dev-ssf"]).status == 0)
            #expect((try await Self.devState(harness)["events_requested"]?.arrayValue?.count ?? 0) == StreamRequest.defaultEventTypes.count)

            // The transmitter keeps one stream per receiver: a second create takes the same stream over.
            let again = try await run(["streams", "create", "dev-ssf", "--json"])
            #expect(again.status == 0, "\(again.output)")
            #expect(try JSONValue.parse(Data(again.output.utf8))["taken_over"] == true)
            #expect(try JSONValue.parse(Data(again.output.utf8))["stream_id"]?.stringValue == streamID)

            // Subjects go to the transmitter's subject endpoints as SSF subject identifiers.
            #expect(try await run(["streams", "subjects", "add", "dev-ssf", "--email", "ann@example.com"]).status == 0)
            #expect(try await run(["streams", "subjects", "add", "dev-ssf", "--iss-sub", "https://accounts.google.com", "42"]).status == 0)
            #expect(
                try await Self.devState(harness)["subjects"]
                    == [["format": "email", "email": "ann@example.com"], ["format": "iss_sub", "iss": "https://accounts.google.com", "sub": "42"]])
            #expect(try await run(["streams", "subjects", "remove", "dev-ssf", "--email", "ann@example.com"]).status == 0)
            #expect(try await Self.devState(harness)["subjects"]?.arrayValue?.count == 1)
            #expect(try await run(["streams", "subjects", "add", "dev-ssf"]).status == 2)
            #expect(try await run(["streams", "subjects", "add", "dev-ssf", "--email", "a@b.example", "--opaque", "x"]).status == 2)

            #expect(try await run(["streams", "delete", "dev-ssf"]).status == 0)
            #expect(try await Self.devState(harness)["stream_id"] == .null)
            #expect(try await run(["streams", "show", "dev-ssf"]).output.contains("no stream"))
            #expect(try await run(["streams", "show", "google"]).status == 1)
        }
    }

    @Test("A stream whose iss is not the transmitter's issuer is never used: it is deleted at once and the command fails")
    func foreignStreamDeleted() async throws {
        try await Harness.withIsolatedDatabase { harness in
            let environment = try await Self.register(harness, name: "dev-ssf", delivery: "poll")
            _ = try await harness.call(.POST, harness.transmitter.baseURL + "/dev/ssf/foreign-issuer?iss=https://evil.example/")
            let created = try await runRiscReceiver(["streams", "create", "dev-ssf"], environment: environment)
            #expect(created.status == 1 && created.output.contains("another issuer"), "\(created.output)")
            let state = try await Self.devState(harness)
            #expect(state["stream_id"] == .null)
            #expect(state["deleted"]?.arrayValue?.count == 1)
            let shown = try await runRiscReceiver(["transmitters", "show", "dev-ssf", "--json"], environment: environment)
            #expect(try JSONValue.parse(Data(shown.output.utf8))["stream"] == .null, "\(shown.output)")
        }
    }

    @Test("Access tokens are reused while they live and fetched again after they expire")
    func accessTokenRenewal() async throws {
        try await Harness.withIsolatedDatabase { harness in
            let environment = try await Self.register(harness, name: "dev-ssf", delivery: "poll")
            #expect(try await runRiscReceiver(["streams", "create", "dev-ssf"], environment: environment).status == 0)
            // Each command is a process of its own, so each fetches one token; a token that expires at once is refused
            // by the stream API (401), and the command fetches another and goes on.
            _ = try await harness.call(.POST, harness.transmitter.baseURL + "/dev/ssf/token-lifetime?seconds=0")
            let before = try await Self.devState(harness)["tokens_issued"]?.number ?? 0
            let shown = try await runRiscReceiver(["streams", "show", "dev-ssf"], environment: environment)
            #expect(shown.status == 1 && shown.output.contains("401"), "a token that is never live fails in the end: \(shown.output)")
            #expect((try await Self.devState(harness)["tokens_issued"]?.number ?? 0) - before == 2, "one token, then one more after the 401")
            _ = try await harness.call(.POST, harness.transmitter.baseURL + "/dev/ssf/token-lifetime?seconds=3600")
            #expect(try await runRiscReceiver(["streams", "show", "dev-ssf"], environment: environment).status == 0)
        }
    }

    /// Pushes one event through this harness's Shared Signals transmitter (`/dev/ssf/send`): the status and the error
    /// code the receiver answered, and the SET's jti.
    static func push(_ harness: Harness, _ request: JSONValue) async throws -> (status: Int, err: String?, jti: String) {
        let reply = try await harness.call(.POST, harness.transmitter.baseURL + "/dev/ssf/send", json: request)
        #expect(reply.status == 200, "\(reply.body)")
        let body = reply.json["body"]?.stringValue ?? ""
        let err = body.isEmpty ? nil : (try? JSONValue.parse(Data(body.utf8)))?["err"]?.stringValue
        return (Int(reply.json["status"]?.number ?? 0), err, reply.json["jti"]?.stringValue ?? "")
    }

    static func storedCount(_ harness: Harness, issuer: String) async throws -> Int {
        var count = 0
        for try await value in try await harness.database.query(
            "SELECT count(*)::int4 FROM risc_events WHERE issuer = \(issuer)", logger: Harness.logger
        ).decode(Int32.self) { count = Int(value) }
        return count
    }

    /// A harness with a worker (events are applied as they are stored), its poller, and the stream `dev-ssf` created at
    /// its Shared Signals transmitter, delivering by `delivery` (push or poll); `body` gets the CLI's environment too.
    /// In poll mode `/dev/ssf/send` answers as a push would have been, once the poller acknowledged or reported the SET.
    static func withStream(
        _ delivery: String = "push", _ body: @escaping @Sendable (Harness, [String: String]) async throws -> Void
    ) async throws {
        var options = Harness.Options()
        options.worker = true
        options.poller = delivery == "poll"
        try await Harness.withIsolatedDatabase(options) { harness in
            let environment = try await Self.register(harness, name: "dev-ssf", delivery: delivery)
            #expect(try await runRiscReceiver(["streams", "create", "dev-ssf"], environment: environment).status == 0)
            try await body(harness, environment)
        }
    }

    @Test(
        "A stream receives with the transmitter's keys, issuer and audience; each refusal has its RFC 8935 code",
        arguments: ["push", "poll"])
    func receiving(delivery: String) async throws {
        try await Self.withStream(delivery) { harness, environment in
            let issuer = harness.transmitter.sharedSignalsIssuer
            let googleSubject = { (sub: String) -> JSONValue in ["format": "iss_sub", "iss": "https://accounts.google.com", "sub": .string(sub)] }

            // A CAEP session-revoked about a Google user ends the user's sessions.
            let sub = "ssf-\(UUID().uuidString)"
            let session = try await harness.newSession(sub: sub)
            let revoked = try await Self.push(harness, ["type": "session-revoked", "sub_id": googleSubject(sub)])
            #expect(revoked.status == 202 && revoked.err == nil)
            try await eventually("the session is revoked") { try await harness.checkSession(session).status == 401 }
            // A redelivery is answered 202 again and stored once.
            let again = try await Self.push(harness, ["type": "session-revoked", "sub_id": googleSubject(sub), "jti": .string(revoked.jti)])
            #expect(again.status == 202)
            let stored = try await Self.storedCount(harness, issuer: issuer)
            #expect(stored == 1)

            // Refused, and nothing stored: each with the code a transmitter can act on.
            // The authorization header is a push stream's; a poll's SETs come back on the service's own request.
            let authentication: [(JSONValue, Int, String)] =
                delivery == "push"
                ? [
                    (["type": "session-revoked", "authorization": "Bearer not-the-secret"], 401, "authentication_failed"),
                    (["type": "session-revoked", "authorization": ""], 401, "authentication_failed"),
                ] : []
            for (request, status, err) in authentication + [
                (["type": "session-revoked", "bad_signature": true] as JSONValue, 400, "invalid_key"),
                (["type": "session-revoked", "kid": "a-kid-it-never-published"], 400, "invalid_key"),
                (["type": "session-revoked", "iss": "https://another.example/ssf"], 400, "invalid_issuer"),
                (["type": "session-revoked", "aud": "https://not-this-stream.example"], 400, "invalid_audience"),
                (["type": "session-revoked", "typ": "JWT"], 400, "invalid_request"),
                (["type": "ssf-verification", "event": ["state": "never-asked-for"]], 400, "invalid_state"),
                (["type": "ssf-verification", "sub_id": ["format": "opaque", "id": "another-stream"]], 400, "invalid_request"),
            ] {
                let refused = try await Self.push(harness, request)
                #expect(refused.status == status && refused.err == err, "\(request): \(refused)")
            }
            #expect(try await Self.storedCount(harness, issuer: issuer) == stored)
            // The route is the transmitter's own: an unknown name is 404.
            #expect(try await harness.call(.POST, "/ssf/nobody/events").status == 404)

            // A verification without state is accepted and recorded; one the service asked for completes `verify --wait`.
            #expect(try await Self.push(harness, ["type": "ssf-verification"]).status == 202)
            let verified = try await runRiscReceiver(["streams", "verify", "dev-ssf", "--wait", "--timeout", "30"], environment: environment)
            #expect(verified.status == 0 && verified.output.contains("arrived"), "\(verified.output)")

            // stream-updated records the status the transmitter reports.
            let updated = try await Self.push(harness, ["type": "stream-updated", "event": ["status": "paused", "reason": "maintenance"]])
            #expect(updated.status == 202)
            let shown = try await runRiscReceiver(["transmitters", "show", "dev-ssf", "--json"], environment: environment)
            let stream = try JSONValue.parse(Data(shown.output.utf8))["stream"]
            #expect(stream?["status"] == "paused" && stream?["status_reason"] == "maintenance", "\(shown.output)")
            // Resumed; then the old pause is delivered again: a redelivery does not overwrite the newer status.
            #expect(try await Self.push(harness, ["type": "stream-updated", "event": ["status": "enabled"]]).status == 202)
            let redelivered = try await Self.push(
                harness, ["type": "stream-updated", "event": ["status": "paused", "reason": "maintenance"], "jti": .string(updated.jti)])
            #expect(redelivered.status == 202)
            try await eventually("the redelivery is taken") { try await Self.devState(harness)["queued"]?.arrayValue?.isEmpty ?? true }
            let after = try await runRiscReceiver(["transmitters", "show", "dev-ssf", "--json"], environment: environment)
            #expect(try JSONValue.parse(Data(after.output.utf8))["stream"]?["status"] == "enabled", "\(after.output)")

            // A subject with a critical member the service does not understand (the tenant): stored, not acted on.
            let other = "ssf-\(UUID().uuidString)"
            let otherSession = try await harness.newSession(sub: other)
            let critical = try await Self.push(
                harness,
                [
                    "type": "session-revoked",
                    "sub_id": ["format": "complex", "user": googleSubject(other), "tenant": ["format": "opaque", "id": "t-1"]],
                ])
            #expect(critical.status == 202)
            try await eventually("the event is done") {
                try await harness.call(.GET, "/admin/v1/events?sub=\(other)", bearer: Harness.adminToken).json["events"]?.arrayValue?.first?["status"]
                    == "done"
            }
            #expect(try await harness.checkSession(otherSession).status == 200, "not acted on")
        }
    }

    @Test(
        "An email subject names the user who last signed in with it; every event is notified with the transmitter and subject",
        arguments: ["push", "poll"])
    func subjectsAndNotifications(delivery: String) async throws {
        try await Self.withStream(delivery) { harness, _ in
            let subscriber = TestSubscriber()
            try await subscriber.serving { url in
                _ = try await harness.addSubscriber(subscriber, url: url)
                try await withDispatchers(client: harness.database) {
                    // Sign-in stores the ID token's verified email, `<sub>@example.com`; the subject's case is ignored.
                    let sub = "mail-\(UUID().uuidString.lowercased())"
                    let session = try await harness.newSession(sub: sub)
                    let email: JSONValue = ["format": "email", "email": .string("\(sub)@Example.COM")]
                    let revoked = try await Self.push(harness, ["type": "session-revoked", "sub_id": email])
                    #expect(revoked.status == 202)
                    try await eventually("the session is revoked") { try await harness.checkSession(session).status == 401 }

                    // A subject that names no user here changes nothing, and the app still hears of it.
                    let stranger: JSONValue = ["format": "opaque", "id": "someone-else"]
                    let unknown = try await Self.push(harness, ["type": "credential-change", "sub_id": stranger])
                    let unknownEmail: JSONValue = ["format": "email", "email": .string("nobody-\(sub)@example.com")]
                    let unmatched = try await Self.push(harness, ["type": "session-revoked", "sub_id": unknownEmail])
                    #expect(unknown.status == 202 && unmatched.status == 202)
                    // An event's own `subject` that is no subject object: the SET's `sub_id` is the subject, as acted on.
                    let fallback = try await Self.push(
                        harness, ["type": "session-revoked", "event": ["subject": "not-an-object"], "sub_id": unknownEmail])
                    #expect(fallback.status == 202)

                    try await eventually("four notifications arrive") { subscriber.accepted.withLock { $0.count } == 4 }
                    let bodies = Dictionary(
                        subscriber.accepted.withLock { $0 }.map { ($0.json["event"]?["jti"]?.stringValue ?? "", $0.json) }
                    ) { first, _ in first }
                    let expected: [(jti: String, type: String, sub: JSONValue, count: Double, subject: JSONValue)] = [
                        (revoked.jti, "revoke_sessions", .string(sub), 1, email),
                        (unknown.jti, "require_credential_change", .null, 0, stranger),
                        (unmatched.jti, "revoke_sessions", .null, 0, unknownEmail),
                        (fallback.jti, "revoke_sessions", .null, 0, unknownEmail),
                    ]
                    for notice in expected {
                        let body = bodies[notice.jti]
                        #expect(body?["type"]?.stringValue == notice.type, "\(String(describing: body))")
                        #expect(body?["sub"] == notice.sub && body?["count"]?.number == notice.count, "\(String(describing: body))")
                        #expect(body?["transmitter"] == "dev-ssf" && body?["subject"] == notice.subject, "\(String(describing: body))")
                    }
                    // The admin API shows the same body.
                    let listed = try await harness.call(.GET, "/admin/v1/notifications", bearer: Harness.adminToken).json
                    #expect(listed["notifications"]?.arrayValue?.allSatisfy { $0["body"]?["transmitter"] == "dev-ssf" } == true)
                }
            }
        }
    }

    @Test("RISC_TRANSMITTERS: serve registers them at start-up, keeps them in step by name, and leaves those added by command alone")
    func configuredTransmitters() async throws {
        try await IsolatedDatabase.with { database in
            let configured = try await DevTransmitter(settings: .init(port: 0, audience: Harness.audience), logger: Harness.logger)
            let byHand = try await DevTransmitter(settings: .init(port: 0, audience: Harness.audience), logger: Harness.logger)
            try await serving(configured) {
                try await serving(byHand) {
                    let environment = ["DATABASE_URL": database.url, "LOG_LEVEL": "warning", "RISC_VAULT_KEY": Harness.vaultKey]
                    let added = try await runShell(
                        "printf '%s\\n' \"$1\" | \"$0\" transmitters add by-hand --issuer \"$2\" --client-id \"$3\" --client-secret -",
                        arguments: [riscReceiverBinary, byHand.sharedSignalsClientSecret, byHand.sharedSignalsIssuer, byHand.sharedSignalsClientID],
                        environment: environment)
                    #expect(added.status == 0, "\(added.output)")
                    @Sendable func listed() async throws -> [String: JSONValue] {
                        let output = try await runRiscReceiver(["transmitters", "list", "--json"], environment: environment).output
                        let list = try JSONValue.parse(Data(output.utf8))["transmitters"]?.arrayValue ?? []
                        return Dictionary(uniqueKeysWithValues: list.compactMap { entry in entry["name"]?.stringValue.map { ($0, entry) } })
                    }
                    let fromConfiguration: JSONValue = [
                        "name": "from-config", "issuer": .string(configured.sharedSignalsIssuer),
                        "client_id": .string(configured.sharedSignalsClientID), "client_secret": .string(configured.sharedSignalsClientSecret),
                    ]
                    // The configuration also names the one added by command, differently: it is left as it is.
                    let clash: JSONValue = ["name": "by-hand", "issuer": .string(byHand.sharedSignalsIssuer), "bearer": "a-bearer-token"]
                    let first = try ServeProcess.start(
                        databaseURL: database.url, transmitter: configured,
                        environment: ["RISC_TRANSMITTERS": JSONValue.array([fromConfiguration, clash]).serialized])
                    do {
                        defer { first.stop() }
                        try await first.waitUntilReady()
                        try await eventually("the configured transmitter is registered") { try await listed()["from-config"] != nil }
                        let transmitters = try await listed()
                        #expect(
                            transmitters["from-config"]?["configured"] == true && transmitters["from-config"]?["auth_method"] == "client_secret_basic"
                        )
                        #expect(transmitters["by-hand"]?["configured"] == false && transmitters["by-hand"]?["auth_method"] == "client_secret_basic")
                        #expect(!first.log.contains(configured.sharedSignalsClientSecret), "no credential in the log")
                    }
                    // No longer listed: removed at the next start; the one added by command stays.
                    let second = try ServeProcess.start(databaseURL: database.url, transmitter: configured, environment: ["RISC_TRANSMITTERS": "[]"])
                    defer { second.stop() }
                    try await second.waitUntilReady()
                    try await eventually("the configured transmitter is removed") { try await listed()["from-config"] == nil }
                    #expect(try await listed()["by-hand"] != nil)
                }
            }
        }
    }

    @Test("Each stream is probed on RISC_VERIFY_INTERVAL; streams health reports the probes and names each problem", arguments: ["push", "poll"])
    func streamHealth(delivery: String) async throws {
        try await Self.withStream(delivery) { harness, registered in
            let environment = registered.merging(["RISC_VERIFY_INTERVAL": "2"]) { _, new in new }
            @Sendable func health(_ environment: [String: String]) async throws -> (status: Int32, json: JSONValue) {
                let ran = try await runRiscReceiver(["streams", "health", "dev-ssf", "--json"], environment: environment)
                return (ran.status, (try? JSONValue.parse(Data(ran.output.utf8))) ?? .null)
            }
            @Sendable func problems(_ json: JSONValue) -> [String] { json["problems"]?.arrayValue?.compactMap(\.stringValue) ?? [] }

            let before = try await health(environment)
            #expect(before.status == 1 && problems(before.json) == ["no verification event has arrived yet"], "\(before.json)")
            let store = TransmitterStore(
                client: harness.database, cipher: VaultCipher.from(key: Harness.vaultKey, previous: []), logger: Harness.logger)
            let prober = StreamHealthProber(
                client: harness.database, store: store, interval: .seconds(2), publicURL: harness.receiverURL, logger: Harness.logger)
            try await whileRunning([prober]) {
                try await eventually("a probe's verification arrives") { try await health(environment).status == 0 }
                let healthy = try await health(environment).json
                // A poll stream has no push URL to compare.
                #expect(healthy["stream_status"] == "enabled" && healthy["delivery_url_matches"] == (delivery == "push" ? true : .null), "\(healthy)")
                #expect(healthy["round_trip_seconds"] != .null && healthy["last_verified_at"] != .null, "\(healthy)")
                // Judged against another public URL, the stream delivers elsewhere.
                var elsewhere = environment
                elsewhere["RISC_PUBLIC_URL"] = "https://risc.example.com"
                let moved = try await health(elsewhere)
                if delivery == "push" { #expect(moved.status == 1 && moved.json["delivery_url_matches"] == false, "\(moved.json)") }
                // Paused at the transmitter: the status it answers is recorded, and health names it.
                let paused = try await runRiscReceiver(
                    ["streams", "status", "dev-ssf", "paused", "--reason", "maintenance"], environment: environment)
                #expect(paused.status == 0, "\(paused.output)")
                let report = try await health(environment)
                #expect(report.status == 1, "\(report.json)")
                #expect(problems(report.json).contains("the stream is paused (maintenance): the transmitter holds its events"), "\(report.json)")
            }
            // With probes off, health says so.
            let off = try await health(environment.merging(["RISC_VERIFY_INTERVAL": "0"]) { _, new in new })
            #expect(problems(off.json).contains("delivery probes are off (RISC_VERIFY_INTERVAL is 0)"), "\(off.json)")
        }
    }

    @Test(
        "A status read that may have been served before a change is never recorded over it, nor for a stream made since; reads and events after it are"
    )
    func staleStatusRead() async throws {
        try await Self.withStream { harness, environment in
            @Sendable func recorded() async throws -> JSONValue? {
                let shown = try await runRiscReceiver(["transmitters", "show", "dev-ssf", "--json"], environment: environment)
                return try JSONValue.parse(Data(shown.output.utf8))["stream"]?["status"]
            }
            @Sendable func statusDelay(read: Int, change: Int) async throws -> Int {
                try await harness.call(.POST, harness.transmitter.baseURL + "/dev/ssf/status-delay?seconds=\(read)&change_seconds=\(change)").status
            }
            @Sendable func untilHeld(_ calls: Int) async throws {
                try await eventually("\(calls) status call(s) held at the transmitter") {
                    try await Self.devState(harness)["status_calls_waiting"] == .number(Double(calls))
                }
            }
            @Sendable func statusOf(_ ran: (status: Int32, output: String)) -> JSONValue? {
                ran.status == 0 ? (try? JSONValue.parse(Data(ran.output.utf8)))?["status"] : nil
            }

            // A read sent before the pause, answered after it.
            #expect(try await statusDelay(read: 4, change: 0) == 200)
            let slowRead = Task { try await runRiscReceiver(["streams", "show", "dev-ssf", "--json"], environment: environment) }
            try await untilHeld(1)
            let paused = try await runRiscReceiver(["streams", "status", "dev-ssf", "paused", "--reason", "maintenance"], environment: environment)
            #expect(paused.status == 0, "\(paused.output)")
            #expect(try await recorded() == "paused")
            #expect(try await Self.devState(harness)["status_calls_waiting"] == 1, "the pause was recorded while the read was held")
            let shown = try await slowRead.value
            #expect(statusOf(shown) == "enabled", "\(shown.output)")
            #expect(try await recorded() == "paused", "the read sent before the pause is not recorded over it")

            // A read sent after the change was asked for, but served before the transmitter made it, and recorded first.
            #expect(try await statusDelay(read: 0, change: 4) == 200)
            let enabling = Task { try await runRiscReceiver(["streams", "status", "dev-ssf", "enabled", "--json"], environment: environment) }
            try await untilHeld(1)
            let early = try await runRiscReceiver(["streams", "status", "dev-ssf", "--json"], environment: environment)
            #expect(statusOf(early) == "paused", "\(early.output)")
            #expect(try await Self.devState(harness)["status_calls_waiting"] == 1, "the read was recorded while the change was held")
            #expect(statusOf(try await enabling.value) == "enabled")
            #expect(try await recorded() == "enabled", "the change is recorded over a read it may have followed")

            // The transmitter pauses the stream and says so: the event is newer than everything, and is recorded.
            #expect(try await statusDelay(read: 0, change: 0) == 200)
            let announced = try await harness.call(.POST, harness.transmitter.baseURL + "/dev/ssf/status?status=paused&reason=over")
            #expect(announced.status == 200)
            try await eventually("the stream-updated event is recorded") { try await recorded() == "paused" }
            // The transmitter enables it without saying so: a read sent after everything else is recorded.
            let silently = try await harness.call(.POST, harness.transmitter.baseURL + "/dev/ssf/status?status=enabled&announce=false")
            #expect(silently.status == 200)
            #expect(statusOf(try await runRiscReceiver(["streams", "status", "dev-ssf", "--json"], environment: environment)) == "enabled")
            #expect(try await recorded() == "enabled")
            #expect(try await runRiscReceiver(["streams", "status", "dev-ssf", "disabled"], environment: environment).status == 0)
            #expect(try await recorded() == "disabled")

            // A read of the stream, answered after it was deleted and another made: not the new stream's status.
            #expect(try await statusDelay(read: 4, change: 0) == 200)
            let oldRead = Task { try await runRiscReceiver(["streams", "show", "dev-ssf", "--json"], environment: environment) }
            try await untilHeld(1)
            #expect(try await runRiscReceiver(["streams", "delete", "dev-ssf"], environment: environment).status == 0)
            #expect(try await runRiscReceiver(["streams", "create", "dev-ssf"], environment: environment).status == 0)
            #expect((try await recorded() ?? .null) == .null, "a new stream has no status until one is read")
            #expect(statusOf(try await oldRead.value) == "disabled")
            #expect((try await recorded() ?? .null) == .null, "the old stream's status is not recorded for the new one")
        }
    }

    @Test("A stream the transmitter pauses holds its events, and the verification behind them, until it resumes", arguments: ["push", "poll"])
    func pausedAndResumed(delivery: String) async throws {
        try await Self.withStream(delivery) { harness, environment in
            let issuer = harness.transmitter.sharedSignalsIssuer
            let sub = "held-\(UUID().uuidString)"
            let session = try await harness.newSession(sub: sub)
            @Sendable func streamStatus() async throws -> JSONValue? {
                let shown = try await runRiscReceiver(["transmitters", "show", "dev-ssf", "--json"], environment: environment)
                return try JSONValue.parse(Data(shown.output.utf8))["stream"]?["status"]
            }
            let pause = try await harness.call(.POST, harness.transmitter.baseURL + "/dev/ssf/status?status=paused&reason=maintenance")
            #expect(pause.status == 200)
            try await eventually("the receiver records the pause") { try await streamStatus() == "paused" }
            let held = try await Self.push(
                harness, ["type": "session-revoked", "sub_id": ["format": "iss_sub", "iss": "https://accounts.google.com", "sub": .string(sub)]])
            #expect(held.status == 0, "held by the transmitter, not pushed")
            let verify = try await runRiscReceiver(["streams", "verify", "dev-ssf"], environment: environment)
            #expect(verify.status == 0, "\(verify.output)")
            #expect(try await harness.checkSession(session).status == 200, "nothing arrives while the stream is paused")

            let resume = try await harness.call(.POST, harness.transmitter.baseURL + "/dev/ssf/status?status=enabled")
            #expect(resume.status == 200)
            try await eventually("the held event is taken like any other") { try await harness.checkSession(session).status == 401 }
            try await eventually("the verification arrives behind it") {
                try await harness.database.query(
                    "SELECT count(*)::int8 FROM risc_events WHERE issuer = \(issuer) AND \(EventType.ssfVerification.rawValue) = ANY(event_types)"
                ).decode(Int64.self).reduce(0, +) == 1
            }
            #expect(try await streamStatus() == "enabled")
            var types: [String] = []
            for try await type in try await harness.database.query(
                "SELECT event_types[1] FROM risc_events WHERE issuer = \(issuer) ORDER BY id", logger: Harness.logger
            ).decode(String.self) { types.append(type) }
            let expected = [EventType.ssfStreamUpdated, .ssfStreamUpdated, .caepSessionRevoked, .ssfVerification].map(\.rawValue)
            if delivery == "push" {
                #expect(types == expected, "in the order the transmitter held them: \(types)")
            } else {
                // One poll brings them together, stored side by side.
                #expect(types.sorted() == expected.sorted(), "\(types)")
            }
        }
    }

    @Test(
        "Every event type the service acts on is taken from a transmitter and acted on, and one about a removed subject too",
        arguments: ["push", "poll"])
    func everySupportedEvent(delivery: String) async throws {
        try await Self.withStream(delivery) { harness, environment in
            let acted: [EventType] = EventType.actedOn.filter { ![.verification, .ssfVerification, .tokenRevoked].contains($0) }
            for type in acted {
                let sub = "every-\(UUID().uuidString)"
                let pushed = try await Self.push(
                    harness,
                    ["type": .string(type.rawValue), "sub_id": ["format": "iss_sub", "iss": "https://accounts.google.com", "sub": .string(sub)]])
                #expect(pushed.status == 202, "\(type.shortName): \(pushed)")
                try await eventually("\(type.shortName) is acted on") {
                    let kinds = try await harness.database.query(
                        "SELECT a.kind FROM risc_event_actions a JOIN risc_events e ON e.id = a.event_id WHERE e.jti = \(pushed.jti)"
                    ).decode(String.self).reduce(into: [String]()) { $0.append($1) }
                    return !kinds.isEmpty && !kinds.contains("skip")
                }
            }
            // A subject removed from the stream: what the transmitter still sends about it is taken all the same.
            let sub = "removed-\(UUID().uuidString.lowercased())"
            let session = try await harness.newSession(sub: sub)
            let removed = try await runRiscReceiver(
                ["streams", "subjects", "remove", "dev-ssf", "--email", "\(sub)@example.com"], environment: environment)
            #expect(removed.status == 0, "\(removed.output)")
            let late = try await Self.push(
                harness, ["type": "session-revoked", "sub_id": ["format": "email", "email": .string("\(sub)@example.com")]])
            #expect(late.status == 202)
            try await eventually("the removed subject's event is acted on") { try await harness.checkSession(session).status == 401 }
        }
    }

    @Test("A poll stream deleted and created again is polled again")
    func pollStreamRecreated() async throws {
        try await Self.withStream("poll") { harness, environment in
            let subject: JSONValue = ["format": "iss_sub", "iss": "https://accounts.google.com", "sub": "recreated"]
            #expect(try await Self.push(harness, ["type": "session-revoked", "sub_id": subject]).status == 202)
            #expect(try await runRiscReceiver(["streams", "delete", "dev-ssf"], environment: environment).status == 0)
            // Long enough for the poller to find the stream gone and stop polling it.
            try await Task.sleep(for: .seconds(3))
            #expect(try await runRiscReceiver(["streams", "create", "dev-ssf"], environment: environment).status == 0)
            let again = try await Self.push(harness, ["type": "session-revoked", "sub_id": subject])
            #expect(again.status == 202, "the new stream's SET is taken: \(again)")
        }
    }

    @Test("A polled SET larger than a push may be is refused with invalid_request, and the others are taken")
    func oversizedPolledSET() async throws {
        try await Self.withStream("poll") { harness, _ in
            let large = try await Self.push(
                harness, ["type": "session-revoked", "event": ["padding": .string(String(repeating: "p", count: 50_000))]])
            #expect(large.status == 400 && large.err == "invalid_request", "\(large)")
            let subject: JSONValue = ["format": "iss_sub", "iss": "https://accounts.google.com", "sub": "after-large"]
            #expect(try await Self.push(harness, ["type": "session-revoked", "sub_id": subject]).status == 202)
        }
    }

    @Test("A transmitter that changes its metadata's issuer after it was registered is not believed, even as Google")
    func issuerPinned() async throws {
        try await Self.withStream { harness, _ in
            // Before the receiver first reads the metadata for its keys, the transmitter says it is Google.
            let google = "https://accounts.google.com/"
            _ = try await harness.call(.POST, harness.transmitter.baseURL + "/dev/ssf/metadata-issuer?iss=" + google)
            let sub = "pinned-\(UUID().uuidString)"
            let session = try await harness.newSession(sub: sub)
            let subject: JSONValue = ["format": "iss_sub", "iss": .string(google), "sub": .string(sub)]
            for iss in [google, harness.transmitter.sharedSignalsIssuer] {
                let pushed = try await Self.push(harness, ["type": "session-revoked", "iss": .string(iss), "sub_id": subject])
                #expect(pushed.status == 400 && pushed.err == "invalid_issuer", "\(iss): \(pushed)")
            }
            #expect(try await Self.storedCount(harness, issuer: google) == 0)
            #expect(try await harness.checkSession(session).status == 200)
        }
    }
}
