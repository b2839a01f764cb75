import Foundation

/// What a Google ID token must satisfy besides its signature.
public struct IDTokenPolicy: Sendable {
    /// The app's OAuth client IDs; `aud` must be one of them.
    public var audiences: Set<String>
    public var allowedAlgorithms: Set<String>
    /// Clock skew forgiven on `exp`.
    public var leeway: TimeInterval
    /// When not empty, the token's `hd` (Workspace domain) must be one of these.
    public var hostedDomains: Set<String>

    public init(audiences: Set<String>, allowedAlgorithms: Set<String> = ["RS256"], leeway: TimeInterval = 60, hostedDomains: Set<String> = []) {
        self.audiences = audiences
        self.allowedAlgorithms = allowedAlgorithms.filter { !SETPolicy.isAlwaysRefused($0) }
        self.leeway = leeway
        self.hostedDomains = hostedDomains
    }

    /// The issuers accepted for a provider whose discovery document names `issuer`: Google's tokens carry
    /// it with and without the `https://` scheme.
    public static func acceptedIssuers(discoveryIssuer issuer: String) -> Set<String> {
        var accepted: Set<String> = [issuer]
        for scheme in ["https://", "http://"] where issuer.hasPrefix(scheme) {
            accepted.insert(String(issuer.dropFirst(scheme.count)))
        }
        return accepted
    }
}

/// A Google ID token whose structure and claims are checked; signature and issuer are checked by the caller
/// once it has the provider's keys.
public struct GoogleIDToken: Sendable {
    /// Why a token is refused. The text is for logs; clients only ever see `invalid_token`.
    public struct Invalid: Error, Sendable, CustomStringConvertible {
        public let description: String
        public init(_ description: String) { self.description = description }
    }

    public struct Profile: Sendable, Equatable {
        public var sub: String
        public var email: String?
        public var emailVerified: Bool?
        public var name: String?
        public var picture: String?
        public var hostedDomain: String?
    }

    public let alg: String
    public let kid: String
    public let issuer: String
    public let profile: Profile
    public let expiresAt: Date
    /// `iat`: a token issued at or before the user's last session revocation no longer signs them in.
    public let issuedAt: Date
    public let signingInput: Data
    public let signature: Data

    public static func parse(_ compact: String, policy: IDTokenPolicy, now: Date) throws(Invalid) -> GoogleIDToken {
        guard let jws = try? CompactJWS(compact) else { throw Invalid("not a compact JWS") }
        guard let header = try? JSONValue.parse(jws.header).objectValue else { throw Invalid("the header is not a JSON object") }
        guard let alg = header["alg"]?.stringValue, policy.allowedAlgorithms.contains(alg) else {
            throw Invalid("the algorithm is not accepted")
        }
        guard header["crit"] == nil else { throw Invalid("the header has a crit parameter") }
        guard let kid = header["kid"]?.stringValue, !kid.isEmpty else { throw Invalid("the kid header is missing") }
        guard !jws.signature.isEmpty else { throw Invalid("the token carries no signature") }
        guard let claims = try? JSONValue.parse(jws.payload).objectValue else { throw Invalid("the payload is not a JSON object") }

        guard let issuer = claims["iss"]?.stringValue else { throw Invalid("iss is missing") }
        guard let sub = claims["sub"]?.stringValue, !sub.isEmpty else { throw Invalid("sub is missing") }
        guard ClaimBounds.fits(sub) else { throw Invalid("sub is too long") }
        guard case .number(let iat)? = claims["iat"], iat.isFinite else { throw Invalid("iat is missing") }
        guard case .number(let exp)? = claims["exp"], exp.isFinite else { throw Invalid("exp is missing") }
        let expiresAt = Date(timeIntervalSince1970: exp)
        guard now.timeIntervalSince(expiresAt) <= policy.leeway else { throw Invalid("the token has expired") }
        if case .number(let nbf)? = claims["nbf"], Date(timeIntervalSince1970: nbf).timeIntervalSince(now) > policy.leeway {
            throw Invalid("the token is not valid yet")
        }
        let audience: [String]
        switch claims["aud"] {
        case .string(let value): audience = [value]
        case .array(let values): audience = values.compactMap(\.stringValue)
        default: audience = []
        }
        guard audience.contains(where: policy.audiences.contains) else { throw Invalid("aud is not one of our client IDs") }
        let hostedDomain = claims["hd"]?.stringValue
        if !policy.hostedDomains.isEmpty {
            guard let hostedDomain, policy.hostedDomains.contains(hostedDomain.lowercased()) else {
                throw Invalid("the hosted domain is not allowed")
            }
        }
        let emailVerified: Bool? =
            switch claims["email_verified"] {
            case .bool(let value): value
            case .string(let value): value == "true"
            default: nil
            }
        let profile = Profile(
            sub: sub, email: claims["email"]?.stringValue, emailVerified: emailVerified, name: claims["name"]?.stringValue,
            picture: claims["picture"]?.stringValue, hostedDomain: hostedDomain)
        return GoogleIDToken(
            alg: alg, kid: kid, issuer: issuer, profile: profile, expiresAt: expiresAt,
            issuedAt: Date(timeIntervalSince1970: iat), signingInput: jws.signingInput,
            signature: jws.signature)
    }

    public func checkIssuer(discoveryIssuer: String) throws(Invalid) {
        guard IDTokenPolicy.acceptedIssuers(discoveryIssuer: discoveryIssuer).contains(issuer) else {
            throw Invalid("iss is not the identity provider")
        }
    }
}
