import Foundation
import RISC
import Testing

@Suite("Shared Signals: names, metadata, stream configurations and stream events")
struct SharedSignalsTests {
    typealias T = TestTokens

    @Test("A transmitter's name is 1-40 of a-z, 0-9 and -, and never google")
    func names() throws {
        #expect(try TransmitterName("okta-prod-2").value == "okta-prod-2")
        #expect(try TransmitterName(String(repeating: "a", count: 40)).value.count == 40)
        for bad in ["", String(repeating: "a", count: 41), "Okta", "okta_prod", "okta prod", "ökta", "google"] {
            #expect(throws: InvalidParameter.self, "\(bad)") { try TransmitterName(bad) }
        }
        #expect(try TransmitterName(naming: "google") == .google)
    }

    @Test(
        "A well-known name goes between the host and the issuer's path",
        arguments: [
            ("https://h.example/t/a", "https://h.example/.well-known/ssf-configuration/t/a"),
            ("https://h.example/t/a/", "https://h.example/.well-known/ssf-configuration/t/a"),
            ("https://h.example", "https://h.example/.well-known/ssf-configuration"),
            ("https://h.example/", "https://h.example/.well-known/ssf-configuration"),
            ("http://127.0.0.1:8443/realms/x", "http://127.0.0.1:8443/.well-known/ssf-configuration/realms/x"),
        ])
    func wellKnown(_ issuer: String, _ expected: String) {
        #expect(WellKnownURL.inserting(WellKnownURL.sharedSignals, into: issuer) == expected)
    }

    @Test("An issuer with a query, a fragment or no host has no well-known URL; OpenID's is appended")
    func wellKnownRefused() {
        for issuer in ["https://h.example/t?x=1", "https://h.example/t#f", "/t/a", "not a url"] {
            #expect(WellKnownURL.inserting(WellKnownURL.sharedSignals, into: issuer) == nil, "\(issuer)")
        }
        #expect(WellKnownURL.openIDConfiguration(of: "https://h.example/t/") == "https://h.example/t/.well-known/openid-configuration")
        #expect(
            WellKnownURL.inserting(WellKnownURL.oauthAuthorizationServer, into: "https://h.example/t")
                == "https://h.example/.well-known/oauth-authorization-server/t")
    }

    static let metadata: JSONValue = [
        "issuer": "https://ssf.example/t", "jwks_uri": "https://ssf.example/t/jwks",
        "delivery_methods_supported": ["urn:ietf:rfc:8935", "urn:ietf:rfc:8936", "urn:example:other"],
        "configuration_endpoint": "https://ssf.example/t/streams", "status_endpoint": "https://ssf.example/t/status",
        "verification_endpoint": "https://ssf.example/t/verify", "critical_subject_members": ["tenant"],
        "spec_version": "1_0",
    ]

    @Test("Metadata is read, its issuer must be the one named, and every endpoint must be https")
    func metadataChecks() throws {
        let metadata = try TransmitterMetadata(json: Array(Self.metadata.serialized.utf8), expectedIssuer: "https://ssf.example/t")
        #expect(metadata.deliveryMethods == [.push, .poll])
        #expect(metadata.configurationEndpoint == "https://ssf.example/t/streams")
        #expect(metadata.criticalSubjectMembers == ["tenant"])
        #expect(metadata.addSubjectEndpoint == nil)
        // A trailing slash is another issuer.
        #expect(throws: InvalidParameter.self) {
            try TransmitterMetadata(json: Array(Self.metadata.serialized.utf8), expectedIssuer: "https://ssf.example/t/")
        }
        var plain = Self.metadata.objectValue!
        plain["jwks_uri"] = "http://ssf.example/t/jwks"
        #expect(throws: InvalidParameter.self) {
            try TransmitterMetadata(json: Array(JSONValue.object(plain).serialized.utf8), expectedIssuer: "https://ssf.example/t")
        }
        plain = Self.metadata.objectValue!
        plain["delivery_methods_supported"] = nil
        let risc = try TransmitterMetadata(json: Array(JSONValue.object(plain).serialized.utf8), expectedIssuer: "https://ssf.example/t")
        #expect(risc.deliveryMethods == [.push])
        #expect(throws: InvalidParameter.self) { try TransmitterMetadata(json: Array("[]".utf8), expectedIssuer: "https://ssf.example/t") }
        // A transmitter elsewhere may not point the service at this machine, or at a metadata service.
        for jwks in ["http://127.0.0.1:9/jwks", "https://localhost/jwks", "https://169.254.169.254/jwks"] {
            var pointed = Self.metadata.objectValue!
            pointed["jwks_uri"] = .string(jwks)
            #expect(throws: InvalidParameter.self, "\(jwks)") {
                try TransmitterMetadata(json: Array(JSONValue.object(pointed).serialized.utf8), expectedIssuer: "https://ssf.example/t")
            }
        }
        // One on loopback may (the development transmitter).
        var local = Self.metadata.objectValue!
        (local["issuer"], local["jwks_uri"]) = ("http://127.0.0.1:9/t", "http://127.0.0.1:9/t/jwks")
        local["configuration_endpoint"] = nil
        #expect(throws: Never.self) {
            try TransmitterMetadata(json: Array(JSONValue.object(local).serialized.utf8), expectedIssuer: "http://127.0.0.1:9/t")
        }
    }

    @Test("A stream request carries only what a receiver sets")
    func streamRequest() {
        let push = StreamRequest(
            delivery: .push(endpointURL: "https://rx.example/ssf/okta/events", authorizationHeader: "Bearer s3cret"),
            eventsRequested: StreamRequest.defaultEventTypes)
        let json = push.json()
        #expect(json["delivery"]?["method"] == "urn:ietf:rfc:8935")
        #expect(json["delivery"]?["endpoint_url"] == "https://rx.example/ssf/okta/events")
        #expect(json["delivery"]?["authorization_header"] == "Bearer s3cret")
        for transmitterSet in ["stream_id", "iss", "aud", "events_supported", "events_delivered", "min_verification_interval"] {
            #expect(json[transmitterSet] == nil, "\(transmitterSet)")
        }
        #expect(json["events_requested"]?.arrayValue?.contains(.string(EventType.caepSessionRevoked.rawValue)) == true)
        #expect(json["events_requested"]?.arrayValue?.contains(.string(EventType.ssfVerification.rawValue)) == false)
        let poll = StreamRequest(delivery: .poll, eventsRequested: ["x"]).json(streamID: "s-1")
        #expect(poll["delivery"] == ["method": "urn:ietf:rfc:8936"])
        #expect(poll["stream_id"] == "s-1")
    }

    @Test("A stream configuration is read with aud as a string or a list; another issuer's is never used")
    func streamConfiguration() throws {
        var answer: [String: JSONValue] = [
            "stream_id": "s-1", "iss": "https://ssf.example/t", "aud": "https://rx.example",
            "events_delivered": [.string(EventType.caepSessionRevoked.rawValue)],
            "delivery": ["method": "urn:ietf:rfc:8936", "endpoint_url": "https://ssf.example/t/poll/s-1"],
            "min_verification_interval": 30,
        ]
        let stream = try StreamConfiguration(json: .object(answer), expectedIssuer: "https://ssf.example/t")
        #expect(stream.audience == ["https://rx.example"])
        #expect(stream.deliveryMethod == .poll && stream.endpointURL == "https://ssf.example/t/poll/s-1")
        #expect(stream.minVerificationInterval == 30)
        answer["aud"] = ["a", "b"]
        #expect(try StreamConfiguration(json: .object(answer), expectedIssuer: "https://ssf.example/t").audience == ["a", "b"])
        answer["iss"] = "https://evil.example/t"
        #expect(throws: StreamConfiguration.Problem.wrongIssuer(streamID: "s-1")) {
            try StreamConfiguration(json: .object(answer), expectedIssuer: "https://ssf.example/t")
        }
        answer["iss"] = nil
        #expect(throws: StreamConfiguration.Problem.wrongIssuer(streamID: "s-1")) {
            try StreamConfiguration(json: .object(answer), expectedIssuer: "https://ssf.example/t")
        }
        let listed = StreamConfiguration.list(
            json: [
                .object(answer.merging(["iss": "https://ssf.example/t", "stream_id": "mine"]) { $1 }),
                .object(answer.merging(["iss": "https://evil.example/t", "stream_id": "theirs"]) { $1 }),
            ], expectedIssuer: "https://ssf.example/t")
        #expect(listed.streams.map(\.streamID) == ["mine"])
        #expect(listed.foreign == ["theirs"])
    }

    @Test("A subject without format whose user member is a subject is read as complex (Okta's CAEP events)")
    func oktaComplexSubject() throws {
        let json = try JSONValue.parse(Data(#"{"user": {"format": "email", "email": "ann@example.com"}}"#.utf8))
        #expect(Subject(json: json) == .complex(members: ["user": .email("ann@example.com")]))
        #expect(Subject(json: json)?.email == "ann@example.com")
        #expect(Subject(json: try JSONValue.parse(Data(#"{"id": "x"}"#.utf8))) == .unrecognized(format: nil))
    }

    @Test("A complex subject's user is the user; a critical member not understood stops its actions")
    func complexSubjects() throws {
        let subject = try #require(
            Subject(json: [
                "format": "complex", "user": ["format": "email", "email": "Ann@Example.com"],
                "tenant": ["format": "opaque", "id": "t-1"],
            ]))
        #expect(subject.email == "Ann@Example.com")
        #expect(subject.unprocessedCriticalMembers(["tenant", "device"]) == ["tenant"])
        #expect(subject.unprocessedCriticalMembers(["user"]) == [])
        #expect(Subject.email("a@b.example").unprocessedCriticalMembers(["tenant"]) == [])
        let google = try #require(
            Subject(json: ["format": "complex", "user": ["format": "iss_sub", "iss": "https://accounts.google.com", "sub": "42"]]))
        #expect(google.googleSubject == "42")
        // The stored form reads back as the same subject.
        #expect(Subject(json: subject.jsonValue) == subject)
    }

    @Test("An oversized identifier inside a complex subject is refused like a top-level one")
    func complexSubjectBounds() {
        let long = String(repeating: "x", count: ClaimBounds.maxIdentifierBytes + 1)
        let token = T.compact(
            claims: T.claims(events: [EventType.caepSessionRevoked.rawValue: [:]]) {
                $0["sub_id"] = ["format": "complex", "user": ["format": "opaque", "id": .string(long)]]
            })
        #expect(T.rejection(token)?.code == .invalidRequest)
    }

    static func streamToken(events: JSONValue, subID: JSONValue, typ: String? = "secevent+jwt") throws -> SecurityEventToken {
        try T.parse(T.compact(header: T.header(typ: typ), claims: T.claims(events: events) { $0["sub_id"] = subID }))
    }

    @Test("A verification must name the stream; its state is handed back; typ must be secevent+jwt")
    func verificationRules() throws {
        let stream: JSONValue = ["format": "opaque", "id": "s-1"]
        let token = try Self.streamToken(events: [EventType.ssfVerification.rawValue: ["state": "abc"]], subID: stream)
        #expect(try StreamEventRules.checkVerifications(token, streamID: "s-1") == ["abc"])
        #expect(throws: SETRejection.invalidRequest("the verification event's sub_id is not this stream's")) {
            try StreamEventRules.checkVerifications(token, streamID: "s-2")
        }
        let stateless = try Self.streamToken(events: [EventType.ssfVerification.rawValue: [:]], subID: stream)
        #expect(try StreamEventRules.checkVerifications(stateless, streamID: "s-1") == [])
        try StreamEventRules.checkType(token.header)
        for typ in ["JWT", nil] {
            let other = try Self.streamToken(events: [EventType.ssfVerification.rawValue: [:]], subID: stream, typ: typ)
            #expect(throws: SETRejection.self) { try StreamEventRules.checkType(other.header) }
        }
    }

    @Test("stream-updated reports the stream's status and reason, and keeps them in the stored form")
    func streamUpdated() throws {
        let token = try Self.streamToken(
            events: [EventType.ssfStreamUpdated.rawValue: ["status": "paused", "reason": "maintenance"]],
            subID: ["format": "opaque", "id": "s-1"])
        #expect(StreamEventRules.reportedStatus(token, streamID: "s-1") == StreamStatus(state: .paused, reason: "maintenance"))
        #expect(StreamEventRules.reportedStatus(token, streamID: "s-2") == nil)
        let event = try #require(token.events.first)
        #expect(SecurityEvent(stored: event.jsonValue) == event)
        #expect(AccountAction.actions(for: event, audience: []).map(\.kind) == [.skip])
    }

    @Test("A transmitter may not take Google's issuer, nor point the service at this machine from elsewhere")
    func newTransmitterRefusals() throws {
        let secret = StreamAuthorization.clientCredentials(
            clientID: "c", method: .clientSecretBasic, secret: "s", scope: StreamAuthorization.defaultScope, tokenEndpoint: nil)
        for issuer in Subject.googleSignInIssuers where issuer.hasPrefix("https://") {
            #expect(throws: InvalidParameter.self, "\(issuer)") { try NewTransmitter(name: "g", issuer: issuer, authorization: secret) }
        }
        #expect(throws: InvalidParameter.self) {
            try NewTransmitter(name: "x", issuer: "https://ssf.example/t", configURL: "http://127.0.0.1:9/x", authorization: secret)
        }
        let local = StreamAuthorization.clientCredentials(
            clientID: "c", method: .clientSecretBasic, secret: "s", scope: "ssf.read", tokenEndpoint: "https://127.0.0.1/token")
        #expect(throws: InvalidParameter.self) { try NewTransmitter(name: "x", issuer: "https://ssf.example/t", authorization: local) }
        #expect(
            try NewTransmitter(name: "x", issuer: "http://127.0.0.1:9/t", configURL: "http://127.0.0.1:9/c", authorization: local).issuer
                == "http://127.0.0.1:9/t")
    }
}
