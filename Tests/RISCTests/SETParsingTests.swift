import Foundation
import RISC
import TestSupport
import Testing

@Suite("SET rejection rules")
struct SETRejectionTests {
    typealias T = TestTokens

    @Test("Google's own sample parses")
    func googleSample() throws {
        let token = try T.parse(T.compact())
        #expect(token.issuer == "https://accounts.google.com/")
        #expect(token.jti == "756E69717565206964656E746966696572")
        #expect(token.audience == [T.audience])
        #expect(token.events.count == 1)
        #expect(token.primaryEvent?.type == .accountDisabled)
        #expect(token.primaryEvent?.reason == "hijacking")
        #expect(token.primaryEvent?.subject?.googleSubject == "7375626A656374")
        #expect(token.header.kid == "key-1")
    }

    @Test(
        "Not a compact JWS is invalid_request",
        arguments: ["", "abc", "a.b", "a.b.c.d", "..", "eyJhbGciOiJSUzI1NiJ9..sig", "not base64!.e30.c2ln", "e30.e30.c2ln=="])
    func notCompact(_ body: String) {
        #expect(T.rejection(body)?.code == .invalidRequest)
    }

    @Test("A compact JWS is split at exactly two dots, and signs what precedes the second")
    func compactFraming() throws {
        let jws = try CompactJWS("e30.eyJhIjoxfQ.c2ln")
        #expect(jws.header == Data("{}".utf8))
        #expect(jws.payload == Data(#"{"a":1}"#.utf8))
        #expect(jws.signature == Data("sig".utf8))
        #expect(jws.signingInput == Data("e30.eyJhIjoxfQ".utf8))
        // An empty signature is framing (an unsecured JWS); an empty header or payload is not.
        #expect(try CompactJWS("e30.e30.").signature.isEmpty)
        for framing in ["", "e30", "e30.e30", ".e30.c2ln", "e30..c2ln", "e30.e30.c2ln.", "e30.e30.c2ln.c2ln", "..", "..."] {
            #expect(throws: CompactJWS.Malformed.notThreeSegments) { try CompactJWS(framing) }
        }
        for encoding in ["e3.e30.c2ln", "e30.e3!.c2ln", "e30.e30.c2l", "e30.e30.c2ln=", "ë30.e30.c2ln"] {
            #expect(throws: CompactJWS.Malformed.notBase64URL) { try CompactJWS(encoding) }
        }
    }

    @Test("Non-canonical base64url (unused low bits set) is invalid_request: a token has one spelling")
    func nonCanonicalBase64() {
        // "e30" and "e31" both decode to "{}"; only the first is canonical.
        #expect(Base64URL.decodeJWSSegment(Array("e30".utf8)) == Data("{}".utf8))
        #expect(Base64URL.decodeJWSSegment(Array("e31".utf8)) == nil)
        #expect(Base64URL.decodeJWSSegment(Array("eyI".utf8)) == Data("{\"".utf8))
        #expect(Base64URL.decodeJWSSegment(Array("eyJ".utf8)) == nil)
        #expect(Base64URL.decodeJWSSegment(Array("QQ".utf8)) == Data("A".utf8))
        #expect(Base64URL.decodeJWSSegment(Array("QR".utf8)) == nil)
        let token = T.compact()
        var parts = token.split(separator: ".").map(String.init)
        parts[2] = "c2lnbmF0dXJlcw"  // "signatures": 14 characters, canonical
        #expect(T.rejection(parts.joined(separator: "."))?.code != .invalidRequest)
        parts[2] = "c2lnbmF0dXJlcx"  // the same bytes, with an unused bit set
        #expect(T.rejection(parts.joined(separator: "."))?.code == .invalidRequest)
    }

    @Test("The JWS segment decoder agrees with Foundation's base64 on 20,000 random segments, canonical spelling required", .seeded)
    func segmentDecoderMatchesFoundation() {
        // Mostly the URL-safe alphabet, and now and then a byte outside it (standard alphabet, padding, space, NUL).
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
        let strangers = Array("+/= .\u{0}é".utf8)
        var generator = SeededGenerator()
        for _ in 0..<20_000 {
            let length = Int.random(in: 0...13, using: &generator)
            let segment: [UInt8] = (0..<length).map { _ in
                Int.random(in: 0..<50, using: &generator) == 0
                    ? strangers.randomElement(using: &generator)! : alphabet.randomElement(using: &generator)!
            }
            #expect(Base64URL.decodeJWSSegment(segment) == Self.referenceSegment(segment), "\(segment)")
            // A contiguous String slice takes the same path as an array.
            let text = String(decoding: segment, as: UTF8.self)
            #expect(Base64URL.decodeJWSSegment(Substring(text).utf8) == Self.referenceSegment(Array(text.utf8)))
        }
    }

    /// What a JWS segment means, spelled out: the URL-safe alphabet only, canonical, then Foundation's decoder.
    static func referenceSegment(_ segment: [UInt8]) -> Data? {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
        guard segment.allSatisfy(alphabet.contains), segment.count % 4 != 1 else { return nil }
        let unusedBits: UInt8 = segment.count % 4 == 2 ? 0b1111 : segment.count % 4 == 3 ? 0b11 : 0
        if let last = segment.last, UInt8(alphabet.firstIndex(of: last)!) & unusedBits != 0 { return nil }
        var standard = String(decoding: segment, as: UTF8.self).replacingOccurrences(of: "-", with: "+")
            .replacingOccurrences(of: "_", with: "/")
        standard += String(repeating: "=", count: (4 - segment.count % 4) % 4)
        return Data(base64Encoded: standard)
    }
    @Test("A header or payload that is not a JSON object is invalid_request")
    func notJSON() {
        let garbage = Base64URL.encode(Data("not json".utf8))
        let array = Base64URL.encode(Data("[1,2]".utf8))
        #expect(T.rejection("\(garbage).\(T.segment(T.claims())).c2ln")?.code == .invalidRequest)
        #expect(T.rejection("\(T.segment(T.header())).\(garbage).c2ln")?.code == .invalidRequest)
        #expect(T.rejection("\(T.segment(T.header())).\(array).c2ln")?.code == .invalidRequest)
    }

    @Test("Each required claim missing is invalid_request", arguments: ["iss", "iat", "jti", "events"])
    func missingClaim(_ name: String) {
        let rejection = T.rejection(T.compact(claims: T.claims { $0[name] = nil }))
        #expect(rejection?.code == .invalidRequest)
        #expect(rejection?.text.contains(name) == true)
    }

    @Test(
        "A required claim of the wrong type is invalid_request",
        arguments: [
            ("iss", JSONValue.number(1)), ("iat", .string("yesterday")), ("jti", .number(7)), ("jti", .string("")),
            ("events", .string("x")), ("events", .array([])),
        ] as [(String, JSONValue)])
    func wrongType(_ name: String, _ value: JSONValue) {
        #expect(T.rejection(T.compact(claims: T.claims { $0[name] = value }))?.code == .invalidRequest)
    }

    @Test("Empty events, or events that are not objects, are invalid_request")
    func eventsShape() {
        #expect(T.rejection(T.compact(claims: T.claims(events: [:])))?.code == .invalidRequest)
        #expect(T.rejection(T.compact(claims: T.claims(events: [EventType.sessionsRevoked.rawValue: "x"])))?.code == .invalidRequest)
        #expect(T.rejection(T.compact(claims: T.claims(events: [EventType.sessionsRevoked.rawValue: [1]])))?.code == .invalidRequest)
    }

    @Test("iat more than five minutes ahead is invalid_request; within the skew it is fine")
    func futureIssuedAt() {
        let tooFar = T.claims { $0["iat"] = .number(T.now.timeIntervalSince1970 + 301) }
        let withinSkew = T.claims { $0["iat"] = .number(T.now.timeIntervalSince1970 + 299) }
        #expect(T.rejection(T.compact(claims: tooFar))?.code == .invalidRequest)
        #expect(T.rejection(T.compact(claims: withinSkew)) == nil)
    }

    @Test("exp is neither required nor enforced, and old SETs are accepted")
    func noExpiry() {
        let expired = T.claims {
            $0["exp"] = .number(1)
            $0["iat"] = .number(1)
        }
        #expect(T.rejection(T.compact(claims: expired)) == nil)
    }

    @Test("typ other than secevent+jwt, application/secevent+jwt or JWT is invalid_request")
    func typ() {
        for accepted in ["secevent+jwt", "application/secevent+jwt", "JWT"] {
            #expect(T.rejection(T.compact(header: T.header(typ: accepted))) == nil)
        }
        #expect(T.rejection(T.compact(header: T.header(typ: "at+jwt")))?.code == .invalidRequest)
        #expect(T.rejection(T.compact(header: .object(["alg": "RS256", "kid": "k", "typ": 5])))?.code == .invalidRequest)
    }

    @Test("none and every HS* are invalid_key, even when configured", arguments: ["none", "None", "HS256", "HS384", "HS512"])
    func refusedAlgorithms(_ alg: String) throws {
        let permissive = SETPolicy(allowedAlgorithms: ["RS256", alg], audiences: [T.audience])
        #expect(!permissive.allowedAlgorithms.contains(alg))
        do {
            _ = try SecurityEventToken.parse(compact: T.compact(header: T.header(alg: alg)), policy: permissive, now: T.now)
            Issue.record("accepted alg \(alg)")
        } catch {
            #expect(error.code == .invalidKey)
        }
    }

    @Test("An unsecured token (empty signature segment) is judged by its alg: invalid_key, never invalid_request")
    func emptySignature() {
        for alg in ["none", "RS256"] {
            let token = T.compact(header: T.header(alg: alg)).split(separator: ".").prefix(2).joined(separator: ".") + "."
            #expect(T.rejection(token)?.code == .invalidKey, "\(alg)")
        }
    }

    @Test("iss, jti and every subject identifier are bounded to 256 bytes: longer is invalid_request")
    func claimBounds() throws {
        let long = String(repeating: "x", count: ClaimBounds.maxIdentifierBytes + 1)
        let atBound = String(repeating: "x", count: ClaimBounds.maxIdentifierBytes)
        #expect(T.rejection(T.compact(claims: T.claims { $0["jti"] = .string(long) }))?.code == .invalidRequest)
        #expect(T.rejection(T.compact(claims: T.claims { $0["iss"] = .string(long) }))?.code == .invalidRequest)
        #expect(T.rejection(T.compact(claims: T.claims { $0["jti"] = .string(atBound) })) == nil)
        for member in ["sub", "iss", "email"] {
            var subject: [String: JSONValue] = ["subject_type": "id_token_claims", "iss": "https://accounts.google.com", "sub": "1"]
            subject[member] = .string(long)
            let events: JSONValue = [EventType.sessionsRevoked.rawValue: ["subject": .object(subject)]]
            #expect(T.rejection(T.compact(claims: T.claims(events: events)))?.code == .invalidRequest, "\(member)")
        }
        let subID = T.claims { $0["sub_id"] = ["format": "opaque", "id": .string(long)] }
        #expect(T.rejection(T.compact(claims: subID))?.code == .invalidRequest)
        // Bytes, not characters: 200 two-byte characters are 400 bytes.
        #expect(T.rejection(T.compact(claims: T.claims { $0["jti"] = .string(String(repeating: "\u{00E9}", count: 200)) }))?.code == .invalidRequest)
    }

    @Test("An algorithm off the allow-list is invalid_key")
    func offAllowList() {
        #expect(T.rejection(T.compact(header: T.header(alg: "RS384")))?.code == .invalidKey)
        #expect(T.rejection(T.compact(header: T.header(alg: "ES256")))?.code == .invalidKey)
        let policy = SETPolicy(allowedAlgorithms: ["RS256", "RS384"], audiences: [T.audience])
        #expect((try? SecurityEventToken.parse(compact: T.compact(header: T.header(alg: "RS384")), policy: policy, now: T.now)) != nil)
    }

    @Test("A missing kid or alg is invalid_key")
    func missingKidOrAlg() {
        #expect(T.rejection(T.compact(header: T.header(kid: nil)))?.code == .invalidKey)
        #expect(T.rejection(T.compact(header: ["kid": "key-1"]))?.code == .invalidKey)
        #expect(T.rejection(T.compact(header: ["kid": "key-1", "alg": 256]))?.code == .invalidKey)
    }

    @Test("An unknown crit header is refused")
    func crit() {
        #expect(T.rejection(T.compact(header: ["alg": "RS256", "kid": "k", "crit": ["exp"]]))?.code == .invalidRequest)
    }

    @Test("A NUL character in the claims is refused: PostgreSQL could not store it")
    func nulCharacter() {
        #expect(T.rejection(T.compact(claims: T.claims { $0["jti"] = "a\u{0}b" }))?.code == .invalidRequest)
    }

    @Test("iss must equal the discovered issuer exactly; the description does not echo it")
    func issuer() throws {
        let token = try T.parse(T.compact())
        #expect(throws: Never.self) { try token.checkIssuerAndAudience(expectedIssuer: T.issuer, policy: T.policy) }
        for other in ["https://accounts.google.com", "https://evil.example/", ""] {
            do {
                try token.checkIssuerAndAudience(expectedIssuer: other, policy: T.policy)
                Issue.record("accepted issuer mismatch against \(other)")
            } catch {
                #expect(error.code == .invalidIssuer)
                #expect(!error.text.contains("accounts.google.com"))
            }
        }
    }

    @Test("aud: a string or an array naming one client ID; missing or foreign is invalid_audience")
    func audience() throws {
        func check(_ aud: JSONValue?) throws -> SETRejection.Code? {
            let token = try T.parse(T.compact(claims: T.claims { $0["aud"] = aud }))
            do {
                try token.checkIssuerAndAudience(expectedIssuer: T.issuer, policy: T.policy)
                return nil
            } catch {
                #expect(!error.text.contains(T.audience))
                return error.code
            }
        }
        #expect(try check(.string(T.audience)) == nil)
        #expect(try check([.string("other"), .string(T.audience)]) == nil)
        #expect(try check(nil) == .invalidAudience)
        #expect(try check("someone-else") == .invalidAudience)
        #expect(try check([]) == .invalidAudience)
        // A malformed aud names none of our client IDs; a stray non-string does not hide one that matches.
        #expect(try check(.number(3)) == .invalidAudience)
        #expect(try check([.number(1)]) == .invalidAudience)
        #expect(try check([.string(T.audience), .number(5)]) == nil)
    }

    @Test("The error body is exactly {err, description}")
    func body() throws {
        let text = SETRejection.invalidRequest("x").body.jsonValue.serialized
        #expect(text == #"{"description":"x","err":"invalid_request"}"#)
    }
}
