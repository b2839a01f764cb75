import DevTransmitter
import Foundation
import RISC
import Testing

@Suite("Every forged or malformed SET gets the right RFC 8935 error")
struct RejectionTests {
    func expectRejected(
        _ harness: Harness, _ body: String, _ code: SETRejection.Code, sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        let reply = try await harness.post(body)
        #expect(reply.status == 400, "\(reply.body)", sourceLocation: sourceLocation)
        #expect(reply.headers["Content-Type"].first == "application/json", sourceLocation: sourceLocation)
        let rejection = try #require(reply.rejection, "body was \(reply.body)", sourceLocation: sourceLocation)
        #expect(rejection.err == code.rawValue, "\(rejection.description)", sourceLocation: sourceLocation)
        // The description never echoes what was expected.
        #expect(!rejection.description.contains(harness.transmitter.issuer), sourceLocation: sourceLocation)
        #expect(!rejection.description.contains(Harness.audience), sourceLocation: sourceLocation)
        #expect(!rejection.description.contains(harness.transmitter.currentKid), sourceLocation: sourceLocation)
        let jti = jti(of: body)
        if !jti.isEmpty {
            #expect(try await harness.stored(jti: jti).isEmpty, "a rejected SET was stored", sourceLocation: sourceLocation)
        }
    }

    func unsigned(header: JSONValue, claims: JSONValue, signature: String = "c2lnbmF0dXJl") -> String {
        let encoder = JSONEncoder()
        return [
            Base64URL.encode(try! encoder.encode(header)), Base64URL.encode(try! encoder.encode(claims)),
            signature,
        ].joined(separator: ".")
    }

    @Test("Signature and key failures are invalid_key")
    func keyFailures() async throws {
        try await Harness.with { harness in
            let kid = harness.transmitter.currentKid
            // Signed by another key that claims the transmitter's kid.
            let impostor = try await DevTransmitter(settings: .init(port: 0), logger: Harness.logger)
            try await expectRejected(harness, try await impostor.sign(claims: harness.claims(), kid: kid), .invalidKey)
            // A kid the transmitter never published.
            try await expectRejected(harness, try await impostor.sign(claims: harness.claims()), .invalidKey)
            // alg none, and HMAC keyed with the public key (the classic confusion attack).
            // An unsecured JWS has an empty signature segment; its alg decides the answer (none is invalid_key).
            try await expectRejected(
                harness, unsigned(header: ["alg": "none", "kid": .string(kid)], claims: harness.claims(), signature: ""), .invalidKey)
            try await expectRejected(
                harness, unsigned(header: ["alg": "RS256", "kid": .string(kid)], claims: harness.claims(), signature: ""), .invalidKey)
            try await expectRejected(harness, unsigned(header: ["alg": "none", "kid": .string(kid)], claims: harness.claims()), .invalidKey)
            try await expectRejected(harness, unsigned(header: ["alg": "HS256", "kid": .string(kid)], claims: harness.claims()), .invalidKey)
            try await expectRejected(harness, unsigned(header: ["alg": "RS384", "kid": .string(kid)], claims: harness.claims()), .invalidKey)
            try await expectRejected(harness, unsigned(header: ["alg": "RS256"], claims: harness.claims()), .invalidKey)
            // A valid token whose signature was tampered with, and one whose payload was swapped.
            let good = try await harness.sign(harness.claims())
            var parts = good.split(separator: ".").map(String.init)
            let swapped = try await harness.sign(harness.claims { $0["aud"] = "someone-else" })
            try await expectRejected(harness, parts[0] + "." + swapped.split(separator: ".")[1] + "." + parts[2], .invalidKey)
            // One character changed in the middle: still canonical base64url, no longer the signature.
            var signature = Array(parts[2])
            signature[10] = signature[10] == "A" ? "B" : "A"
            parts[2] = String(signature)
            try await expectRejected(harness, parts.joined(separator: "."), .invalidKey)
        }
    }

    @Test("Issuer and audience failures")
    func issuerAndAudience() async throws {
        try await Harness.with { harness in
            try await expectRejected(harness, try await harness.sign(harness.claims { $0["iss"] = "https://accounts.google.com/" }), .invalidIssuer)
            try await expectRejected(harness, try await harness.sign(harness.claims { $0["aud"] = "someone-else" }), .invalidAudience)
            try await expectRejected(harness, try await harness.sign(harness.claims { $0["aud"] = nil }), .invalidAudience)
            try await expectRejected(harness, try await harness.sign(harness.claims { $0["aud"] = ["x", "y"] }), .invalidAudience)
            // Any one of the configured client IDs is enough.
            let multi = try await harness.sign(harness.claims { $0["aud"] = ["x", "another-client"] })
            #expect(try await harness.post(multi).status == 202)
        }
    }

    @Test("Malformed tokens are invalid_request")
    func malformed() async throws {
        try await Harness.with { harness in
            try await expectRejected(harness, "", .invalidRequest)
            try await expectRejected(harness, "hello", .invalidRequest)
            try await expectRejected(harness, "{\"iss\":\"x\"}", .invalidRequest)
            for claim in ["iss", "iat", "jti", "events"] {
                try await expectRejected(harness, try await harness.sign(harness.claims { $0[claim] = nil }), .invalidRequest)
            }
            try await expectRejected(harness, try await harness.sign(harness.claims { $0["iat"] = "now" }), .invalidRequest)
            try await expectRejected(harness, try await harness.sign(harness.claims { $0["events"] = [:] }), .invalidRequest)
            try await expectRejected(harness, try await harness.sign(harness.claims { $0["events"] = ["x": "y"] }), .invalidRequest)
            let future = Date().timeIntervalSince1970 + 600
            try await expectRejected(harness, try await harness.sign(harness.claims { $0["iat"] = .number(future) }), .invalidRequest)
            try await expectRejected(harness, try await harness.sign(harness.claims(), typ: "at+jwt"), .invalidRequest)
            // Accepted typ values and an absent typ.
            for typ in ["JWT", "application/secevent+jwt", nil] {
                #expect(try await harness.post(try await harness.sign(harness.claims(), typ: typ)).status == 202)
            }
        }
    }

    @Test("A body over 64 KiB is 413")
    func tooLarge() async throws {
        try await Harness.with { harness in
            let reply = try await harness.post(String(repeating: "a", count: 64 * 1024 + 1))
            #expect(reply.status == 413)
            // A signed SET just under the limit is fine.
            let padded = try await harness.sign(harness.claims { $0["padding"] = .string(String(repeating: "p", count: 40_000)) })
            #expect(try await harness.post(padded).status == 202)
        }
    }
}
