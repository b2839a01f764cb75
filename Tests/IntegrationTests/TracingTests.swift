import AsyncHTTPClient
import DevTransmitter
import NIOCore
import Foundation
import RISC
import Testing

/// `scripts/otlp-receiver.py` on a port of its own: a collector stand-in that decodes each OTLP/HTTP export
/// (protobuf, with PyPI's opentelemetry-proto) and writes one JSON line per span.
struct TraceCollector {
    let endpoint: String
    let file: String

    static func with(_ body: (TraceCollector) async throws -> Void) async throws {
        let port = freePort()
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("spans-\(UUID().uuidString).jsonl").path
        let log = file + ".log"
        let script = Harness.repositoryRoot.appendingPathComponent("scripts/otlp-receiver.py").path
        let process = try ChildProcess.spawn("/usr/bin/env", ["python3", script, String(port), file], outputFile: log)
        defer {
            process.kill(SIGKILL)
            _ = waitpid(process.pid, nil, 0)
            for path in [file, log] { try? FileManager.default.removeItem(atPath: path) }
        }
        // It prints its port once it listens.
        try await eventually("the collector stand-in listens", timeout: .seconds(30)) {
            ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains("\(port)")
        }
        try await body(TraceCollector(endpoint: "http://127.0.0.1:\(port)", file: file))
    }

    var text: String { (try? String(contentsOfFile: file, encoding: .utf8)) ?? "" }
    var spans: [JSONValue] { text.split(separator: "\n").compactMap { try? JSONValue.parse(Data($0.utf8)) } }

    /// Spans arrive up to one batch delay after they end.
    func eventuallySpans(_ what: String, _ condition: @escaping ([JSONValue]) -> Bool) async throws -> [JSONValue] {
        var found: [JSONValue] = []
        try await eventually(what, timeout: .seconds(30)) {
            found = spans
            return condition(found)
        }
        return found
    }

    /// The export settings of a test: a short batch delay, and short timeouts for a collector that is down.
    func environment(_ extra: [String: String] = [:]) -> [String: String] {
        ["OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_EXPORTER_OTLP_TIMEOUT": "2000"].merging(extra) { $1 }
    }
}

extension JSONValue {
    var name: String { self["name"]?.stringValue ?? "" }
    var spanID: String { self["span_id"]?.stringValue ?? "" }
    var traceID: String { self["trace_id"]?.stringValue ?? "" }
    var parentID: String { self["parent_span_id"]?.stringValue ?? "" }
    func attribute(_ key: String) -> JSONValue? { self["attributes"]?[key] }
    var links: [(trace: String, span: String)] {
        (self["links"]?.arrayValue ?? []).map { ($0["trace_id"]?.stringValue ?? "", $0["span_id"]?.stringValue ?? "") }
    }
}

@Suite("Traces", .timeLimit(.minutes(4)))
struct TracingTests {
    @Test(
        "A SET's trace: the request span with verification and storage under it, the commit linked to it, the notification in it; logs carry its ids; no secret in any attribute"
    )
    func setTrace() async throws {
        let subscriber = TestSubscriber()
        try await subscriber.serving { hookURL in
            try await TraceCollector.with { collector in
                try await ServeProcess.with(environment: collector.environment(["LOG_LEVEL": "debug", "LOG_FORMAT": "json"])) { serve, transmitter in
                    try await Self.followOneSET(serve: serve, transmitter: transmitter, collector: collector, subscriber: subscriber, hookURL: hookURL)
                }
            }
        }
    }

    static func followOneSET(
        serve: ServeProcess, transmitter: DevTransmitter, collector: TraceCollector, subscriber: TestSubscriber, hookURL: String
    ) async throws {
        let client = Client(base: serve.url)
        let sub = "traced-\(UUID().uuidString)"
        let email = "traced-\(UUID().uuidString.prefix(8))@example.com"
        var idToken = IDTokenRequest(sub: sub)
        idToken.email = email
        idToken.iat = Date().timeIntervalSince1970.rounded(.down) - 5
        let signIn = try await client.send(
            .POST, "/tokensignin", body: "idtoken=\(try await transmitter.makeIDToken(idToken))", contentType: "application/x-www-form-urlencoded")
        #expect(signIn.status == 200, "\(signIn.body)")
        let session = try #require(signIn.json["session_token"]?.stringValue)
        #expect(try await client.send(.GET, "/v1/session", bearer: session).status == 200)
        let refreshToken = "1//traced-\(UUID().uuidString)"
        let grant = try await client.send(
            .POST, "/v1/grants", bearer: Harness.serviceToken,
            json: ["sub": .string(sub), "refresh_token": .string(refreshToken), "client_id": .string(Harness.audience)])
        #expect(grant.status == 201)
        let added = try await client.send(
            .POST, "/admin/v1/subscribers", bearer: Harness.adminToken, json: ["url": .string(hookURL), "secret": .string(subscriber.secret)])
        #expect(added.status == 201, "\(added.body)")

        // The transmitter's own trace: the request span continues it.
        let callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
        let callerSpan = "00f067aa0ba902b7"
        let set = try await transmitter.makeSET(SETRequest(type: "tokens-revoked", sub: sub))
        var request = HTTPClientRequestForTests(url: serve.url + "/risc/events", body: set)
        request.headers["traceparent"] = "00-\(callerTrace)-\(callerSpan)-01"
        request.headers["Content-Type"] = "application/secevent+jwt"
        #expect(try await request.send() == 202)
        try await eventually("the subscriber hears of it") { subscriber.accepted.withLock { $0 }.contains { $0.sub == sub } }
        let delivery = try #require(subscriber.accepted.withLock { $0 }.first { $0.sub == sub })

        let spans = try await collector.eventuallySpans("the SET's spans") { spans in
            spans.contains { $0.name == "deliver notification" } && spans.contains { $0.name == "store and apply SETs" }
                && spans.contains { $0.name == "POST /risc/events" }
        }
        let server = try #require(spans.first { $0.name == "POST /risc/events" })
        #expect(server["kind"] == 2)  // SERVER
        #expect(server.traceID == callerTrace && server.parentID == callerSpan)
        #expect(server.attribute("http.request.method") == "POST" && server.attribute("http.route") == "/risc/events")
        #expect(server.attribute("http.response.status_code") == 202)
        #expect(server["resource"]?["service.name"] == "risc-receiver")
        let verify = try #require(spans.first { $0.name == "verify SET" })
        #expect(verify.traceID == callerTrace && verify.parentID == server.spanID)
        #expect(verify.attribute("risc.set.outcome") == "verified")
        #expect(verify.attribute("risc.set.kid")?.stringValue?.isEmpty == false)
        #expect(verify.attribute("risc.set.event_types") == [.string(EventType.tokensRevoked.rawValue)])
        let store = try #require(spans.first { $0.name == "store SET" })
        #expect(store.traceID == callerTrace && store.parentID == server.spanID)
        #expect(store.attribute("risc.set.outcome") == "stored")

        // The group commit serves many requests: a trace of its own, linked to this request's span.
        let commit = try #require(spans.first { $0.name == "store and apply SETs" && $0.links.contains { $0.span == server.spanID } })
        #expect(commit.traceID != callerTrace)
        #expect(commit.links.contains { $0.trace == callerTrace && $0.span == server.spanID })
        let kinds = commit.attribute("risc.action.kinds")?.arrayValue?.compactMap(\.stringValue) ?? []
        #expect(Set(kinds) == ["revoke_sessions", "delete_grants"])
        #expect(commit.attribute("risc.action.rows") == [1, 1])
        #expect(commit.attribute("db.system.name") == "postgresql")

        // The delivery continues the request's trace, and hands it on.
        let deliver = try #require(spans.first { $0.name == "deliver notification" && $0.traceID == callerTrace })
        #expect(deliver["kind"] == 3)  // CLIENT
        #expect(deliver.parentID == server.spanID)
        #expect(deliver.attribute("risc.delivery.outcome") == "delivered")
        #expect(delivery.traceparent == "00-\(callerTrace)-\(deliver.spanID)-01", "\(delivery.traceparent ?? "none")")

        // Sign-in, the session check and the vault have spans of their own, under their requests'.
        for (operation, route) in [("sign in", "POST /tokensignin"), ("check session", "GET /v1/session"), ("vault store", "POST /v1/grants")] {
            let request = try #require(spans.first { $0.name == route }, "\(route)")
            #expect(spans.contains { $0.name == operation && $0.parentID == request.spanID }, "\(operation)")
        }

        // Logs written inside the request's span carry its ids.
        let accepted = serve.log.split(separator: "\n").compactMap { try? JSONValue.parse(Data($0.utf8)) }.first {
            $0["message"]?.stringValue == "Accepted a SET"
        }
        #expect(accepted?["trace_id"]?.stringValue == callerTrace, "\(String(describing: accepted))")
        #expect(accepted?["span_id"]?.stringValue?.count == 16)

        // Nothing secret anywhere in what was exported: not the SET or any part of it, a token, an email address, a
        // refresh token or its identifier, a secret.
        let exported = collector.text
        let segments = set.split(separator: ".").map(String.init)
        for secret in segments + [session, refreshToken, String(refreshToken.prefix(16)), email, Harness.adminToken, Harness.serviceToken, subscriber.secret] {
            #expect(!exported.contains(secret), "\(secret.prefix(12))... was exported")
        }
    }

    @Test("serve --no-worker and a worker: the worker's span links to the request that stored each event, and names what it changed")
    func workerLinks() async throws {
        try await TraceCollector.with { collector in
            try await ServeProcess.with(environment: collector.environment(), arguments: ["--no-worker"]) { serve, transmitter in
                let log = FileManager.default.temporaryDirectory.appendingPathComponent("worker-\(UUID().uuidString).log").path
                defer { try? FileManager.default.removeItem(atPath: log) }
                let worker = try ChildProcess.spawn(
                    riscReceiverBinary, ["worker"],
                    environment: collector.environment([
                        "DATABASE_URL": serve.databaseURL, "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin",
                    ]), outputFile: log)
                defer {
                    worker.kill(SIGKILL)
                    _ = waitpid(worker.pid, nil, 0)
                }
                let sub = "traced-worker-\(UUID().uuidString)"
                let set = try await transmitter.makeSET(SETRequest(type: "account-disabled", sub: sub))
                #expect(try await Client(base: serve.url).send(.POST, "/risc/events", body: set, contentType: "application/secevent+jwt").status == 202)
                let spans = try await collector.eventuallySpans("the worker's span") { spans in spans.contains { $0.name == "apply events" } }
                let server = try #require(spans.first { $0.name == "POST /risc/events" })
                #expect(spans.contains { $0.name == "store SETs" && $0.links.contains { $0.span == server.spanID } })
                let apply = try #require(spans.first { $0.name == "apply events" })
                #expect(apply["kind"] == 5)  // CONSUMER
                #expect(apply.traceID != server.traceID)
                #expect(apply.links.contains { $0.trace == server.traceID && $0.span == server.spanID })
                #expect(apply.attribute("risc.action.kinds") == ["disable_sign_in"])
                #expect(apply.attribute("risc.action.rows") == [1])
                #expect(apply.attribute("risc.event.ids")?.arrayValue?.count == 1)
            }
        }
    }

    @Test("A collector that is down slows and fails no request")
    func deadCollector() async throws {
        // Nothing listens there; each export waits for its 10 s timeout (the default) and is dropped.
        let environment = ["OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:\(freePort())", "OTEL_BSP_SCHEDULE_DELAY": "100"]
        try await ServeProcess.with(environment: environment) { serve, transmitter in
            let client = Client(base: serve.url)
            for _ in 0..<20 {
                let set = try await transmitter.makeSET(SETRequest(type: "sessions-revoked", sub: "dead-collector-\(UUID().uuidString)"))
                let started = ContinuousClock.now
                let reply = try await client.send(.POST, "/risc/events", body: set, contentType: "application/secevent+jwt")
                #expect(reply.status == 202)
                // Generous for a loaded machine; a request that waited on an export would take its 10 s.
                #expect(ContinuousClock.now - started < .seconds(5))
            }
            #expect(try await client.send(.GET, "/readyz").status == 200)
            // Tracing was on all along: the exporter says it cannot reach the collector.
            try await eventually("the exporter warns that the collector is down", timeout: .seconds(30)) {
                serve.log.lowercased().contains("failed to export")
            }
        }
    }
}

/// A POST with headers of the test's choosing (the transmitter's `traceparent`).
struct HTTPClientRequestForTests {
    var url: String
    var body: String
    var headers: [String: String] = [:]

    func send() async throws -> Int {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        request.body = .bytes(ByteBuffer(string: body))
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        return Int(response.status.code)
    }
}
