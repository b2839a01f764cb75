import Foundation
import RISC
import Testing

/// Builds compact JWS strings for parser tests. Signatures are placeholders: the core never checks them.
enum TestTokens {
    static let issuer = "https://accounts.google.com/"
    static let audience = "123456789-abcedfgh.apps.googleusercontent.com"
    static let policy = SETPolicy(audiences: [audience])
    static let now = Date(timeIntervalSince1970: 1_700_000_000)

    static func segment(_ json: JSONValue) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        return Base64URL.encode(try! encoder.encode(json))
    }

    static func header(alg: String = "RS256", kid: String? = "key-1", typ: String? = nil) -> JSONValue {
        var header: [String: JSONValue] = ["alg": .string(alg)]
        if let kid { header["kid"] = .string(kid) }
        if let typ { header["typ"] = .string(typ) }
        return .object(header)
    }

    static func claims(events: JSONValue? = nil, _ changes: (inout [String: JSONValue]) -> Void = { _ in }) -> JSONValue {
        var claims: [String: JSONValue] = [
            "iss": .string(issuer), "aud": .string(audience), "iat": .number(now.timeIntervalSince1970 - 60),
            "jti": "756E69717565206964656E746966696572",
            "events": events ?? [
                EventType.accountDisabled.rawValue: [
                    "subject": ["subject_type": "iss-sub", "iss": .string(issuer), "sub": "7375626A656374"],
                    "reason": "hijacking",
                ]
            ],
        ]
        changes(&claims)
        return .object(claims)
    }

    static func compact(header: JSONValue = header(), claims: JSONValue = claims()) -> String {
        "\(segment(header)).\(segment(claims)).c2lnbmF0dXJl"
    }

    static func parse(_ token: String) throws(SETRejection) -> SecurityEventToken {
        try SecurityEventToken.parse(compact: token, policy: policy, now: now)
    }

    /// The rejection a token gets from the parser, or nil if it parses.
    static func rejection(_ token: String) -> SETRejection? {
        do {
            _ = try parse(token)
            return nil
        } catch {
            return error
        }
    }
}
