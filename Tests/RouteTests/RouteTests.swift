import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import RISC
import RISCKeys
import RISCServer
import RISCStore
import Synchronization
import Testing

/// The routes run in-process (`app.test(.router)`) against fake stores: what each route parses, refuses and answers,
/// without PostgreSQL or a network. What the stores do in SQL is the integration tests' part.
@Suite("Routes, with fake stores")
struct RouteTests {
    static let adminToken = "route-test-admin-token-0123456789"

    /// Answers "nothing there" (nil, false, not found), or throws `failure` from every call when it is set. One fake
    /// for each of the admin API's stores: events, reports, subscribers and notifications.
    struct FakeAdminStore {
        struct NotInThisFake: Error {}
        var failure: (any Error & Sendable)?

        struct Events: EventAdministering, FailingFake {
            let failure: (any Error & Sendable)?
            func events(_ filter: EventAdmin.Filter) async throws -> EventPage { try unanswered() }
            func event(id: Int64) async throws -> EventDetail? { try answer(nil) }
            func replay(id: Int64) async throws -> EventAdmin.ReplayOutcome { try answer(id == 7 ? .ignored : .notFound) }
            func explain(id: Int64) async throws -> EventExplanation? { try answer(nil) }
        }

        struct Reports: AdminReporting, FailingFake {
            let failure: (any Error & Sendable)?
            func user(sub: String) async throws -> UserReport? { try answer(nil) }
            func stats() async throws -> QueueStats { try unanswered() }
        }

        struct Subscribers: SubscriberStoring, FailingFake {
            let failure: (any Error & Sendable)?
            func subscribers() async throws -> [SubscriberRecord] { try answer([]) }
            func add(_ subscriber: NewSubscriber) async throws -> Int64 { try answer(42) }
            func remove(subscriber id: Int64) async throws -> Bool { try answer(false) }
            func rotateSecret(subscriber id: Int64) async throws -> SubscriberStore.SecretRotation? { try answer(nil) }
        }

        struct Notifications: NotificationAdministering, FailingFake {
            let failure: (any Error & Sendable)?
            func notifications(_ filter: NotificationOutbox.Filter) async throws -> NotificationPage { try unanswered() }
            func notification(id: Int64) async throws -> NotificationRecord? { try answer(nil) }
            func replay(id: Int64) async throws -> NotificationOutbox.ReplayOutcome { try answer(.pending) }
        }

        struct Transmitters: TransmitterStoring, FailingFake {
            let failure: (any Error & Sendable)?
            func transmitters() async throws -> [TransmitterRecord] { try answer([]) }
            func transmitter(named name: TransmitterName) async throws -> TransmitterRecord? { try answer(nil) }
            func add(_ transmitter: NewTransmitter) async throws -> TransmitterRecord { try unanswered() }
            func remove(named name: TransmitterName) async throws -> Bool { try answer(false) }
            func stream(of name: TransmitterName) async throws -> ManagedStream {
                try answer(())
                throw ManagedStream.Failure(.unknownTransmitter, "no transmitter \(name)")
            }
        }

        func addRoutes(to router: Router<AppRequestContext>) {
            AdminAPI.addRoutes(
                to: router, adminToken: adminToken, events: Events(failure: failure), reports: Reports(failure: failure),
                subscribers: Subscribers(failure: failure), notifications: Notifications(failure: failure),
                transmitters: Transmitters(failure: failure))
        }
    }

    /// No session is known; or every call throws `failure`.
    struct FakeSessions: SessionStoring, FailingFake {
        var failure: (any Error & Sendable)?
        var revoked: Set<String> = []

        func signIn(_ profile: GoogleIDToken.Profile, issuedAt: Date) async throws -> SessionStore.SignInOutcome {
            try answer(.signInDisabled)
        }
        func lookup(token: String) async throws -> SessionStore.Lookup {
            try answer(revoked.contains(token) ? .revoked : .invalid)
        }
        func end(token: String) async throws -> Bool { try answer(false) }
    }

    /// Counts what reaches it: a refused SET must not.
    final class FakeInbox: SETStore {
        let stored = Mutex(0)
        func store(_ event: InboundEvent) async throws -> EventInbox.Outcome {
            stored.withLock { $0 += 1 }
            return .stored
        }
    }

    /// One revoked grant; everything else unknown. Stores count what reaches them.
    final class FakeGrants: GrantStoring {
        static let revokedID = UUID()
        let stored = Mutex(0)
        func store(sub: String, clientID: String, scopes: [String], refreshToken: String) async throws -> UUID {
            stored.withLock { $0 += 1 }
            return UUID()
        }
        func lookup(id: UUID) async throws -> GrantStore.Lookup { id == Self.revokedID ? .revoked : .notFound }
        func delete(id: UUID) async throws -> Bool { id == Self.revokedID }
    }

    /// Keys that are never fetched: the discovery URL is never asked for by the requests these tests make.
    static func keys() -> IssuerKeys {
        IssuerKeys(settings: .init(discoveryURL: "https://keys.invalid/.well-known", allowedAlgorithms: ["RS256"]), logger: Logger(label: "test"))
    }

    static func application(
        admin: FakeAdminStore = .init(), sessions: FakeSessions = .init(), inbox: FakeInbox = .init(), grants: FakeGrants = .init()
    ) -> some ApplicationProtocol {
        let router = Router(context: AppRequestContext.self)
        admin.addRoutes(to: router)
        SessionController<AppRequestContext, FakeSessions>(
            verifier: IDTokenVerifier(keys: keys(), policy: IDTokenPolicy(audiences: ["client"])), sessions: sessions
        ).addRoutes(to: router)
        ReceiverController<AppRequestContext, FakeInbox>(
            verifier: SETVerifier(keys: keys(), policy: SETPolicy(audiences: ["client"])), inbox: inbox
        ).addRoutes(to: router)
        VaultController<AppRequestContext, FakeGrants>(
            serviceToken: serviceToken, grants: grants, oauth: OAuthClient(provider: keys(), secrets: [])
        ).addRoutes(to: router)
        return Application(router: router)
    }

    static let serviceToken = "route-test-service-token-0123456789"

    static let bearer: HTTPFields = [.authorization: "Bearer \(adminToken)"]

    static func json(_ buffer: ByteBuffer) -> [String: JSONValue] {
        (try? JSONValue.parse(Data(buffer: buffer)))?.objectValue ?? [:]
    }

    @Test("Admin ids that are not numbers are invalid_parameter id, on every route that takes one; unknown ids are 404")
    func adminIDs() async throws {
        try await Self.application().test(.router) { client in
            for (method, path) in [
                (HTTPRequest.Method.get, "/admin/v1/events/abc"), (.post, "/admin/v1/events/1x/replay"),
                (.delete, "/admin/v1/subscribers/-"), (.get, "/admin/v1/notifications/9999999999999999999999"),
                (.post, "/admin/v1/notifications/one/replay"),
            ] {
                try await client.execute(uri: path, method: method, headers: Self.bearer) { response in
                    #expect(response.status == .badRequest, "\(path)")
                    let body = Self.json(response.body)
                    #expect(body["error"] == "invalid_parameter" && body["parameter"] == "id", "\(path): \(body)")
                }
            }
            for (method, path) in [
                (HTTPRequest.Method.get, "/admin/v1/events/1"), (.post, "/admin/v1/events/1/replay"),
                (.delete, "/admin/v1/subscribers/1"), (.get, "/admin/v1/notifications/1"), (.get, "/admin/v1/users/nobody"),
            ] {
                try await client.execute(uri: path, method: method, headers: Self.bearer) { response in
                    #expect(response.status == .notFound, "\(path)")
                    #expect(Self.json(response.body)["error"] == "not_found", "\(path)")
                }
            }
            // An event with no known type, and a notification still pending, cannot be replayed.
            for path in ["/admin/v1/events/7/replay", "/admin/v1/notifications/1/replay"] {
                try await client.execute(uri: path, method: .post, headers: Self.bearer) { response in
                    #expect(response.status == .conflict && Self.json(response.body)["error"] == "not_replayable", "\(path)")
                }
            }
        }
    }

    @Test("The admin API refuses a missing or wrong bearer token before any store call, with one 401 body")
    func adminBearer() async throws {
        try await Self.application(admin: .init(failure: FakeAdminStore.NotInThisFake())).test(.router) { client in
            for headers: HTTPFields in [[:], [.authorization: "Bearer wrong"], [.authorization: "Basic \(Self.adminToken)"]] {
                try await client.execute(uri: "/admin/v1/stats", method: .get, headers: headers) { response in
                    #expect(response.status == .unauthorized)
                    #expect(Self.json(response.body)["error"] == "unauthorized")
                }
            }
        }
    }

    @Test("A listing refuses an unknown or malformed parameter by name, before asking the store")
    func adminParameters() async throws {
        try await Self.application(admin: .init(failure: FakeAdminStore.NotInThisFake())).test(.router) { client in
            for (path, parameter) in [
                ("/admin/v1/events?stauts=dead", "stauts"), ("/admin/v1/events?status=finished", "status"),
                ("/admin/v1/events?limit=0", "limit"), ("/admin/v1/notifications?subscriber=x", "subscriber"),
            ] {
                try await client.execute(uri: path, method: .get, headers: Self.bearer) { response in
                    #expect(response.status == .badRequest, "\(path)")
                    let body = Self.json(response.body)
                    #expect(body["error"] == "invalid_parameter" && body["parameter"] == .string(parameter), "\(path): \(body)")
                }
            }
        }
    }

    @Test("A subscriber body is decoded: not JSON or the wrong shape is invalid_request, no url or a bad one names url")
    func addSubscriber() async throws {
        try await Self.application().test(.router) { client in
            let cases: [(String, String, String?)] = [
                ("not json", "invalid_request", nil), (#"{"url": 5}"#, "invalid_request", nil), ("{}", "invalid_parameter", "url"),
                (#"{"url": "http://hooks.example.com/x"}"#, "invalid_parameter", "url"),
                (#"{"url": "https://hooks.example.com/x", "actions": ["nope"]}"#, "invalid_parameter", "actions"),
                // Where a subscriber may never point: the cloud metadata service, by address in any spelling or by name.
                (#"{"url": "https://169.254.169.254/latest"}"#, "invalid_parameter", "url"),
                (#"{"url": "https://2852039166/"}"#, "invalid_parameter", "url"),
                (#"{"url": "https://[::ffff:169.254.169.254]/"}"#, "invalid_parameter", "url"),
                (#"{"url": "https://[fe80::1]/"}"#, "invalid_parameter", "url"),
                (#"{"url": "https://metadata.google.internal/"}"#, "invalid_parameter", "url"),
            ]
            for (body, error, parameter) in cases {
                try await client.execute(
                    uri: "/admin/v1/subscribers", method: .post,
                    headers: [.authorization: "Bearer \(Self.adminToken)", .contentType: "application/json"],
                    body: ByteBuffer(string: body)
                ) { response in
                    #expect(response.status == .badRequest, "\(body)")
                    let answer = Self.json(response.body)
                    #expect(answer["error"] == .string(error), "\(body): \(answer)")
                    #expect(answer["parameter"] == parameter.map(JSONValue.string), "\(body): \(answer)")
                }
            }
            try await client.execute(
                uri: "/admin/v1/subscribers", method: .post, headers: Self.bearer,
                body: ByteBuffer(string: #"{"url": "https://hooks.example.com/x"}"#)
            ) { response in
                #expect(response.status == .created)
                let answer = Self.json(response.body)
                #expect(answer["id"] == 42 && answer["secret"]?.stringValue?.hasPrefix("whsec_") == true, "\(answer)")
            }
        }
    }

    /// Routes that call a store: the admin API's and the session check and sign-out.
    static var storeRoutes: [(HTTPRequest.Method, String, HTTPFields)] {
        [
            (.get, "/admin/v1/subscribers", bearer), (.get, "/v1/session", [.authorization: "Bearer s"]),
            (.delete, "/v1/session", [.authorization: "Bearer s"]),
        ]
    }

    @Test("The database unavailable is 503 unavailable with Retry-After, on the admin API and the session routes alike")
    func unavailable() async throws {
        let app = Self.application(admin: .init(failure: TimeoutError()), sessions: .init(failure: TimeoutError()))
        try await app.test(.router) { client in
            for (method, path, headers) in Self.storeRoutes {
                try await client.execute(uri: path, method: method, headers: headers) { response in
                    #expect(response.status == .serviceUnavailable, "\(path)")
                    #expect(Self.json(response.body)["error"] == "unavailable", "\(path)")
                    #expect(response.headers[.retryAfter] == "5", "\(path)")
                }
            }
        }
    }

    struct ProgrammingError: Error {}

    @Test("A store error that is not the database being unavailable is 500, not 503, on the session and admin routes")
    func faultsAreNotUnavailable() async throws {
        let app = Self.application(admin: .init(failure: ProgrammingError()), sessions: .init(failure: ProgrammingError()))
        try await app.test(.router) { client in
            for (method, path, headers) in Self.storeRoutes {
                try await client.execute(uri: path, method: method, headers: headers) { response in
                    #expect(response.status == .internalServerError, "\(path)")
                    #expect(response.headers[.retryAfter] == nil, "\(path)")
                }
            }
        }
    }

    @Test("A sign-in body over 64 KiB is 413, before any token is looked at")
    func signInBodyLimit() async throws {
        try await Self.application().test(.router) { client in
            let body = "idtoken=" + String(repeating: "a", count: RequestLimits.maxBodyBytes)
            try await client.execute(uri: "/tokensignin", method: .post, body: ByteBuffer(string: body)) { response in
                #expect(response.status == .contentTooLarge)
                #expect(Self.json(response.body)["error"] == "invalid_request")
            }
        }
    }

    @Test("Session checks: no bearer or an unknown session is invalid_session, a revoked one session_revoked")
    func sessions() async throws {
        try await Self.application(sessions: .init(revoked: ["gone"])).test(.router) { client in
            for (headers, error) in [
                ([:], "invalid_session"), ([.authorization: "Bearer nope"], "invalid_session"),
                ([.authorization: "Bearer gone"], "session_revoked"),
            ] as [(HTTPFields, String)] {
                try await client.execute(uri: "/v1/session", method: .get, headers: headers) { response in
                    #expect(response.status == .unauthorized && Self.json(response.body)["error"] == .string(error))
                }
            }
            try await client.execute(uri: "/tokensignin", method: .post, body: ByteBuffer(string: "nothing=here")) { response in
                #expect(response.status == .unauthorized && Self.json(response.body)["error"] == "invalid_token")
            }
        }
    }

    @Test("The vault: the service token is required; a bad or unknown id is 404, a revoked grant 410, a bad body 400")
    func vault() async throws {
        let grants = FakeGrants()
        try await Self.application(grants: grants).test(.router) { client in
            let service: HTTPFields = [.authorization: "Bearer \(Self.serviceToken)", .contentType: "application/json"]
            try await client.execute(uri: "/v1/grants", method: .post, headers: [.authorization: "Bearer \(Self.adminToken)"]) { response in
                #expect(response.status == .unauthorized)
            }
            for path in ["/v1/grants/not-a-uuid/token", "/v1/grants/\(UUID())/token"] {
                try await client.execute(uri: path, method: .post, headers: service) { response in
                    #expect(response.status == .notFound && Self.json(response.body)["error"] == "not_found", "\(path)")
                }
            }
            try await client.execute(uri: "/v1/grants/\(FakeGrants.revokedID)/token", method: .post, headers: service) { response in
                #expect(response.status == .gone && Self.json(response.body)["error"] == "grant_revoked")
            }
            // Revoked by an event: nothing left to revoke at Google, so the row just goes.
            try await client.execute(uri: "/v1/grants/\(FakeGrants.revokedID)", method: .delete, headers: service) { response in
                #expect(response.status == .noContent)
            }
            for body in [#"{"sub": "u"}"#, #"{"sub": "u", "refresh_token": "t\u0001", "client_id": "c"}"#, "[]"] {
                try await client.execute(uri: "/v1/grants", method: .post, headers: service, body: ByteBuffer(string: body)) { response in
                    #expect(response.status == .badRequest && Self.json(response.body)["error"] == "invalid_request", "\(body)")
                }
            }
        }
        #expect(grants.stored.withLock { $0 } == 0)
    }

    @Test("The receiver: a body over the limit is 413, a malformed SET 400 invalid_request; neither reaches the inbox")
    func receiver() async throws {
        let inbox = FakeInbox()
        try await Self.application(inbox: inbox).test(.router) { client in
            let headers: HTTPFields = [.contentType: "application/secevent+jwt"]
            try await client.execute(
                uri: "/risc/events", method: .post, headers: headers,
                body: ByteBuffer(repeating: UInt8(ascii: "a"), count: RequestLimits.maxBodyBytes + 1)
            ) { response in
                #expect(response.status == .contentTooLarge)
            }
            try await client.execute(uri: "/risc/events", method: .post, headers: headers, body: ByteBuffer(string: "a.b")) { response in
                #expect(response.status == .badRequest)
                #expect(Self.json(response.body)["err"] == "invalid_request")
            }
        }
        #expect(inbox.stored.withLock { $0 } == 0)
    }
}

/// A fake store whose every call throws `failure` when the test set one.
protocol FailingFake {
    var failure: (any Error & Sendable)? { get }
}

extension FailingFake {
    /// The fake's answer, unless it is to fail.
    func answer<Value>(_ value: Value) throws -> Value {
        if let failure { throw failure }
        return value
    }

    /// For a call the fake has no answer to: its failure, or `NotInThisFake`.
    func unanswered<Value>() throws -> Value {
        if let failure { throw failure }
        throw RouteTests.FakeAdminStore.NotInThisFake()
    }
}
