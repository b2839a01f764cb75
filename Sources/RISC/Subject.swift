/// Who an event is about. Google's legacy RISC form (`subject_type`) and the Shared Signals
/// form (`format`) both decode into this one model.
public enum Subject: Sendable, Equatable {
    /// `iss-sub` (RISC) or `iss_sub` (SSF): the user's Google `sub`.
    case issuerAndSubject(iss: String, sub: String)
    /// `id_token_claims` (RISC): `iss` and `sub`, sometimes `email`.
    case idTokenClaims(iss: String, sub: String, email: String?)
    /// `oauth_token` (RISC): one token, identified by prefix or double hash; `tokenType` as sent (nil when absent).
    case oauthToken(tokenType: String?, identifier: TokenIdentifier)
    /// `email` (SSF): never enough to match a user on its own.
    case email(String)
    /// `opaque` (SSF).
    case opaque(String)
    /// `complex` (SSF): several subjects at once, by member name (`user`, `session`, `device`, `tenant`, ...).
    indirect case complex(members: [String: Subject])
    /// Any other shape, kept only in the raw claims.
    case unrecognized(format: String?)

    /// The issuers of Google's sign-in, whose `sub` values are our users' keys. Google's own RISC sample
    /// writes the subject's issuer with a trailing slash, so that spelling counts too.
    public static let googleSignInIssuers: Set<String> = [
        "https://accounts.google.com", "https://accounts.google.com/", "accounts.google.com",
    ]

    /// The Google account `sub` this subject names, if it names one: only a non-empty `sub` issued by Google's
    /// sign-in (another issuer's `sub` could equal a Google user's). Email alone never counts.
    public var googleSubject: String? {
        guard case .named(let sub) = userReference else { return nil }
        return sub
    }

    /// Whether the subject names one of our users, and if not, why.
    public enum UserReference: Sendable, Equatable {
        case named(sub: String)
        case notAUser(reason: String)
    }

    public var userReference: UserReference {
        switch self {
        case .issuerAndSubject(let iss, let sub), .idTokenClaims(let iss, let sub, _):
            guard Self.googleSignInIssuers.contains(iss) else {
                return .notAUser(reason: "the subject was not issued by Google's sign-in")
            }
            guard !sub.isEmpty else { return .notAUser(reason: "the subject's sub is empty") }
            return .named(sub: sub)
        case .complex(let members):
            // The user member is the one a user's account is named by; the others narrow it (a session, a device).
            return members["user"]?.userReference ?? .notAUser(reason: "the complex subject has no user member")
        default:
            return .notAUser(reason: "the subject names no Google account")
        }
    }

    /// Parses one subject object; nil when the value is not an object at all.
    public init?(json: JSONValue) {
        guard let object = json.objectValue else { return nil }
        // Okta's CAEP events name the user as `{"user": {...}}`, without `format`: read as the complex subject it is.
        let kind =
            object["subject_type"]?.stringValue ?? object["format"]?.stringValue ?? (object["user"]?.objectValue != nil ? "complex" : nil)
        let iss = object["iss"]?.stringValue
        let sub = object["sub"]?.stringValue
        switch kind {
        case "iss-sub", "iss_sub":
            guard let iss, let sub else {
                self = .unrecognized(format: kind)
                return
            }
            self = .issuerAndSubject(iss: iss, sub: sub)
        case "id_token_claims":
            guard let iss, let sub else {
                self = .unrecognized(format: kind)
                return
            }
            self = .idTokenClaims(iss: iss, sub: sub, email: object["email"]?.stringValue)
        case "oauth_token":
            guard let alg = object["token_identifier_alg"]?.stringValue,
                let token = object["token"]?.stringValue,
                let identifier = TokenIdentifier(algorithm: alg, value: token)
            else {
                self = .unrecognized(format: kind)
                return
            }
            self = .oauthToken(tokenType: object["token_type"]?.stringValue, identifier: identifier)
        case "email":
            guard let email = object["email"]?.stringValue else {
                self = .unrecognized(format: kind)
                return
            }
            self = .email(email)
        case "opaque":
            guard let id = object["id"]?.stringValue else {
                self = .unrecognized(format: kind)
                return
            }
            self = .opaque(id)
        case "complex":
            var members: [String: Subject] = [:]
            for (name, value) in object where name != "format" {
                if let member = Subject(json: value) { members[name] = member }
            }
            self = .complex(members: members)
        default:
            self = .unrecognized(format: kind)
        }
    }
}

extension Subject {
    /// The stored form: SSF-style `format` names, and for tokens only the non-secret identifier. `init(json:)`
    /// reads it back (it accepts `format` as well as RISC's `subject_type`).
    public var jsonValue: JSONValue {
        switch self {
        case .issuerAndSubject(let iss, let sub):
            ["format": "iss_sub", "iss": .string(iss), "sub": .string(sub)]
        case .idTokenClaims(let iss, let sub, let email):
            .object(
                ["format": "id_token_claims", "iss": .string(iss), "sub": .string(sub)]
                    .merging(email.map { ["email": JSONValue.string($0)] } ?? [:]) { first, _ in first })
        case .oauthToken(let tokenType, let identifier):
            .object(
                [
                    "format": "oauth_token", "token_identifier_alg": .string(identifier.algorithm),
                    "token": .string(identifier.canonicalValue),
                ].merging(tokenType.map { ["token_type": JSONValue.string($0)] } ?? [:]) { first, _ in first })
        case .email(let email): ["format": "email", "email": .string(email)]
        case .opaque(let id): ["format": "opaque", "id": .string(id)]
        case .complex(let members): .object(members.mapValues(\.jsonValue).merging(["format": "complex"]) { _, format in format })
        case .unrecognized(let format): .object(format.map { ["format": .string($0)] } ?? [:])
        }
    }
}

extension Subject {
    /// The members of a complex subject this receiver understands: the user an event is about.
    public static let understoodComplexMembers: Set<String> = ["user"]

    /// The members marked critical by the transmitter (`critical_subject_members`) that this subject carries and the
    /// receiver does not understand. An event whose subject has any must not be acted on (SSF 1.0, receiver subject
    /// processing): it is stored, and its actions are a recorded skip.
    public func unprocessedCriticalMembers(_ critical: [String]) -> [String] {
        guard case .complex(let members) = self else { return [] }
        return critical.filter { members[$0] != nil && !Self.understoodComplexMembers.contains($0) }.sorted()
    }

    /// The email address this subject gives for its user, if any (`email`, or a complex subject's `user` member).
    public var email: String? {
        switch self {
        case .email(let email): email
        case .idTokenClaims(_, _, let email): email
        case .complex(let members): members["user"]?.email
        default: nil
        }
    }
}
