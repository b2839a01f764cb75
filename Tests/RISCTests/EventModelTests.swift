import Foundation
import RISC
import Testing

@Suite("Event types and subjects")
struct EventModelTests {
    typealias T = TestTokens
    static let legacySubject: JSONValue = ["subject_type": "iss-sub", "iss": "https://accounts.google.com/", "sub": "user-1"]

    @Test("Every known event type decodes in Google's legacy form", arguments: EventType.allCases)
    func legacyForm(_ type: EventType) throws {
        var body: [String: JSONValue] = ["subject": Self.legacySubject]
        if type == .accountDisabled { body["reason"] = "bulk-account" }
        if type == .verification || type == .ssfVerification { body = ["state": "s-1"] }
        let token = try T.parse(T.compact(claims: T.claims(events: [type.rawValue: .object(body)])))
        let event = try #require(token.primaryEvent)
        #expect(event.type == type)
        #expect(event.typeURI == type.rawValue)
        #expect(!token.isIgnored)
        switch type {
        case .verification, .ssfVerification:
            #expect(event.state == "s-1")
            #expect(event.subject == nil)
        case .accountDisabled:
            #expect(event.reason == "bulk-account")
            #expect(event.subject?.googleSubject == "user-1")
        default:
            #expect(event.subject == .issuerAndSubject(iss: "https://accounts.google.com/", sub: "user-1"))
        }
    }

    @Test("The Shared Signals form: a top-level sub_id with format iss_sub")
    func sharedSignalsForm() throws {
        let claims = T.claims(events: [EventType.caepSessionRevoked.rawValue: ["event_timestamp": 1_700_000_000]]) {
            $0["sub_id"] = ["format": "iss_sub", "iss": "https://accounts.google.com", "sub": "user-2"]
        }
        let token = try T.parse(T.compact(claims: claims))
        #expect(token.primaryEvent?.type == .caepSessionRevoked)
        #expect(token.primaryEvent?.subject?.googleSubject == "user-2")
    }

    @Test(
        "Subject formats",
        arguments: [
            (
                ["subject_type": "id_token_claims", "iss": "i", "sub": "s", "email": "a@b.c"] as JSONValue,
                Subject.idTokenClaims(iss: "i", sub: "s", email: "a@b.c")
            ),
            (["format": "iss_sub", "iss": "i", "sub": "s"], .issuerAndSubject(iss: "i", sub: "s")),
            (["format": "email", "email": "a@b.c"], .email("a@b.c")),
            (["format": "opaque", "id": "x"], .opaque("x")),
            (["format": "complex", "user": ["format": "email"]], .complex(members: ["user": .unrecognized(format: "email")])),
            (["subject_type": "iss-sub", "iss": "i"], .unrecognized(format: "iss-sub")),
        ] as [(JSONValue, Subject)])
    func subjects(_ json: JSONValue, _ expected: Subject) {
        #expect(Subject(json: json) == expected)
    }

    @Test("Email alone never names a user")
    func emailIsNotASubject() {
        #expect(Subject.email("a@b.c").googleSubject == nil)
        #expect(Subject.opaque("x").googleSubject == nil)
    }

    @Test("token-revoked carries an oauth_token subject")
    func oauthTokenSubject() throws {
        let body: JSONValue = [
            "subject": [
                "subject_type": "oauth_token", "token_type": "refresh_token", "token_identifier_alg": "prefix",
                "token": "1//0gLx4mZ9bQhTQ",
            ]
        ]
        let token = try T.parse(T.compact(claims: T.claims(events: [EventType.tokenRevoked.rawValue: body])))
        #expect(token.primaryEvent?.subject == .oauthToken(tokenType: "refresh_token", identifier: .prefix("1//0gLx4mZ9bQhTQ")))
    }

    @Test("Unknown event types are kept and the SET is marked ignored")
    func unknownType() throws {
        let token = try T.parse(T.compact(claims: T.claims(events: ["https://example.com/event/x": [:]])))
        #expect(token.isIgnored)
        #expect(token.events.first?.type == nil)
        #expect(token.events.first?.shortName == "unknown")
    }

    @Test("A known type next to an unknown one decides what the SET does")
    func mixed() throws {
        let token = try T.parse(
            T.compact(
                claims: T.claims(events: [
                    "https://example.com/event/x": [:], EventType.sessionsRevoked.rawValue: ["subject": Self.legacySubject],
                ])))
        #expect(!token.isIgnored)
        #expect(token.primaryEvent?.type == .sessionsRevoked)
        #expect(token.events.count == 2)
    }

    @Test("Short names are unique and resolve back to their type")
    func shortNames() {
        #expect(Set(EventType.allCases.map(\.shortName)).count == EventType.allCases.count)
        for type in EventType.allCases {
            #expect(EventType(uriOrShortName: type.shortName) == type)
            #expect(EventType(uriOrShortName: type.rawValue) == type)
        }
        #expect(EventType.sessionsRevoked.shortName == "sessions-revoked")
        #expect(EventType(uriOrShortName: "nope") == nil)
    }

    @Test("The decoded event round-trips through its stored JSON: the worker reads what the inbox wrote")
    func storedForm() throws {
        let subjects: [Subject?] = [
            nil, .issuerAndSubject(iss: "https://accounts.google.com", sub: "1"),
            .idTokenClaims(iss: "https://accounts.google.com", sub: "2", email: "a@example.com"),
            .idTokenClaims(iss: "accounts.google.com", sub: "3", email: nil),
            .oauthToken(tokenType: "refresh_token", identifier: .doubleSHA512(Data(repeating: 7, count: 64))),
            .oauthToken(tokenType: nil, identifier: .prefix("1//0abcdefghijkl")), .email("a@example.com"), .opaque("x"),
            .complex(members: [:]), .complex(members: ["user": .email("a@example.com"), "tenant": .opaque("t")]),
            .unrecognized(format: nil),
        ]
        var events = subjects.map { SecurityEvent(typeURI: EventType.tokensRevoked.rawValue, type: .tokensRevoked, subject: $0) }
        events.append(SecurityEvent(typeURI: EventType.accountDisabled.rawValue, type: .accountDisabled, subject: subjects[1], reason: "hijacking"))
        events.append(SecurityEvent(typeURI: EventType.verification.rawValue, type: .verification, subject: nil, state: "s"))
        events.append(SecurityEvent(typeURI: "https://example.com/unknown", type: nil, subject: subjects[1]))
        events.append(
            SecurityEvent(
                typeURI: EventType.ssfStreamUpdated.rawValue, type: .ssfStreamUpdated, subject: .opaque("s"), reason: "why",
                status: "paused"))
        let stored = JSONValue.array(events.map(\.jsonValue)).serialized
        #expect(SecurityEvent.stored(Array(stored.utf8)) == events)
        #expect(SecurityEvent.stored(Array(#"[{"name": "no type"}]"#.utf8)) == nil)
    }
}
