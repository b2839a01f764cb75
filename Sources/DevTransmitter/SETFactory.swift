import Foundation
import RISC

/// Builds the claims of a SET as Google (legacy RISC form) or a Shared Signals transmitter (CAEP) sends them.
public struct SETRequest: Codable, Sendable {
    /// A full event-type URI or a short name (`sessions-revoked`).
    public var type: String
    public var sub: String?
    public var email: String?
    public var reason: String?
    /// `token-revoked`: the refresh token to identify, and how (`prefix` or `hash`).
    public var token: String?
    public var alg: String?
    public var state: String?
    /// Overrides, for tests and experiments.
    public var aud: String?
    public var jti: String?
    public var iat: Double?
    /// The issuer written into user subjects (default: Google's sign-in, `https://accounts.google.com`).
    public var subjectIssuer: String?
    /// Where to POST it; by default the transmitter's configured receiver.
    public var target: String?

    public init(type: String, sub: String? = nil) {
        self.type = type
        self.sub = sub
    }
}

enum SETFactory {
    struct Invalid: Error, CustomStringConvertible { let description: String }

    static let googleSignInIssuer = "https://accounts.google.com"

    static func claims(for request: SETRequest, issuer: String, audience: String, now: Date = Date()) throws -> JSONValue {
        let uri = EventType(uriOrShortName: request.type)?.rawValue ?? request.type
        let type = EventType(rawValue: uri)
        var event: [String: JSONValue] = [:]
        var claims: [String: JSONValue] = [
            "iss": .string(issuer),
            "aud": .string(request.aud ?? audience),
            "iat": .number(request.iat ?? now.timeIntervalSince1970.rounded(.down)),
            "jti": .string(request.jti ?? UUID().uuidString.lowercased()),
        ]
        // Users are Google sign-in accounts: their subjects are issued by Google's sign-in, not by the RISC
        // transmitter, whatever this transmitter's own issuer is.
        let subjectIssuer = request.subjectIssuer ?? SETFactory.googleSignInIssuer
        let userSubject: JSONValue? = request.sub.map { sub in
            var subject: [String: JSONValue] = [
                "subject_type": .string("iss-sub"), "iss": .string(subjectIssuer), "sub": .string(sub),
            ]
            if let email = request.email {
                subject["subject_type"] = .string("id_token_claims")
                subject["email"] = .string(email)
            }
            return .object(subject)
        }

        switch type {
        case .tokenRevoked:
            guard let token = request.token else { throw Invalid(description: "token-revoked needs --token") }
            let (alg, value): (String, String) =
                switch request.alg ?? "prefix" {
                case "prefix": ("prefix", TokenIdentifier.prefix(of: token))
                case "hash", "hash_base64_sha512_sha512":
                    ("hash_base64_sha512_sha512", TokenIdentifier.doubleSHA512Base64(of: token))
                default: throw Invalid(description: "--alg must be prefix or hash")
                }
            event["subject"] = .object([
                "subject_type": .string("oauth_token"), "token_type": .string("refresh_token"),
                "token_identifier_alg": .string(alg), "token": .string(value),
            ])
        case .caepSessionRevoked, .caepCredentialChange:
            // Shared Signals form: a top-level sub_id, and an event timestamp.
            if let sub = request.sub {
                claims["sub_id"] = .object(["format": .string("iss_sub"), "iss": .string(subjectIssuer), "sub": .string(sub)])
            }
            event["event_timestamp"] = claims["iat"]
            if type == .caepCredentialChange {
                event["credential_type"] = .string("password")
                event["change_type"] = .string("update")
            }
        case .verification, .ssfVerification:
            event["state"] = .string(request.state ?? UUID().uuidString.lowercased())
        default:
            if let userSubject { event["subject"] = userSubject }
            if type == .accountDisabled, let reason = request.reason { event["reason"] = .string(reason) }
        }
        claims["events"] = .object([uri: .object(event)])
        return .object(claims)
    }
}
