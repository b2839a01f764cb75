import AsyncHTTPClient
import DevTransmitter
import Foundation
import Hummingbird
import NIOCore
import NIOHTTP1
import RISC
import Synchronization
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

    /// The export settings of a test: a short batch delay, and a short export timeout.
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
                    try await Self.followOneSET(
                        serve: serve, transmitter: transmitter, collector: collector, subscriber: subscriber, hookURL: hookURL)
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

        // The transmitter's own trace: an unauthenticated caller's, so the request span starts a trace of its own and
        // links to it.
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
        #expect(server.traceID != callerTrace && server.parentID == "")
        #expect(server.links.count == 1 && server.links.first?.trace == callerTrace && server.links.first?.span == callerSpan)
        #expect(!spans.contains { $0.traceID == callerTrace })
        let trace = server.traceID
        #expect(server.attribute("http.request.method") == "POST" && server.attribute("http.route") == "/risc/events")
        #expect(server.attribute("http.response.status_code") == 202)
        #expect(server["resource"]?["service.name"] == "risc-receiver")
        let verify = try #require(spans.first { $0.name == "verify SET" })
        #expect(verify.traceID == trace && verify.parentID == server.spanID)
        #expect(verify.attribute("risc.set.outcome") == "verified")
        #expect(verify.attribute("risc.set.kid")?.stringValue?.isEmpty == false)
        #expect(verify.attribute("risc.set.event_types") == [.string(EventType.tokensRevoked.rawValue)])
        let store = try #require(spans.first { $0.name == "store SET" })
        #expect(store.traceID == trace && store.parentID == server.spanID)
        #expect(store.attribute("risc.set.outcome") == "stored")

        // The group commit serves many requests: a trace of its own, linked to this request's span.
        let commit = try #require(spans.first { $0.name == "store and apply SETs" && $0.links.contains { $0.span == server.spanID } })
        #expect(commit.traceID != trace)
        #expect(commit.links.contains { $0.trace == trace && $0.span == server.spanID })
        let kinds = commit.attribute("risc.action.kinds")?.arrayValue?.compactMap(\.stringValue) ?? []
        #expect(Set(kinds) == ["revoke_sessions", "delete_grants"])
        #expect(commit.attribute("risc.action.rows") == [1, 1])
        #expect(commit.attribute("db.system.name") == "postgresql")

        // The delivery continues the request's trace, and hands it on.
        let deliver = try #require(spans.first { $0.name == "deliver notification" && $0.traceID == trace })
        #expect(deliver["kind"] == 3)  // CLIENT
        #expect(deliver.parentID == server.spanID)
        #expect(deliver.attribute("risc.delivery.outcome") == "delivered")
        #expect(delivery.traceparent == "00-\(trace)-\(deliver.spanID)-01", "\(delivery.traceparent ?? "none")")

        // Sign-in, the session check and the vault have spans of their own, under their requests'.
        for (operation, route) in [("sign in", "POST /tokensignin"), ("check session", "GET /v1/session"), ("vault store", "POST /v1/grants")] {
            let request = try #require(spans.first { $0.name == route }, "\(route)")
            #expect(spans.contains { $0.name == operation && $0.parentID == request.spanID }, "\(operation)")
        }

        // Logs written inside the request's span carry its ids.
        let accepted = serve.log.split(separator: "\n").compactMap { try? JSONValue.parse(Data($0.utf8)) }.first {
            $0["message"]?.stringValue == "Accepted a SET"
        }
        #expect(accepted?["trace_id"]?.stringValue == trace, "\(String(describing: accepted))")
        #expect(accepted?["span_id"]?.stringValue?.count == 16)

        // Nothing secret anywhere in what was exported: not the SET or any part of it, a token, an email address, a
        // refresh token or its identifier, a secret.
        let exported = collector.text
        let segments = set.split(separator: ".").map(String.init)
        for secret in segments + [
            session, refreshToken, String(refreshToken.prefix(16)), email, Harness.adminToken, Harness.serviceToken, subscriber.secret,
        ] {
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
                #expect(
                    try await Client(base: serve.url).send(.POST, "/risc/events", body: set, contentType: "application/secevent+jwt").status == 202)
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

    /// A trace id and span id of a caller's own, and its `traceparent` (sampled).
    static func callerContext() -> (trace: String, span: String, traceparent: String) {
        let hex = { (count: Int) in String((0..<count).map { _ in "0123456789abcdef".randomElement()! }) }
        let trace = hex(32)
        let span = hex(16)
        return (trace, span, "00-\(trace)-\(span)-01")
    }

    @Test(
        "A caller's traceparent is the parent only on the admin API and the vault; on SETs, sign-in, the session check and health it is a link from a trace of our own"
    )
    func parentsAndLinks() async throws {
        try await TraceCollector.with { collector in
            try await ServeProcess.with(environment: collector.environment()) { serve, transmitter in
                var linked: [(route: String, caller: (trace: String, span: String, traceparent: String))] = []
                let set = try await transmitter.makeSET(SETRequest(type: "sessions-revoked", sub: "traced-link-\(UUID().uuidString)"))
                let unauthenticated: [(HTTPMethod, String, String?, String)] = [
                    (.POST, "/risc/events", set, "POST /risc/events"), (.POST, "/tokensignin", "idtoken=forged", "POST /tokensignin"),
                    (.GET, "/v1/session", nil, "GET /v1/session"), (.GET, "/healthz", nil, "GET /healthz"),
                ]
                for (method, path, body, route) in unauthenticated {
                    let caller = Self.callerContext()
                    var request = HTTPClientRequestForTests(url: serve.url + path, body: body, method: method)
                    request.headers["traceparent"] = caller.traceparent
                    if path == "/risc/events" { request.headers["Content-Type"] = "application/secevent+jwt" }
                    if path == "/tokensignin" { request.headers["Content-Type"] = "application/x-www-form-urlencoded" }
                    _ = try await request.send()
                    linked.append((route, caller))
                }
                var parented: [(route: String, caller: (trace: String, span: String, traceparent: String))] = []
                let authenticated: [(HTTPMethod, String, String, String)] = [
                    (.GET, "/admin/v1/stats", Harness.adminToken, "GET /admin/v1/stats"),
                    (.POST, "/v1/grants/\(UUID().uuidString)/token", Harness.serviceToken, "POST /v1/grants/{id}/token"),
                ]
                for (method, path, bearer, route) in authenticated {
                    let caller = Self.callerContext()
                    var request = HTTPClientRequestForTests(url: serve.url + path, body: nil, method: method)
                    request.headers["traceparent"] = caller.traceparent
                    request.headers["Authorization"] = "Bearer \(bearer)"
                    _ = try await request.send()
                    parented.append((route, caller))
                }
                let spans = try await collector.eventuallySpans("a server span for each request") { spans in
                    (linked + parented).allSatisfy { item in spans.contains { $0.name == item.route } }
                }
                for (route, caller) in linked {
                    let server = try #require(spans.first { $0.name == route }, "\(route)")
                    #expect(server.traceID != caller.trace && server.parentID == "", "\(route) joined the caller's trace")
                    #expect(
                        server.links.count == 1 && server.links.first?.trace == caller.trace && server.links.first?.span == caller.span, "\(route)")
                    #expect(!spans.contains { $0.traceID == caller.trace }, "\(route): a span in the caller's trace")
                }
                for (route, caller) in parented {
                    let server = try #require(spans.first { $0.name == route }, "\(route)")
                    #expect(server.traceID == caller.trace && server.parentID == caller.span, "\(route) did not continue the caller's trace")
                    #expect(server.links.isEmpty, "\(route)")
                }
            }
        }
    }

    @Test("With a sampler that keeps nothing of its own, an unauthenticated caller's sampled traceparent exports nothing")
    func unauthenticatedCallersCannotForceSampling() async throws {
        let environment = ["OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0"]
        try await TraceCollector.with { collector in
            try await ServeProcess.with(environment: collector.environment(environment)) { serve, transmitter in
                let set = try await transmitter.makeSET(SETRequest(type: "sessions-revoked", sub: "traced-unsampled-\(UUID().uuidString)"))
                let callers = (0..<3).map { _ in Self.callerContext() }
                var request = HTTPClientRequestForTests(url: serve.url + "/risc/events", body: set)
                request.headers["traceparent"] = callers[0].traceparent
                request.headers["Content-Type"] = "application/secevent+jwt"
                #expect(try await request.send() == 202)
                var check = HTTPClientRequestForTests(url: serve.url + "/v1/session", body: nil, method: .GET)
                check.headers["traceparent"] = callers[1].traceparent
                check.headers["Authorization"] = "Bearer \(UUID().uuidString)"
                #expect(try await check.send() == 401)
                var signIn = HTTPClientRequestForTests(url: serve.url + "/tokensignin", body: "idtoken=forged")
                signIn.headers["traceparent"] = callers[2].traceparent
                signIn.headers["Content-Type"] = "application/x-www-form-urlencoded"
                #expect(try await signIn.send() == 401)

                // The barrier: an authenticated caller's sampled request, after those, is exported; spans leave in the
                // order they end, so anything of the requests before it would have arrived by then.
                let admin = Self.callerContext()
                var stats = HTTPClientRequestForTests(url: serve.url + "/admin/v1/stats", body: nil, method: .GET)
                stats.headers["traceparent"] = admin.traceparent
                stats.headers["Authorization"] = "Bearer \(Harness.adminToken)"
                #expect(try await stats.send() == 200)
                let spans = try await collector.eventuallySpans("the admin request's span") { spans in
                    spans.contains { $0.name == "GET /admin/v1/stats" && $0.traceID == admin.trace }
                }
                for caller in callers {
                    #expect(!spans.contains { $0.traceID == caller.trace || $0.links.contains { $0.trace == caller.trace } })
                }
                let names = Set(spans.map(\.name))
                for name in ["POST /risc/events", "verify SET", "store SET", "store and apply SETs", "GET /v1/session", "POST /tokensignin"] {
                    #expect(!names.contains(name), "\(name) was exported")
                }
            }
        }
    }

    @Test("What a span takes from a request is cut at 256 bytes, at a character boundary: an 80 KB User-Agent, a long path")
    func requestAttributesAreBounded() async throws {
        try await TraceCollector.with { collector in
            try await ServeProcess.with(environment: collector.environment()) { serve, _ in
                // 80,001 bytes: "a" and then two-byte characters, so that byte 256 falls inside one.
                let userAgent = "a" + String(repeating: "é", count: 40_000)
                var request = HTTPClientRequestForTests(url: serve.url + "/healthz", body: nil, method: .GET)
                request.headers["User-Agent"] = userAgent
                #expect(try await request.send() == 200)
                let sub = String(repeating: "s", count: 4_000)
                var user = HTTPClientRequestForTests(url: serve.url + "/admin/v1/users/" + sub, body: nil, method: .GET)
                user.headers["Authorization"] = "Bearer \(Harness.adminToken)"
                _ = try await user.send()
                let spans = try await collector.eventuallySpans("both requests' spans") { spans in
                    spans.contains { $0.name == "GET /healthz" } && spans.contains { $0.name == "GET /admin/v1/users/{sub}" }
                }
                let health = try #require(spans.first { $0.name == "GET /healthz" })
                let agent = try #require(health.attribute("user_agent.original")?.stringValue)
                #expect(agent.utf8.count == 255, "\(agent.utf8.count) bytes of the User-Agent were exported")
                #expect(userAgent.hasPrefix(agent))
                let path = try #require(spans.first { $0.name == "GET /admin/v1/users/{sub}" }?.attribute("url.path")?.stringValue)
                #expect(path.utf8.count == 256, "\(path.utf8.count) bytes of the path were exported")
                #expect(("/admin/v1/users/" + sub).hasPrefix(path))
                // No attribute of any span is longer.
                for span in spans {
                    for (key, value) in span["attributes"]?.objectValue ?? [:] {
                        #expect((value.stringValue?.utf8.count ?? 0) <= 256, "\(span.name): \(key)")
                    }
                }
            }
        }
    }

    @Test("A collector that takes each export and never answers slows and fails no request")
    func hungCollector() async throws {
        let collector = HungCollector()
        let router = Router()
        router.post("/v1/traces") { _, _ -> Response in
            collector.exports.add(1, ordering: .relaxed)
            // Held until the test is done, so that shutting the stand-in down does not wait for it.
            while !collector.finished.load(ordering: .relaxed) && !Task.isCancelled { try? await Task.sleep(for: .milliseconds(50)) }
            return Response(status: .ok)
        }
        try await servingLocally(router) { endpoint in
            defer { collector.finished.store(true, ordering: .relaxed) }
            // Each export waits ten minutes for its answer: a request that waited on one would outlast the test.
            let environment = [
                "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100",
                "OTEL_EXPORTER_OTLP_TIMEOUT": "600000", "OTEL_BSP_EXPORT_TIMEOUT": "600000",
            ]
            try await ServeProcess.with(environment: environment) { serve, transmitter in
                let client = Client(base: serve.url)
                @Sendable func sendSET() async throws {
                    let set = try await transmitter.makeSET(SETRequest(type: "sessions-revoked", sub: "hung-collector-\(UUID().uuidString)"))
                    let started = ContinuousClock.now
                    let reply = try await client.send(
                        .POST, "/risc/events", body: set, contentType: "application/secevent+jwt", timeout: .seconds(90))
                    #expect(reply.status == 202)
                    // Far from both sides: a loaded machine has taken 6 s; a wait on the export takes 600 s.
                    #expect(ContinuousClock.now - started < .seconds(60))
                }
                // Tracing is on: spans reach the collector, and that export hangs from then on.
                try await sendSET()
                try await eventually("an export has reached the collector") { collector.exports.load(ordering: .relaxed) >= 1 }
                for _ in 0..<20 { try await sendSET() }
                #expect(try await client.send(.GET, "/readyz").status == 200)
            }
        }
    }

    @Test("A collector that is down: the export fails with a warning, and the SET is answered")
    func downCollector() async throws {
        // Nothing listens there; each export fails within its 1 s timeout.
        let environment = [
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:\(freePort())", "OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_EXPORTER_OTLP_TIMEOUT": "1000",
        ]
        try await ServeProcess.with(environment: environment) { serve, transmitter in
            let set = try await transmitter.makeSET(SETRequest(type: "sessions-revoked", sub: "down-collector-\(UUID().uuidString)"))
            #expect(try await Client(base: serve.url).send(.POST, "/risc/events", body: set, contentType: "application/secevent+jwt").status == 202)
            try await eventually("the exporter warns that the collector is down", timeout: .seconds(30)) {
                serve.log.lowercased().contains("failed to export")
            }
        }
    }
}

/// A request with headers of the test's choosing (a caller's `traceparent`, a long User-Agent).
struct HTTPClientRequestForTests {
    var url: String
    var body: String?
    var method: HTTPMethod = .POST
    var headers: [String: String] = [:]

    func send() async throws -> Int {
        var request = HTTPClientRequest(url: url)
        request.method = method
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let body { request.body = .bytes(ByteBuffer(string: body)) }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        return Int(response.status.code)
    }
}

/// An OTLP collector stand-in that takes every export and answers none of them until `finished`.
final class HungCollector: Sendable {
    let exports = Atomic<Int>(0)
    let finished = Atomic<Bool>(false)
}
