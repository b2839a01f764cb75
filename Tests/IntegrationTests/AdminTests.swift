import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import PostgresNIO
import RISC
import RISCServer
import RISCStore
import Testing

@Suite("Admin API and CLI", .timeLimit(.minutes(3)))
struct AdminTests {
    static var options: Harness.Options {
        var options = Harness.Options()
        options.worker = true
        options.maxAttempts = 1
        return options
    }

    func admin(_ harness: Harness, _ path: String, method: NIOHTTP1.HTTPMethod = .GET) async throws -> Harness.Reply {
        try await harness.call(method, path, bearer: Harness.adminToken)
    }

    /// A million finished sessions-revoked events, written by one statement.
    static func storeAMillionDoneEvents(in client: PostgresClient) async throws {
        try await client.query(
            """
            INSERT INTO risc_events (issuer, jti, event_types, events, claims, issued_at, status, completed_at)
            SELECT 'https://issuer.test/', 'large-' || k, ARRAY['https://schemas.openid.net/secevent/risc/event-type/sessions-revoked'],
                   '[]', '{}', now(), 'done', now()
            FROM generate_series(1, 1000000) AS k
            """, logger: Harness.logger)
    }

    @Test("stats counts a large table past RISC_DATABASE_TIMEOUT: only reaching the database has that bound")
    func statsOfALargeTable() async throws {
        try await Harness.withIsolatedDatabase { harness in
            // A million stored events: counting them (by status, then by type) takes far longer than the bound below,
            // as ten million took longer than the default 5 s.
            try await Self.storeAMillionDoneEvents(in: harness.database)
            let reports = AdminReports(client: harness.database, timeout: .milliseconds(300), logger: Harness.logger)
            let stats = try await reports.stats()
            #expect(stats.byStatus[.done] == 1_000_000)
            #expect(stats.byType["sessions-revoked"] == 1_000_000)
        }
    }

    @Test("stats's long counts end within RISC_DATABASE_TIMEOUT of the database going silent (found by the network-fault suite)")
    func statsWhenTheDatabaseGoesSilent() async throws {
        try await IsolatedDatabase.with { database in
            // Enough events that the counts are still running when the database goes silent under them.
            try await Self.storeAMillionDoneEvents(in: database.client)
            try await FaultProxy.with(in: database.url) { proxy, proxiedURL in
                let client = PostgresClient(configuration: try DatabaseURL.configuration(from: proxiedURL), backgroundLogger: Harness.logger)
                try await client.whileRunning { client in
                    let timeout = Duration.seconds(2)
                    let reports = AdminReports(client: client, timeout: timeout, logger: Harness.logger)
                    let stats = Task { try await reports.stats() }
                    try await eventually("the counts run", timeout: .seconds(30)) {
                        var running = false
                        for try await _ in try await database.client.query(
                            "SELECT 1 FROM pg_stat_activity WHERE state = 'active' AND pid <> pg_backend_pid() AND query LIKE '%count(*)::int8 FROM risc_events%GROUP BY%'",
                            logger: Harness.logger)
                        {
                            running = true
                        }
                        return running
                    }
                    try await proxy.send("blackhole")
                    let silent = ContinuousClock.now
                    // Heard again well past the bound: until then only a bound of the counts' own would end the call.
                    let heal = Task {
                        try await Task.sleep(for: timeout + .seconds(10))
                        try await proxy.send("forward")
                    }
                    let outcome = await stats.result
                    let waited = ContinuousClock.now - silent
                    try await heal.value
                    #expect(throws: TimeoutError.self) { try outcome.get() }
                    // Seconds of slack: with every other test running beside it, the end of a probe can come late.
                    #expect(waited < timeout + .seconds(4), "stats answered \(waited) after the database went silent")
                }
            }
        }
    }

    @Test("No token, a wrong token and a one-byte-different token are 401; without RISC_ADMIN_TOKEN the routes do not exist")
    func authentication() async throws {
        try await Harness.with { harness in
            var oneByteOff = Array(Harness.adminToken.utf8)
            oneByteOff[5] ^= 1
            for bearer in [nil, "wrong", String(decoding: oneByteOff, as: UTF8.self)] {
                for path in ["/admin/v1/stats", "/admin/v1/events", "/admin/v1/openapi.json"] {
                    let reply = try await harness.call(.GET, path, bearer: bearer)
                    #expect(reply.status == 401, "\(path) with \(bearer ?? "no token")")
                }
            }
            #expect(try await admin(harness, "/admin/v1/stats").status == 200)
        }
        var unset = Harness.Options()
        unset.adminToken = nil
        try await Harness.with(unset) { harness in
            let reply = try await harness.call(.GET, "/admin/v1/stats", bearer: Harness.adminToken)
            #expect(reply.status == 404)
        }
    }

    @Test("Admin and vault routes refuse no header, another scheme, a wrong token and the other kind's token, with one 401 body")
    func bearerKinds() async throws {
        try await Harness.with { harness in
            func call(_ method: NIOHTTP1.HTTPMethod, _ path: String, authorization: String?) async throws -> Harness.Reply {
                var request = HTTPClientRequest(url: harness.receiverURL + path)
                request.method = method
                if let authorization { request.headers.add(name: "Authorization", value: authorization) }
                if method == .POST {
                    request.headers.add(name: "Content-Type", value: "application/json")
                    request.body = .bytes(ByteBuffer(string: "{}"))
                }
                let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
                let body = try await response.body.collect(upTo: 1 << 20)
                return Harness.Reply(status: Int(response.status.code), headers: response.headers, body: String(buffer: body))
            }
            let routes: [(method: NIOHTTP1.HTTPMethod, path: String, own: String, other: String, kind: String)] = [
                (.GET, "/admin/v1/stats", Harness.adminToken, Harness.serviceToken, "admin"),
                (.POST, "/v1/grants", Harness.serviceToken, Harness.adminToken, "service"),
            ]
            for route in routes {
                let refused: [String?] = [
                    nil, "Bearer", "Bearer wrong", "Bearer \(route.other)", "Basic \(Data(route.own.utf8).base64EncodedString())",
                    route.own,
                ]
                for authorization in refused {
                    let reply = try await call(route.method, route.path, authorization: authorization)
                    let label = "\(route.path) with \(authorization ?? "no header")"
                    #expect(reply.status == 401, "\(label)")
                    #expect(reply.headers.first(name: "Content-Type") == "application/json", "\(label)")
                    #expect(
                        reply.json == ["error": "unauthorized", "description": .string("a valid \(route.kind) token is required")],
                        "\(label): \(reply.body)")
                }
                // The scheme is case-insensitive (RFC 9110 §11.1), as it always was here.
                let lowercase = try await call(route.method, route.path, authorization: "bearer \(route.own)")
                #expect(lowercase.status != 401, "\(route.path): \(lowercase.body)")
            }
        }
    }

    @Test("Every filter, bad parameters named, and pagination that stays stable while events arrive")
    func filtersAndPagination() async throws {
        try await Harness.with(Self.options) { harness in
            let sub = "admin-\(UUID().uuidString)"
            let start = Date().addingTimeInterval(-1)
            let revoked = try await harness.sendAndWait("sessions-revoked", sub: sub)
            try await harness.sendAndWait("account-disabled", sub: sub)
            try await harness.sendAndWait("account-enabled", sub: sub)

            func jtis(_ query: String) async throws -> [String] {
                let reply = try await admin(harness, "/admin/v1/events?\(query)")
                #expect(reply.status == 200, "\(query): \(reply.body)")
                return (reply.json["events"]?.arrayValue ?? []).compactMap { $0["jti"]?.stringValue }
            }
            #expect(try await jtis("sub=\(sub)").count == 3)
            #expect(try await jtis("sub=\(sub)&type=sessions-revoked") == [revoked])
            #expect(try await jtis("sub=\(sub)&type=\(EventType.sessionsRevoked.rawValue)") == [revoked])
            #expect(try await jtis("sub=\(sub)&status=done").count == 3)
            #expect(try await jtis("sub=\(sub)&status=pending").isEmpty)
            let since = ISO8601DateFormatter().string(from: start)
            #expect(try await jtis("sub=\(sub)&since=\(since)").count == 3)
            #expect(try await jtis("sub=\(sub)&until=\(since)").isEmpty)

            for (query, parameter) in [
                ("status=finished", "status"), ("type=not-a-type", "type"), ("since=yesterday", "since"), ("until=2026-13-01", "until"),
                ("limit=0", "limit"), ("limit=many", "limit"), ("cursor=bogus", "cursor"), ("colour=blue", "colour"),
            ] {
                let reply = try await admin(harness, "/admin/v1/events?\(query)")
                #expect(reply.status == 400, "\(query)")
                #expect(reply.json["error"] == "invalid_parameter")
                #expect(reply.json["parameter"]?.stringValue == parameter, "\(query): \(reply.body)")
            }
            #expect(try await admin(harness, "/admin/v1/events/abc").json["parameter"] == "id")

            // Pagination: 25 events for one user, read 10 at a time while more arrive between pages.
            let paged = "paged-\(UUID().uuidString)"
            var sent = Set<String>()
            for _ in 0..<25 {
                sent.insert(
                    try await harness.send("verification", sub: nil) {
                        $0.sub = paged
                        $0.type = "sessions-revoked"
                    })
            }
            var seen: [String] = []
            var cursor: String?
            var pages = 0
            repeat {
                let reply = try await admin(harness, "/admin/v1/events?sub=\(paged)&limit=10" + (cursor.map { "&cursor=\($0)" } ?? ""))
                seen += (reply.json["events"]?.arrayValue ?? []).compactMap { $0["jti"]?.stringValue }
                cursor = reply.json["next_cursor"]?.stringValue
                pages += 1
                _ = try await harness.send("sessions-revoked", sub: paged)  // arrives mid-listing
            } while cursor != nil && pages < 10
            #expect(pages == 3)
            #expect(Set(seen).count == seen.count, "a page repeated an event")
            #expect(sent.isSubset(of: Set(seen)), "an event present before the listing was skipped")
        }
    }

    @Test("Event detail, the user view, stats, and a dead event replayed to completion")
    func detailUserStatsReplay() async throws {
        // A database of its own: another test's worker (with its own RISC_MAX_ATTEMPTS) must not take the broken
        // event below and schedule a retry instead of dead-lettering it.
        try await Harness.withIsolatedDatabase(Self.options) { harness in
            let sub = "view-\(UUID().uuidString)"
            let session = try await harness.newSession(sub: sub)
            _ = try await harness.storeGrant(sub: sub, refreshToken: "1//view-\(UUID().uuidString)")
            let jti = try await harness.sendAndWait("tokens-revoked", sub: sub)
            #expect(try await harness.checkSession(session).status == 401)

            let list = try await admin(harness, "/admin/v1/events?sub=\(sub)")
            let id = try #require(list.json["events"]?.arrayValue?.first?["id"])
            let detail = try await admin(harness, "/admin/v1/events/\(Table.number(id))")
            #expect(detail.json["jti"]?.stringValue == jti)
            #expect(detail.json["claims"]?["jti"]?.stringValue == jti)
            #expect(!detail.body.contains(".ey"), "the detail holds a compact JWS")
            #expect(detail.json["actions"]?.arrayValue?.compactMap { $0["kind"]?.stringValue } == ["revoke_sessions", "delete_grants"])

            let user = try await admin(harness, "/admin/v1/users/\(sub)")
            #expect(user.status == 200)
            #expect(user.json["sessions"] == ["active": 0, "revoked": 1])
            #expect(user.json["grants"] == ["active": 0, "revoked": 1])
            #expect(user.json["recent_events"]?.arrayValue?.count == 1)
            #expect(try await admin(harness, "/admin/v1/users/nobody-\(UUID().uuidString)").status == 404)
            #expect(try await admin(harness, "/admin/v1/events/999999999").status == 404)

            // A dead letter: an event the worker cannot decode fails its one attempt.
            let broken = "broken-\(UUID().uuidString)"
            for try await _ in try await harness.database.query(
                """
                INSERT INTO risc_events (issuer, jti, event_types, subject_sub, events, claims, issued_at)
                VALUES ('https://transmitter.test/', \(broken), ARRAY['x'], \(sub), '[{"no": "type"}]', '{}', now()) RETURNING id
                """)
            {}
            #expect(try await harness.waitUntilProcessed(jti: broken) == "dead")
            let stats = try await admin(harness, "/admin/v1/stats")
            #expect(stats.status == 200)
            #expect((stats.json["dead"]?.number ?? 0) >= 1)
            let deadID = try #require(try await admin(harness, "/admin/v1/events?sub=\(sub)&status=dead").json["events"]?.arrayValue?.first?["id"])
            for try await _ in try await harness.database.query(
                """
                UPDATE risc_events SET events = '[{"type": "https://schemas.openid.net/secevent/risc/event-type/sessions-revoked",
                  "subject": {"format": "iss_sub", "iss": "accounts.google.com", "sub": "\(unescaped: sub)"}}]' WHERE jti = \(broken) RETURNING id
                """)
            {}
            let replay = try await admin(harness, "/admin/v1/events/\(Table.number(deadID))/replay", method: .POST)
            #expect(replay.status == 202)
            #expect(try await harness.waitUntilProcessed(jti: broken) == "done")
            #expect(try await admin(harness, "/admin/v1/events/999999999/replay", method: .POST).status == 404)
        }
    }

    @Test("The CLI prints the same objects as the API with --json, plain tables otherwise, and exits 0, 1 or 2")
    func cli() async throws {
        try await Harness.with(Self.options) { harness in
            let sub = "cli-\(UUID().uuidString)"
            try await harness.sendAndWait("sessions-revoked", sub: sub)
            try await harness.sendAndWait("account-disabled", sub: sub)
            let environment = ["DATABASE_URL": Harness.environment("RISC_TEST_DATABASE_URL"), "LOG_LEVEL": "warning"]

            // The output holds standard error too: on a loaded machine a warning line (a slow database) may come first.
            func printedJSON(_ output: String) throws -> JSONValue {
                try JSONValue.parse(Data((output.split(separator: "\n").last { $0.hasPrefix("{") }.map(String.init) ?? output).utf8))
            }
            let list = try await runRiscReceiver(["events", "list", "--sub", sub, "--json"], environment: environment)
            #expect(list.status == 0, "\(list.output)")
            let api = try await admin(harness, "/admin/v1/events?sub=\(sub)")
            #expect(try printedJSON(list.output) == api.json.asValue)

            let user = try await runRiscReceiver(["users", "show", sub, "--json"], environment: environment)
            #expect(try printedJSON(user.output) == (try await admin(harness, "/admin/v1/users/\(sub)")).json.asValue)

            let id = try #require(api.json["events"]?.arrayValue?.first?["id"])
            let show = try await runRiscReceiver(["events", "show", Table.number(id), "--json"], environment: environment)
            #expect(try printedJSON(show.output) == (try await admin(harness, "/admin/v1/events/\(Table.number(id))")).json.asValue)

            for arguments in [["events", "list", "--sub", sub], ["users", "show", sub], ["stats"], ["events", "show", Table.number(id)]] {
                let table = try await runRiscReceiver(arguments, environment: environment)
                #expect(table.status == 0, "\(arguments): \(table.output)")
                #expect(!table.output.contains("\u{1B}") && !table.output.contains("\r"), "escape sequences when piped: \(arguments)")
            }
            #expect(try await runRiscReceiver(["users", "show", "nobody-\(UUID().uuidString)"], environment: environment).status == 1)
            #expect(try await runRiscReceiver(["events", "show", "999999999"], environment: environment).status == 1)
            #expect(try await runRiscReceiver(["events", "replay", "999999999"], environment: environment).status == 1)
            // An ignored event (no known type) has nothing to replay: exit 1, as the API's 409.
            let unknownType = try await harness.sign(harness.claims { $0["events"] = ["https://example.com/event-type/new": [:]] })
            #expect(try await harness.post(unknownType).status == 202)
            let ignoredID = try #require(
                try await admin(harness, "/admin/v1/events?type=https://example.com/event-type/new&limit=1").json["events"]?.arrayValue?.first?["id"])
            #expect(try await runRiscReceiver(["events", "replay", Table.number(ignoredID)], environment: environment).status == 1)
            #expect(try await admin(harness, "/admin/v1/events/\(Table.number(ignoredID))/replay", method: .POST).status == 409)
            #expect(try await runRiscReceiver(["events", "list", "--status", "finished"], environment: environment).status == 2)
            #expect(try await runRiscReceiver(["events", "replay"], environment: environment).status == 2)
            #expect(try await runRiscReceiver(["stats"], environment: [:]).status == 2)

            // The next page's hint repeats the filters: the cursor alone would list every event.
            let page = try await runRiscReceiver(["events", "list", "--sub", sub, "--limit", "1"], environment: environment)
            #expect(page.output.contains("more: risc-receiver events list --sub \(sub) --limit 1 --cursor "), "\(page.output)")
        }
    }

    @Test("stats on a database where nothing waits says so, not `- s`")
    func statsWithNothingWaiting() async throws {
        try await IsolatedDatabase.with { database in
            _ = try await Migrator.embedded.migrate(client: database.client, logger: Harness.logger)
            let stats = try await runRiscReceiver(["stats"], environment: ["DATABASE_URL": database.url, "LOG_LEVEL": "warning"])
            #expect(stats.status == 0, "\(stats.output)")
            #expect(stats.output.contains("oldest        - (nothing waiting)"), "\(stats.output)")
            #expect(!stats.output.contains("- s"))
        }
    }

    @Test("The OpenAPI document is valid, is served as committed, and the live responses match it")
    func openAPI() async throws {
        try await Harness.with(Self.options) { harness in
            let committedPath = Harness.repositoryRoot.appendingPathComponent("Sources/RISCServer/Resources/admin-openapi.json").path
            let committed = try JSONValue.parse(try Data(contentsOf: URL(fileURLWithPath: committedPath)))
            let served = try await admin(harness, "/admin/v1/openapi.json")
            #expect(served.json.asValue == committed)

            let sub = "openapi-\(UUID().uuidString)"
            _ = try await harness.newSession(sub: sub)
            // A subscriber that hears of this test's actions only (the database is shared), with no dispatcher running.
            let added = try await harness.call(
                .POST, "/admin/v1/subscribers", bearer: Harness.adminToken,
                json: ["url": "https://hooks.example.com/openapi", "actions": ["disable_sign_in"]])
            let subscriber = Table.number(try #require(added.json["id"]))
            try await harness.sendAndWait("account-disabled", sub: sub) { $0.reason = "hijacking" }
            let id = Table.number(try #require(try await admin(harness, "/admin/v1/events?sub=\(sub)").json["events"]?.arrayValue?.first?["id"]))
            let notification = Table.number(
                try #require(try await admin(harness, "/admin/v1/notifications?sub=\(sub)").json["notifications"]?.arrayValue?.first?["id"]))
            // A Shared Signals transmitter, from this harness's development transmitter (its issuer is this harness's own).
            let transmitter = "openapi-" + UUID().uuidString.lowercased().prefix(8)
            let registered = try await harness.call(
                .POST, "/admin/v1/transmitters", bearer: Harness.adminToken,
                json: [
                    "name": .string(transmitter), "issuer": .string(harness.transmitter.sharedSignalsIssuer),
                    "client_id": .string(harness.transmitter.sharedSignalsClientID),
                    "client_secret": .string(harness.transmitter.sharedSignalsClientSecret), "delivery": "poll",
                ])
            #expect(registered.status == 201, "\(registered.body)")
            #expect(!registered.body.contains(harness.transmitter.sharedSignalsClientSecret))
            let refusedTransmitter = try await harness.call(
                .POST, "/admin/v1/transmitters", bearer: Harness.adminToken, json: ["name": "google", "issuer": "https://ssf.example"])
            #expect(refusedTransmitter.status == 400)
            var responses: [JSONValue] = [
                ["method": "POST", "path": "/admin/v1/subscribers", "status": .number(Double(added.status)), "body": added.json.asValue],
                ["method": "POST", "path": "/admin/v1/transmitters", "status": .number(Double(registered.status)), "body": registered.json.asValue],
                [
                    "method": "POST", "path": "/admin/v1/transmitters", "status": .number(Double(refusedTransmitter.status)),
                    "body": refusedTransmitter.json.asValue,
                ],
            ]
            // Its stream, through the admin API as `streams` manages it (poll: no public URL needed).
            let stream = "/admin/v1/transmitters/\(transmitter)/stream"
            let streamTemplate = "/admin/v1/transmitters/{name}/stream"
            func call(_ method: NIOHTTP1.HTTPMethod, _ suffix: String, json: JSONValue? = nil, path: String? = nil) async throws -> Harness.Reply {
                let reply = try await harness.call(method, path ?? stream + suffix, bearer: Harness.adminToken, json: json)
                responses.append([
                    "method": .string(method.rawValue), "path": .string(streamTemplate + suffix), "status": .number(Double(reply.status)),
                    "body": reply.json.asValue,
                ])
                return reply
            }
            let beforeCreate = try await call(.GET, "")
            #expect(beforeCreate.status == 409 && beforeCreate.json["error"] == "no_stream", "\(beforeCreate.body)")
            let created = try await call(.POST, "")
            #expect(created.status == 201 && created.json["taken_over"] == false, "\(created.body)")
            let shown = try await call(.GET, "")
            #expect(shown.status == 200 && shown.json["delivery"] == "poll" && shown.json["stream_id"] == created.json["stream_id"])
            #expect(try await call(.GET, "/status").json["status"] == "enabled")
            let paused = try await call(.POST, "/status", json: ["status": "paused", "reason": "maintenance"])
            #expect(paused.status == 200 && paused.json["status"] == "paused" && paused.json["reason"] == "maintenance", "\(paused.body)")
            let recorded = try await admin(harness, "/admin/v1/transmitters/\(transmitter)").json["stream"]
            #expect(recorded?["status"] == "paused", "the status the transmitter answered is recorded")
            #expect(try await call(.POST, "/status", json: ["status": "asleep"]).json["parameter"] == "status")
            let updated = try await call(.PATCH, "", json: ["events": ["session-revoked"]])
            #expect(updated.status == 200 && updated.json["events_delivered"]?.arrayValue?.isEmpty == false, "\(updated.body)")
            #expect(try await call(.PATCH, "", json: ["events": ["not-an-event"]]).status == 400)
            let verify = try await call(.POST, "/verify")
            #expect(verify.status == 200 && verify.json["state"]?.stringValue?.isEmpty == false, "\(verify.body)")
            #expect(try await call(.POST, "/verify", json: ["wait": 0]).json["parameter"] == "wait")
            let email: JSONValue = ["subject": ["format": "email", "email": "ann@example.com"]]
            #expect(try await call(.POST, "/subjects/add", json: email).status == 204)
            #expect(try await call(.POST, "/subjects/remove", json: ["subject": ["format": "phone_number"]]).json["parameter"] == "subject")
            #expect(try await call(.POST, "/subjects/remove", json: email).status == 204)
            #expect(try await call(.PUT, "").status == 204)
            #expect(try await call(.GET, "", path: "/admin/v1/transmitters/google/stream").status == 404)
            #expect(try await call(.DELETE, "").status == 204)
            #expect(try await call(.POST, "/verify").json["error"] == "no_stream")

            for (method, path, template) in [
                (NIOHTTP1.HTTPMethod.GET, "/admin/v1/events?sub=\(sub)&limit=1", "/admin/v1/events"),
                (.GET, "/admin/v1/events?limit=2", "/admin/v1/events"),
                (.GET, "/admin/v1/events?status=nope", "/admin/v1/events"),
                (.GET, "/admin/v1/events/\(id)", "/admin/v1/events/{id}"),
                (.GET, "/admin/v1/events/999999999", "/admin/v1/events/{id}"),
                (.GET, "/admin/v1/events/\(id)/explain", "/admin/v1/events/{id}/explain"),
                (.GET, "/admin/v1/events/999999999/explain", "/admin/v1/events/{id}/explain"),
                (.POST, "/admin/v1/events/\(id)/replay", "/admin/v1/events/{id}/replay"),
                (.GET, "/admin/v1/users/\(sub)", "/admin/v1/users/{sub}"),
                (.GET, "/admin/v1/users/nobody", "/admin/v1/users/{sub}"),
                (.GET, "/admin/v1/stats", "/admin/v1/stats"),
                (.GET, "/admin/v1/subscribers", "/admin/v1/subscribers"),
                (.GET, "/admin/v1/notifications?subscriber=\(subscriber)", "/admin/v1/notifications"),
                (.GET, "/admin/v1/notifications?status=sent", "/admin/v1/notifications"),
                (.GET, "/admin/v1/notifications/\(notification)", "/admin/v1/notifications/{id}"),
                (.POST, "/admin/v1/notifications/\(notification)/replay", "/admin/v1/notifications/{id}/replay"),
                (.GET, "/admin/v1/notifications/999999999", "/admin/v1/notifications/{id}"),
                (.POST, "/admin/v1/subscribers/\(subscriber)/rotate-secret", "/admin/v1/subscribers/{id}/rotate-secret"),
                (.POST, "/admin/v1/subscribers/999999999/rotate-secret", "/admin/v1/subscribers/{id}/rotate-secret"),
                (.DELETE, "/admin/v1/subscribers/\(subscriber)", "/admin/v1/subscribers/{id}"),
                (.GET, "/admin/v1/transmitters", "/admin/v1/transmitters"),
                (.GET, "/admin/v1/transmitters/\(transmitter)", "/admin/v1/transmitters/{name}"),
                (.GET, "/admin/v1/transmitters/google", "/admin/v1/transmitters/{name}"),
                (.GET, "/admin/v1/transmitters/nobody", "/admin/v1/transmitters/{name}"),
                (.GET, "/admin/v1/transmitters/Not_A_Name", "/admin/v1/transmitters/{name}"),
                (.DELETE, "/admin/v1/transmitters/google", "/admin/v1/transmitters/{name}"),
                (.DELETE, "/admin/v1/transmitters/\(transmitter)", "/admin/v1/transmitters/{name}"),
            ] {
                let reply = try await admin(harness, path, method: method)
                responses.append([
                    "method": .string(method.rawValue), "path": .string(template), "status": .number(Double(reply.status)),
                    "body": reply.json.asValue,
                ])
            }
            let oversized = try await harness.call(
                .POST, "/admin/v1/subscribers", bearer: Harness.adminToken,
                json: ["url": .string("https://hooks.example.com/" + String(repeating: "a", count: 70_000))])
            #expect(oversized.status == 413)
            responses.append(["method": "POST", "path": "/admin/v1/subscribers", "status": 413, "body": oversized.json.asValue])
            let unauthorized = try await harness.call(.GET, "/admin/v1/stats", bearer: "wrong")
            responses.append(["method": "GET", "path": "/admin/v1/stats", "status": 401, "body": unauthorized.json.asValue])

            let file = FileManager.default.temporaryDirectory.appendingPathComponent("responses-\(UUID().uuidString).json").path
            let log = file + ".log"
            #expect(FileManager.default.createFile(atPath: file, contents: Data(JSONValue.array(responses).serialized.utf8)))
            defer {
                try? FileManager.default.removeItem(atPath: file)
                try? FileManager.default.removeItem(atPath: log)
            }
            let script = Harness.repositoryRoot.appendingPathComponent("scripts/check-openapi.py").path
            let status = try await ChildProcess.spawn("/usr/bin/env", ["python3", script, committedPath, file], outputFile: log).wait()
            let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            #expect(status == 0, "\(output)")
            #expect(output.contains("\(responses.count) responses match"), "\(output)")
        }
    }
}

extension Dictionary where Key == String, Value == JSONValue {
    var asValue: JSONValue { .object(self) }
}

extension JSONValue {
    var number: Double? {
        if case .number(let value) = self { return value }
        return nil
    }
}

extension Table {
    static func number(_ value: JSONValue) -> String { text(value) }
}

/// The CLI's table helper, mirrored here for formatting ids in test URLs.
enum Table {
    static func text(_ value: JSONValue?) -> String {
        switch value {
        case .number(let number)?: String(Int64(number))
        case .string(let string)?: string
        default: "-"
        }
    }
}
