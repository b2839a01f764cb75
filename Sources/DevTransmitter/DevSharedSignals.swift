import AsyncHTTPClient
import Foundation
import Hummingbird
import NIOCore
import RISC
import Synchronization

/// A Shared Signals (SSF 1.0) transmitter in miniature, beside the Google stand-in, under `/ssf`: its metadata at the
/// well-known URL, its own signing keys, an OAuth 2.0 token endpoint for client credentials, and the stream management
/// API (one stream per receiver, as many transmitters allow). Written from the SSF text, not from the receiver: the two
/// can disagree, and the tests show where.
final class DevSharedSignals: Sendable {
    /// The OAuth client the receiver registers with (`transmitters add dev-ssf --client-id ... --client-secret -`).
    static let clientID = "ssf-dev-client"
    static let clientSecret = "ssf-dev-client-secret"

    struct Stream: Sendable {
        var id: String
        var audience: String
        var delivery: JSONValue
        var eventsRequested: [String]
        var description: String?
        var status = "enabled"
        var reason: String?
    }

    struct State: Sendable {
        /// Access tokens and when each stops working.
        var accessTokens: [String: Date] = [:]
        var tokenLifetime: TimeInterval = 3600
        /// While set, stream configurations name this issuer instead (a transmitter that answers for another).
        var foreignIssuer: String?
        /// While set, the metadata names this issuer (a transmitter that changed its issuer after it was registered).
        var metadataIssuer: String?
        /// Every stream deleted, by id (the tests check a foreign stream was deleted at once).
        var deletedStreams: [String] = []
        /// The subjects added to the stream, as the receiver sent them.
        var subjects: [JSONValue] = []
        var stream: Stream?
        /// The verification states asked for, in order (the tests read them).
        var verificationStates: [String] = []
        /// Events signed while the stream is paused, in order: SSF has the transmitter hold them and deliver them
        /// once the stream is enabled again. A disabled stream drops them.
        var held: [JSONValue] = []
        /// Poll delivery (RFC 8936): the SETs signed and not yet acknowledged nor reported, oldest first; each poll
        /// offers them again until one or the other.
        var queue: [(jti: String, token: String)] = []
        var acknowledged: [String] = []
        var setErrors: [String: JSONValue] = [:]
        var polls = 0
        /// While set, polls are answered 503 without taking their acknowledgements (tests: the receiver must keep them).
        var refusePolls = false
        /// Tests: once a poll has returned SETs, the polls after it are refused (the acknowledgement of a SET just
        /// stored cannot get through).
        var refuseAfterDelivery = false
        /// The jti of every SET a poll returned, in order (a redelivery again).
        var offered: [String] = []
        /// How long a poll with nothing to return is held open (long polling).
        var longPoll: TimeInterval = 10
        /// How late the status endpoint answers a read, and how long it waits before a change (tests).
        var statusReadDelay: TimeInterval = 0
        var statusChangeDelay: TimeInterval = 0
        /// Calls of the status endpoint held by those delays.
        var statusCallsWaiting = 0
    }

    let keys: SigningKeys
    let state = Mutex(State())

    init() async throws {
        keys = try await SigningKeys()
    }

    /// The event types this transmitter can deliver: RISC, CAEP and SSF's own.
    static let eventsSupported: [String] = EventType.actedOn.map(\.rawValue) + [EventType.ssfStreamUpdated.rawValue]

    static func random() -> String { Base64URL.random(bytes: 16) }
}

extension DevTransmitter {
    /// The Shared Signals transmitter's issuer: `/ssf` under this transmitter, so its metadata URL has a path to insert.
    public var sharedSignalsIssuer: String { baseURL + "/ssf" }
    public var sharedSignalsClientID: String { DevSharedSignals.clientID }
    public var sharedSignalsClientSecret: String { DevSharedSignals.clientSecret }

    func addSharedSignalsRoutes(to router: Router<BasicRequestContext>) {
        let ssf = sharedSignals
        router.get("/.well-known/ssf-configuration/ssf") { _, _ in
            let issuer = self.sharedSignalsIssuer
            return Self.json([
                "spec_version": "1_0", "issuer": .string(ssf.state.withLock { $0.metadataIssuer } ?? issuer), "jwks_uri": .string(issuer + "/jwks"),
                "delivery_methods_supported": ["urn:ietf:rfc:8935", "urn:ietf:rfc:8936"],
                "configuration_endpoint": .string(issuer + "/streams"), "status_endpoint": .string(issuer + "/status"),
                "verification_endpoint": .string(issuer + "/verify"), "add_subject_endpoint": .string(issuer + "/subjects:add"),
                "remove_subject_endpoint": .string(issuer + "/subjects:remove"),
                "authorization_schemes": [["spec_urn": "urn:ietf:rfc:6749"]],
                // A complex subject's tenant must be understood to act on an event (SSF 1.0's critical members).
                "critical_subject_members": ["tenant"],
            ])
        }
        // RFC 8414: the authorization server's metadata, its name inserted before the issuer's path.
        router.get("/.well-known/oauth-authorization-server/ssf") { _, _ in
            Self.json([
                "issuer": .string(self.sharedSignalsIssuer), "token_endpoint": .string(self.sharedSignalsIssuer + "/token"),
                "grant_types_supported": ["client_credentials"],
                "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
            ])
        }
        router.get("/ssf/jwks") { _, _ in Self.json(try ssf.keys.jwks(), maxAge: 300) }
        router.post("/ssf/token") { request, _ in
            let body = try await request.body.collect(upTo: 64 * 1024)
            return ssf.token(form: FormEncoding.decode(String(buffer: body)), authorization: request.headers[.authorization])
        }
        router.post("/ssf/streams") { request, _ in
            try await ssf.authorized(request) { try await ssf.create(request, issuer: self.sharedSignalsIssuer) }
        }
        router.get("/ssf/streams") { request, _ in
            try await ssf.authorized(request) { ssf.read(request, issuer: self.sharedSignalsIssuer) }
        }
        router.patch("/ssf/streams") { request, _ in
            try await ssf.authorized(request) { try await ssf.change(request, issuer: self.sharedSignalsIssuer, replace: false) }
        }
        router.put("/ssf/streams") { request, _ in
            try await ssf.authorized(request) { try await ssf.change(request, issuer: self.sharedSignalsIssuer, replace: true) }
        }
        router.delete("/ssf/streams") { request, _ in
            try await ssf.authorized(request) { ssf.delete(request) }
        }
        router.post("/ssf/verify") { request, _ in
            try await ssf.authorized(request) { try await ssf.verify(request, issuer: self.sharedSignalsIssuer, client: self.httpClient) }
        }
        // Tests: sign an event for the stream and push it as the stream's delivery says.
        router.post("/dev/ssf/send") { request, _ in
            guard let body = try await DevSharedSignals.body(request)?.objectValue else { return DevSharedSignals.failure(.badRequest) }
            return try await ssf.send(body, issuer: self.sharedSignalsIssuer, client: self.httpClient)
        }
        // §8.1.3: subjects, `{"stream_id", "subject"}`; 200, or 404 for another stream.
        router.post("/ssf/subjects:add") { request, _ in
            try await ssf.authorized(request) { try await ssf.subject(request, add: true) }
        }
        router.post("/ssf/subjects:remove") { request, _ in
            try await ssf.authorized(request) { try await ssf.subject(request, add: false) }
        }
        router.get("/ssf/status") { request, _ in
            try await ssf.authorized(request) { try await ssf.status(request) }
        }
        router.post("/ssf/status") { request, _ in
            try await ssf.authorized(request) {
                try await ssf.setStatus(request, issuer: self.sharedSignalsIssuer, client: self.httpClient)
            }
        }
        // RFC 8936: the stream's poll URL (from its configuration).
        router.post("/ssf/poll/:id") { request, context in
            try await ssf.authorized(request) { try await ssf.poll(request, streamID: context.parameters.get("id") ?? "") }
        }
        // Benchmarks: `?count=N&first=F`: N CAEP session-revoked SETs about the Google users load-user-F.., signed and queued
        // for the poll stream at once.
        router.post("/dev/ssf/queue-batch") { request, _ in
            guard let count = request.uri.queryParameters.get("count").flatMap({ Int(String($0)) }), (1...1_000_000).contains(count) else {
                throw HTTPError(.badRequest, message: "count must be 1...1000000")
            }
            let first = request.uri.queryParameters.get("first").flatMap { Int(String($0)) } ?? 0
            try await ssf.queueBatch(count: count, first: first, issuer: self.sharedSignalsIssuer)
            return Self.json(["queued": .number(Double(count))])
        }
        // Tests: polls answered 503 (`?refuse=true`), or once a poll has returned SETs (`?refuse_after_delivery=true`), or
        // served again; how long an empty poll is held (`long_poll=SECONDS`).
        router.post("/dev/ssf/poll-control") { request, _ in
            let refuse = request.uri.queryParameters.get("refuse") == "true"
            let hold = request.uri.queryParameters.get("long_poll").flatMap { Double(String($0)) }
            ssf.state.withLock { state in
                state.refusePolls = refuse
                state.refuseAfterDelivery = request.uri.queryParameters.get("refuse_after_delivery") == "true"
                if let hold { state.longPoll = hold }
            }
            return Self.json(["refuse": .bool(refuse)])
        }
        // Tests: the transmitter changes the stream's status itself, and says so with a stream-updated event
        // (`?status=paused&reason=...`), or silently (`&announce=false`).
        router.post("/dev/ssf/status") { request, _ in
            guard let status = request.uri.queryParameters.get("status").map({ String($0) }), ["enabled", "paused", "disabled"].contains(status)
            else { return DevSharedSignals.failure(.badRequest) }
            let reason = request.uri.queryParameters.get("reason").map { String($0) }
            let announce = request.uri.queryParameters.get("announce") != "false"
            guard
                let stream = try await ssf.changeStatus(
                    to: status, reason: reason, issuer: self.sharedSignalsIssuer, client: self.httpClient, announce: announce)
            else { return DevSharedSignals.failure(.conflict) }
            return Self.json(DevSharedSignals.statusJSON(stream))
        }
        // Tests: the status endpoint answers a read this many seconds late, with the status it had when asked
        // (`?seconds=S`), and waits this long before it makes a change (`?change_seconds=S`).
        router.post("/dev/ssf/status-delay") { request, _ in
            func seconds(_ name: String) throws -> Double {
                let value = Double(request.uri.queryParameters.get(name) ?? "") ?? 0
                guard (0...60).contains(value) else { throw HTTPError(.badRequest, message: "\(name) must be 0...60") }
                return value
            }
            let (seconds, changeSeconds) = (try seconds("seconds"), try seconds("change_seconds"))
            ssf.state.withLock { ($0.statusReadDelay, $0.statusChangeDelay) = (seconds, changeSeconds) }
            return Self.json(["seconds": .number(seconds), "change_seconds": .number(changeSeconds)])
        }
        // Control endpoints for tests: how long new access tokens live.
        router.post("/dev/ssf/token-lifetime") { request, _ in
            let seconds = Double(request.uri.queryParameters.get("seconds") ?? "") ?? 3600
            ssf.state.withLock { $0.tokenLifetime = seconds }
            return Self.json(["seconds": .number(seconds)])
        }
        router.post("/dev/ssf/foreign-issuer") { request, _ in
            let issuer = request.uri.queryParameters.get("iss").map { String($0) }
            ssf.state.withLock { $0.foreignIssuer = issuer }
            return Self.json(["iss": issuer.map(JSONValue.string) ?? .null])
        }
        router.post("/dev/ssf/metadata-issuer") { request, _ in
            let issuer = request.uri.queryParameters.get("iss").map { String($0) }
            ssf.state.withLock { $0.metadataIssuer = issuer }
            return Self.json(["iss": issuer.map(JSONValue.string) ?? .null])
        }
        router.get("/dev/ssf/state") { _, _ in
            let state = ssf.state.withLock { $0 }
            return Self.json([
                "stream_id": state.stream.map { .string($0.id) } ?? .null, "status": state.stream.map { .string($0.status) } ?? .null,
                "events_requested": .array((state.stream?.eventsRequested ?? []).map(JSONValue.string)),
                "deleted": .array(state.deletedStreams.map(JSONValue.string)), "tokens_issued": .number(Double(state.accessTokens.count)),
                "subjects": .array(state.subjects), "queued": .array(state.queue.map { .string($0.jti) }),
                "acknowledged": .array(state.acknowledged.map(JSONValue.string)), "set_errors": .object(state.setErrors),
                "polls": .number(Double(state.polls)), "offered": .array(state.offered.map(JSONValue.string)),
                "queued_count": .number(Double(state.queue.count)), "acknowledged_count": .number(Double(state.acknowledged.count)),
                "status_calls_waiting": .number(Double(state.statusCallsWaiting)),
            ])
        }
    }
}

extension DevSharedSignals {
    /// RFC 6749 §4.4 with client_secret_basic (§2.3.1: the id and secret form-encoded, then Basic) or client_secret_post.
    func token(form: [String: String], authorization: String?) -> Response {
        guard form["grant_type"] == "client_credentials" else { return Self.oauthError(.badRequest, "unsupported_grant_type") }
        var client: (id: String, secret: String)?
        if let authorization, authorization.lowercased().hasPrefix("basic "),
            let decoded = Data(base64Encoded: String(authorization.dropFirst(6))).map({ String(decoding: $0, as: UTF8.self) }),
            let colon = decoded.firstIndex(of: ":")
        {
            let id = String(decoded[..<colon]).removingPercentEncoding ?? ""
            let secret = String(decoded[decoded.index(after: colon)...]).removingPercentEncoding ?? ""
            client = (id, secret)
        } else if let id = form["client_id"], let secret = form["client_secret"] {
            client = (id, secret)
        }
        guard let client, client.id == Self.clientID, client.secret == Self.clientSecret else {
            return Self.oauthError(.unauthorized, "invalid_client")
        }
        let scopes = Set((form["scope"] ?? "").split(separator: " ").map(String.init))
        guard scopes.isSubset(of: ["ssf.read", "ssf.manage"]) else { return Self.oauthError(.badRequest, "invalid_scope") }
        let token = Self.random()
        let lifetime = state.withLock { state in
            state.accessTokens[token] = Date().addingTimeInterval(state.tokenLifetime)
            return state.tokenLifetime
        }
        var response = DevTransmitter.json([
            "access_token": .string(token), "token_type": "Bearer", "expires_in": .number(lifetime.rounded(.down)),
        ])
        response.headers[.cacheControl] = "no-store"
        return response
    }

    static func oauthError(_ status: HTTPResponse.Status, _ error: String) -> Response {
        var response = DevTransmitter.json(["error": .string(error)])
        response.status = status
        return response
    }

    /// A stream endpoint answers 401 without a live access token.
    func authorized(_ request: Request, _ handler: () async throws -> Response) async throws -> Response {
        guard let header = request.headers[.authorization], header.hasPrefix("Bearer ") else { return Response(status: .unauthorized) }
        let token = String(header.dropFirst("Bearer ".count))
        let live = state.withLock { state in (state.accessTokens[token] ?? .distantPast) > Date() }
        guard live else { return Response(status: .unauthorized) }
        return try await handler()
    }

    static func body(_ request: Request) async throws -> JSONValue? {
        let body = try await request.body.collect(upTo: 64 * 1024)
        return try? JSONValue.parse(Array(buffer: body))
    }

    func configuration(_ stream: Stream, issuer: String) -> JSONValue {
        var delivery = stream.delivery.objectValue ?? [:]
        if delivery["method"]?.stringValue == DeliveryMethod.poll.urn {
            delivery["endpoint_url"] = .string(issuer + "/poll/" + stream.id)
        }
        let delivered = stream.eventsRequested.filter(Self.eventsSupported.contains)
        let issuer = state.withLock { $0.foreignIssuer } ?? issuer
        var configuration: [String: JSONValue] = [
            "stream_id": .string(stream.id), "iss": .string(issuer), "aud": .string(stream.audience),
            "delivery": .object(delivery), "events_supported": .array(Self.eventsSupported.map(JSONValue.string)),
            "events_requested": .array(stream.eventsRequested.map(JSONValue.string)), "events_delivered": .array(delivered.map(JSONValue.string)),
            "min_verification_interval": 10,
        ]
        if let description = stream.description { configuration["description"] = .string(description) }
        return .object(configuration)
    }

    /// SSF 1.0 §8.1.1.1: the receiver's fields only; one stream per receiver (409 when it has one).
    func create(_ request: Request, issuer: String) async throws -> Response {
        guard let body = try await Self.body(request)?.objectValue, let delivery = body["delivery"]?.objectValue,
            let method = delivery["method"]?.stringValue, DeliveryMethod(urn: method) != nil
        else { return Self.failure(.badRequest) }
        for field in ["stream_id", "iss", "aud", "events_supported", "events_delivered", "min_verification_interval", "inactivity_timeout"]
        where body[field] != nil {
            return Self.failure(.badRequest)
        }
        if method == DeliveryMethod.push.urn {
            guard let url = delivery["endpoint_url"]?.stringValue, URL(string: url)?.host != nil else { return Self.failure(.badRequest) }
        }
        let stream = Stream(
            id: Self.random(), audience: "https://receiver.example/" + Self.random(), delivery: .object(delivery),
            eventsRequested: body["events_requested"]?.arrayValue?.compactMap(\.stringValue) ?? [],
            description: body["description"]?.stringValue)
        let created = state.withLock { state -> Bool in
            guard state.stream == nil else { return false }
            state.stream = stream
            return true
        }
        guard created else { return Self.failure(.conflict) }
        var response = DevTransmitter.json(configuration(stream, issuer: issuer))
        response.status = .created
        return response
    }

    /// §8.1.1.2: with `stream_id`, that stream (404 if unknown); without, the list.
    func read(_ request: Request, issuer: String) -> Response {
        let stream = state.withLock { $0.stream }
        if let id = request.uri.queryParameters.get("stream_id") {
            guard let stream, stream.id == id else { return Self.failure(.notFound) }
            return DevTransmitter.json(configuration(stream, issuer: issuer))
        }
        return DevTransmitter.json(.array(stream.map { [configuration($0, issuer: issuer)] } ?? []))
    }

    /// §8.1.1.3 (PATCH: the fields given) and §8.1.1.4 (PUT: the whole receiver-supplied configuration).
    func change(_ request: Request, issuer: String, replace: Bool) async throws -> Response {
        guard let body = try await Self.body(request)?.objectValue, let id = body["stream_id"]?.stringValue else {
            return Self.failure(.badRequest)
        }
        if replace, body["delivery"] == nil { return Self.failure(.badRequest) }
        let updated = state.withLock { state -> Stream? in
            guard var stream = state.stream, stream.id == id else { return nil }
            if let delivery = body["delivery"], delivery.objectValue != nil { stream.delivery = delivery }
            if let events = body["events_requested"]?.arrayValue {
                stream.eventsRequested = events.compactMap(\.stringValue)
            } else if replace {
                stream.eventsRequested = []
            }
            if let description = body["description"]?.stringValue { stream.description = description }
            state.stream = stream
            return stream
        }
        guard let updated else { return Self.failure(.notFound) }
        return DevTransmitter.json(configuration(updated, issuer: issuer))
    }

    /// §8.1.1.5: 204, or 404 for a stream it does not have.
    func delete(_ request: Request) -> Response {
        let id = request.uri.queryParameters.get("stream_id")
        let deleted = state.withLock { state -> Bool in
            guard let stream = state.stream, stream.id == id else { return false }
            state.stream = nil
            state.deletedStreams.append(stream.id)
            // A deleted stream's events go with it.
            (state.queue, state.held) = ([], [])
            return true
        }
        return Response(status: deleted ? .noContent : .notFound)
    }

    /// §8.1.2.1: `{"stream_id", "status", "reason"?}`.
    func status(_ request: Request) async throws -> Response {
        let id = request.uri.queryParameters.get("stream_id")
        let (stream, delay) = state.withLock { state in
            if state.statusReadDelay > 0 { state.statusCallsWaiting += 1 }
            return (state.stream, state.statusReadDelay)
        }
        if delay > 0 {
            defer { state.withLock { $0.statusCallsWaiting -= 1 } }
            try await Task.sleep(for: .seconds(delay))
        }
        guard let stream, stream.id == id else { return Self.failure(.notFound) }
        return DevTransmitter.json(Self.statusJSON(stream))
    }

    /// §8.1.2.2: the receiver sets `enabled`, `paused` or `disabled`, with a reason.
    func setStatus(_ request: Request, issuer: String, client: HTTPClient) async throws -> Response {
        guard let body = try await Self.body(request)?.objectValue, let id = body["stream_id"]?.stringValue,
            let status = body["status"]?.stringValue, ["enabled", "paused", "disabled"].contains(status)
        else { return Self.failure(.badRequest) }
        let delay = state.withLock { state in
            if state.statusChangeDelay > 0 { state.statusCallsWaiting += 1 }
            return state.statusChangeDelay
        }
        if delay > 0 {
            defer { state.withLock { $0.statusCallsWaiting -= 1 } }
            try await Task.sleep(for: .seconds(delay))
        }
        guard state.withLock({ $0.stream?.id }) == id,
            let updated = try await changeStatus(to: status, reason: body["reason"]?.stringValue, issuer: issuer, client: client, announce: false)
        else { return Self.failure(.notFound) }
        return DevTransmitter.json(Self.statusJSON(updated))
    }

    /// The stream's new status (§8.1.1.2): paused, events are held; enabled again, they are delivered in order; disabled,
    /// they are dropped. `announce`: the transmitter changed it, and pushes a stream-updated event saying so (§8.1.5).
    func changeStatus(to status: String, reason: String?, issuer: String, client: HTTPClient, announce: Bool = true) async throws -> Stream? {
        let (updated, released) = state.withLock { state -> (Stream?, [JSONValue]) in
            guard var stream = state.stream else { return (nil, []) }
            (stream.status, stream.reason) = (status, reason)
            state.stream = stream
            let released = status == "paused" ? [] : state.held
            if status != "paused" { state.held = [] }
            return (stream, status == "enabled" ? released : [])
        }
        guard let updated else { return nil }
        if announce {
            var event: [String: JSONValue] = ["status": .string(status)]
            if let reason { event["reason"] = .string(reason) }
            let claims = claims(
                updated, issuer: issuer, type: EventType.ssfStreamUpdated.rawValue, event: event,
                subject: ["format": "opaque", "id": .string(updated.id)])
            _ = try await deliver(claims, to: updated, client: client)
        }
        for claims in released { _ = try await deliver(claims, to: updated, client: client) }
        return updated
    }

    /// Whether the stream holds `claims` (it is paused): then they are kept to deliver later.
    func holding(_ claims: JSONValue) -> Bool {
        state.withLock { state in
            guard state.stream?.status == "paused" else { return false }
            state.held.append(claims)
            return true
        }
    }

    static func statusJSON(_ stream: Stream) -> JSONValue {
        var json: [String: JSONValue] = ["stream_id": .string(stream.id), "status": .string(stream.status)]
        if let reason = stream.reason { json["reason"] = .string(reason) }
        return .object(json)
    }

    static func failure(_ status: HTTPResponse.Status) -> Response { Response(status: status) }

    func subject(_ request: Request, add: Bool) async throws -> Response {
        guard let body = try await Self.body(request)?.objectValue, let id = body["stream_id"]?.stringValue,
            let subject = body["subject"], subject["format"]?.stringValue != nil
        else { return Self.failure(.badRequest) }
        let found = state.withLock { state -> Bool in
            guard state.stream?.id == id else { return false }
            if add {
                if !state.subjects.contains(subject) { state.subjects.append(subject) }
            } else {
                state.subjects.removeAll { $0 == subject }
            }
            return true
        }
        return Response(status: found ? .ok : .notFound)
    }

    /// §8.1.4: 204 at once; the verification event follows on the stream, carrying the state (when given).
    func verify(_ request: Request, issuer: String, client: HTTPClient) async throws -> Response {
        guard let body = try await Self.body(request)?.objectValue, let id = body["stream_id"]?.stringValue else {
            return Self.failure(.badRequest)
        }
        guard let stream = state.withLock({ $0.stream }), stream.id == id else { return Self.failure(.notFound) }
        state.withLock { $0.verificationStates.append(body["state"]?.stringValue ?? "") }
        var event: [String: JSONValue] = [:]
        if let state = body["state"]?.stringValue { event["state"] = .string(state) }
        let claims = claims(
            stream, issuer: issuer, type: EventType.ssfVerification.rawValue, event: event, subject: ["format": "opaque", "id": .string(id)])
        // Held behind the events queued while the stream is paused, like any other event.
        if !holding(claims) { Task { _ = try? await self.deliver(claims, to: stream, client: client) } }
        return Response(status: .noContent)
    }

    func claims(_ stream: Stream, issuer: String, type: String, event: [String: JSONValue], subject: JSONValue) -> JSONValue {
        [
            "iss": .string(issuer), "aud": .string(stream.audience), "iat": .number(Date().timeIntervalSince1970.rounded(.down)),
            "jti": .string(Self.random()), "sub_id": subject, "events": .object([type: .object(event)]),
        ]
    }

    func sign(_ claims: JSONValue, typ: String? = "secevent+jwt", kid: String? = nil, badSignature: Bool = false) async throws -> String {
        let token = try await keys.sign(claims: claims, typ: typ, kid: kid)
        guard badSignature else { return token }
        // Another signature of the same length: the key's, over other bytes.
        let other = try await keys.sign(claims: ["other": true], typ: typ, kid: kid)
        return token.split(separator: ".").prefix(2).joined(separator: ".") + "." + (other.split(separator: ".").last ?? "")
    }

    var isPoll: Bool { state.withLock { $0.stream?.delivery["method"]?.stringValue == DeliveryMethod.poll.urn } }

    /// As the stream's delivery says: pushed, or queued for the receiver's next poll.
    func deliver(_ claims: JSONValue, to stream: Stream, client: HTTPClient) async throws {
        if stream.delivery["method"]?.stringValue == DeliveryMethod.poll.urn {
            let token = try await sign(claims)
            state.withLock { $0.queue.append((claims["jti"]?.stringValue ?? "", token)) }
        } else {
            _ = try await push(claims, to: stream, client: client)
        }
    }

    /// Signs `count` session-revoked SETs about load-user-`first`.. on every core, and queues them in order.
    func queueBatch(count: Int, first: Int, issuer: String) async throws {
        guard let stream = state.withLock({ $0.stream }) else { throw HTTPError(.conflict, message: "no stream") }
        let workers = max(1, ProcessInfo.processInfo.activeProcessorCount)
        let signed = try await withThrowingTaskGroup(of: [(Int, String, String)].self) { group in
            for worker in 0..<workers {
                group.addTask {
                    var tokens: [(Int, String, String)] = []
                    for index in stride(from: worker, to: count, by: workers) {
                        let subject: JSONValue = [
                            "format": "iss_sub", "iss": "https://accounts.google.com", "sub": .string("load-user-\(first + index)"),
                        ]
                        let claims = self.claims(stream, issuer: issuer, type: EventType.caepSessionRevoked.rawValue, event: [:], subject: subject)
                        tokens.append((index, claims["jti"]?.stringValue ?? "", try await self.sign(claims)))
                    }
                    return tokens
                }
            }
            return try await group.reduce(into: []) { $0.append(contentsOf: $1) }.sorted { $0.0 < $1.0 }
        }
        state.withLock { $0.queue.append(contentsOf: signed.map { ($0.1, $0.2) }) }
    }

    /// RFC 8936 §2.4: takes the acknowledgements and errors, then answers the SETs queued (at most `maxEvents`),
    /// holding the request open while there are none, unless `returnImmediately`.
    func poll(_ request: Request, streamID: String) async throws -> Response {
        guard let body = try await Self.body(request)?.objectValue else { return Self.failure(.badRequest) }
        guard state.withLock({ $0.stream?.id }) == streamID else { return Self.failure(.notFound) }
        let refused = state.withLock { state -> Bool in
            state.polls += 1
            guard !state.refusePolls else { return true }
            let acknowledged = Set((body["ack"]?.arrayValue ?? []).compactMap(\.stringValue))
            let errors = body["setErrs"]?.objectValue ?? [:]
            state.acknowledged += acknowledged.sorted()
            state.setErrors.merge(errors) { _, new in new }
            state.queue.removeAll { acknowledged.contains($0.jti) || errors[$0.jti] != nil }
            return false
        }
        if refused { return Self.failure(.serviceUnavailable) }
        var maxEvents = 100
        if case .number(let asked)? = body["maxEvents"], asked >= 0, asked <= 100_000 { maxEvents = Int(asked) }
        let deadline = Date().addingTimeInterval(body["returnImmediately"] == true ? 0 : state.withLock { $0.longPoll })
        while true {
            let answer = state.withLock { state -> (sets: [(jti: String, token: String)], more: Bool)? in
                // Deleted while this poll was held: the stream's events are gone with it.
                guard state.stream?.id == streamID else { return nil }
                let sets = Array(state.queue.prefix(maxEvents))
                if !sets.isEmpty {
                    state.offered += sets.map(\.jti)
                    if state.refuseAfterDelivery { state.refusePolls = true }
                }
                return (sets, state.queue.count > maxEvents)
            }
            guard let (sets, more) = answer else { return Self.failure(.notFound) }
            if !sets.isEmpty || Date() >= deadline {
                return DevTransmitter.json([
                    "sets": .object(Dictionary(sets.map { ($0.jti, JSONValue.string($0.token)) }) { first, _ in first }),
                    "moreAvailable": .bool(more),
                ])
            }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    /// Signs and pushes as RFC 8935 says, with the stream's authorization header exactly as the receiver gave it.
    func push(
        _ claims: JSONValue, to stream: Stream, client: HTTPClient, authorization: String? = nil, typ: String? = "secevent+jwt", kid: String? = nil,
        badSignature: Bool = false
    ) async throws -> (status: Int, body: String) {
        guard let url = stream.delivery["endpoint_url"]?.stringValue else { throw HTTPError(.conflict, message: "the stream is not a push stream") }
        let token = try await sign(claims, typ: typ, kid: kid, badSignature: badSignature)
        var post = HTTPClientRequest(url: url)
        post.method = .POST
        post.headers.add(name: "Content-Type", value: "application/secevent+jwt")
        post.headers.add(name: "Accept", value: "application/json")
        if let header = authorization ?? stream.delivery["authorization_header"]?.stringValue, !header.isEmpty {
            post.headers.add(name: "Authorization", value: header)
        }
        post.body = .bytes(ByteBuffer(string: token))
        let response = try await client.execute(post, timeout: .seconds(30))
        let body = try await response.body.collect(upTo: 1 << 20)
        return (Int(response.status.code), String(buffer: body))
    }

    /// `{"type": short name or URI, "sub_id": {...}?, "event": {...}?, "aud"?, "iss"?, "jti"?, "typ"?, "kid"?, "authorization"?,
    /// "bad_signature"?}`: one
    /// event for the stream; what a test needs to change is named. Answers `{"status", "body", "jti"}`; while the
    /// stream is paused, `{"status": 0, "held": true, "jti"}` (the event goes out when it is enabled again).
    func send(_ body: [String: JSONValue], issuer: String, client: HTTPClient) async throws -> Response {
        guard var stream = state.withLock({ $0.stream }) else { throw HTTPError(.conflict, message: "no stream") }
        guard let name = body["type"]?.stringValue else { throw HTTPError(.badRequest, message: "type is required") }
        let type = EventType(uriOrShortName: name)?.rawValue ?? name
        if let audience = body["aud"]?.stringValue { stream.audience = audience }
        var claims = claims(
            stream, issuer: body["iss"]?.stringValue ?? issuer, type: type, event: body["event"]?.objectValue ?? [:],
            subject: body["sub_id"] ?? ["format": "opaque", "id": .string(stream.id)])
        if let jti = body["jti"]?.stringValue, var object = claims.objectValue {
            object["jti"] = .string(jti)
            claims = .object(object)
        }
        if holding(claims) { return DevTransmitter.json(["status": 0, "held": true, "jti": claims["jti"] ?? .null]) }
        let typ = body["typ"].map { $0 == .null ? nil : $0.stringValue } ?? "secevent+jwt"
        if isPoll {
            // Queued for the receiver's poll; unless `"wait": false`, answered as a push would have been once the receiver
            // acknowledged it (202) or reported it (400 and its error), or `{"status": 0, "queued": true}` after 30 s.
            let jti = claims["jti"]?.stringValue ?? ""
            let token = try await sign(claims, typ: typ, kid: body["kid"]?.stringValue, badSignature: body["bad_signature"] == true)
            state.withLock { $0.queue.append((jti, token)) }
            let deadline = Date().addingTimeInterval(body["wait"] == false ? 0 : 30)
            while Date() < deadline {
                let (acknowledged, error) = state.withLock { ($0.acknowledged.contains(jti), $0.setErrors[jti]) }
                if acknowledged { return DevTransmitter.json(["status": 202, "body": "", "jti": .string(jti)]) }
                if let error { return DevTransmitter.json(["status": 400, "body": .string(error.serialized), "jti": .string(jti)]) }
                try await Task.sleep(for: .milliseconds(20))
            }
            return DevTransmitter.json(["status": 0, "queued": true, "jti": .string(jti)])
        }
        let (status, answer) = try await push(
            claims, to: stream, client: client, authorization: body["authorization"]?.stringValue, typ: typ, kid: body["kid"]?.stringValue,
            badSignature: body["bad_signature"] == true)
        return DevTransmitter.json(["status": .number(Double(status)), "body": .string(answer), "jti": claims["jti"] ?? .null])
    }
}
