import Crypto
import Foundation
import Hummingbird
import NIOCore
import RISC
import Synchronization

/// What `dev idtoken` and `POST /dev/idtoken` ask for.
public struct IDTokenRequest: Codable, Sendable {
    public var sub: String
    public var email: String?
    /// Default: the transmitter's audience (one of the receiver's client IDs).
    public var aud: String?
    /// Seconds until `exp`; negative for an already expired token. Default 3600.
    public var expIn: Double?
    public var hd: String?
    public var name: String?
    /// Overrides for tests: another issuer, or a kid the JWKS does not have.
    public var iss: String?
    public var kid: String?
    /// `iat` in seconds since 1970 (default: now, rounded down as Google's are).
    public var iat: Double?

    public init(sub: String) { self.sub = sub }

    enum CodingKeys: String, CodingKey {
        case sub, email, aud
        case expIn = "exp_in"
        case hd, name, iss, kid, iat
    }
}

/// Google's OAuth half, in miniature: authorization codes with PKCE, a token endpoint that issues and
/// refreshes tokens and refuses revoked ones, and a revocation endpoint. State lives in memory.
final class DevOAuthState: Sendable {
    struct PendingCode {
        var clientID: String
        var redirectURI: String
        var sub: String
        var scope: String
        var challenge: String?
        var challengeMethod: String
        var expiresAt: Date
    }

    struct RefreshGrant {
        var clientID: String
        var sub: String
        var scope: String
        var revoked = false
    }

    struct State {
        var codes: [String: PendingCode] = [:]
        var refreshTokens: [String: RefreshGrant] = [:]
        var accessTokens: Set<String> = []
    }

    let state = Mutex(State())

    static func random(_ bytes: Int) -> String { Base64URL.random(bytes: bytes) }
}

extension DevTransmitter {
    /// The OpenID issuer of the ID tokens this transmitter mints (Google's is `https://accounts.google.com`).
    public var openIDIssuer: String { baseURL }
    public var openIDConfigurationURL: String { baseURL + "/.well-known/openid-configuration" }

    /// Signs an ID token as Google's sign-in would issue it.
    public func makeIDToken(_ request: IDTokenRequest, now: Date = Date()) async throws -> String {
        let iat = request.iat ?? now.timeIntervalSince1970.rounded(.down)
        let aud = request.aud ?? settings.audience
        var claims: [String: JSONValue] = [
            "iss": .string(request.iss ?? openIDIssuer), "aud": .string(aud), "azp": .string(aud),
            "sub": .string(request.sub), "iat": .number(iat), "exp": .number(iat + (request.expIn ?? 3600)),
        ]
        if let email = request.email {
            claims["email"] = .string(email)
            claims["email_verified"] = .bool(true)
        }
        if let hd = request.hd { claims["hd"] = .string(hd) }
        if let name = request.name { claims["name"] = .string(name) }
        return try await sign(claims: .object(claims), typ: "JWT", kid: request.kid)
    }

    /// The client-secret file Google's console would let you download, for the receiver's GOOGLE_CLIENT_SECRET_FILES.
    public func clientSecretFile() -> JSONValue {
        [
            "web": [
                "client_id": .string(settings.audience), "client_secret": .string(settings.clientSecret),
                "auth_uri": .string(baseURL + "/dev/authorize"), "token_uri": .string(baseURL + "/token"),
                "redirect_uris": ["http://127.0.0.1/callback"],
            ]
        ]
    }

    struct AuthorizeRequest: Decodable {
        var sub: String
        var client_id: String?
        var redirect_uri: String
        var scope: String?
        var code_challenge: String?
        var code_challenge_method: String?
    }

    /// Stands in for the consent screen: returns the code Google would append to the redirect.
    func authorize(_ request: AuthorizeRequest) -> String {
        let code = "4/" + DevOAuthState.random(32)
        let pending = DevOAuthState.PendingCode(
            clientID: request.client_id ?? settings.audience, redirectURI: request.redirect_uri, sub: request.sub,
            scope: request.scope ?? "openid email", challenge: request.code_challenge,
            challengeMethod: request.code_challenge_method ?? "plain", expiresAt: Date().addingTimeInterval(600))
        oauth.state.withLock { $0.codes[code] = pending }
        return code
    }

    func tokenEndpoint(_ form: [String: String]) async throws -> Response {
        guard form["client_id"] == settings.audience, form["client_secret"] == settings.clientSecret else {
            return Self.oauthError(.unauthorized, "invalid_client")
        }
        let clientID = settings.audience
        switch form["grant_type"] {
        case "authorization_code":
            guard let code = form["code"] else { return Self.oauthError(.badRequest, "invalid_request") }
            let pending = oauth.state.withLock { $0.codes.removeValue(forKey: code) }  // single use
            guard let pending, pending.expiresAt > Date(), pending.clientID == clientID,
                pending.redirectURI == form["redirect_uri"]
            else { return Self.oauthError(.badRequest, "invalid_grant") }
            if let challenge = pending.challenge {
                guard let verifier = form["code_verifier"] else { return Self.oauthError(.badRequest, "invalid_grant") }
                let computed = pending.challengeMethod == "S256" ? Base64URL.encode(Data(SHA256.hash(data: Data(verifier.utf8)))) : verifier
                guard computed == challenge else { return Self.oauthError(.badRequest, "invalid_grant") }
            }
            let refreshToken = "1//" + DevOAuthState.random(72)
            let accessToken = "ya29." + DevOAuthState.random(48)
            oauth.state.withLock { state in
                state.refreshTokens[refreshToken] = .init(clientID: clientID, sub: pending.sub, scope: pending.scope)
                state.accessTokens.insert(accessToken)
            }
            var idRequest = IDTokenRequest(sub: pending.sub)
            idRequest.aud = clientID
            return DevTransmitter.json([
                "access_token": .string(accessToken), "expires_in": 3599, "refresh_token": .string(refreshToken),
                "scope": .string(pending.scope), "token_type": "Bearer",
                "id_token": .string(try await makeIDToken(idRequest)),
            ])
        case "refresh_token":
            guard let refreshToken = form["refresh_token"] else { return Self.oauthError(.badRequest, "invalid_request") }
            let grant = oauth.state.withLock { $0.refreshTokens[refreshToken] }
            guard let grant, !grant.revoked, grant.clientID == clientID else {
                return Self.oauthError(.badRequest, "invalid_grant", description: "Token has been expired or revoked.")
            }
            let accessToken = "ya29." + DevOAuthState.random(48)
            oauth.state.withLock { _ = $0.accessTokens.insert(accessToken) }
            return DevTransmitter.json([
                "access_token": .string(accessToken), "expires_in": 3599, "scope": .string(grant.scope), "token_type": "Bearer",
            ])
        default:
            return Self.oauthError(.badRequest, "unsupported_grant_type")
        }
    }

    func revocationEndpoint(_ form: [String: String]) -> Response {
        guard let token = form["token"] else { return Self.oauthError(.badRequest, "invalid_request") }
        let known = oauth.state.withLock { state -> Bool in
            if state.refreshTokens[token] != nil {
                state.refreshTokens[token]!.revoked = true
                return true
            }
            return state.accessTokens.remove(token) != nil
        }
        return known ? Response(status: .ok) : Self.oauthError(.badRequest, "invalid_token")
    }

    /// For tests and `dev` users: whether the transmitter still honours a refresh token.
    func refreshTokenStatus(_ token: String) -> JSONValue {
        let grant = oauth.state.withLock { $0.refreshTokens[token] }
        return ["known": .bool(grant != nil), "revoked": .bool(grant?.revoked ?? false)]
    }

    static func oauthError(_ status: HTTPResponse.Status, _ error: String, description: String? = nil) -> Response {
        var body: [String: JSONValue] = ["error": .string(error)]
        if let description { body["error_description"] = .string(description) }
        var response = json(.object(body))
        response.status = status
        return response
    }

    func addOpenIDRoutes(to router: Router<BasicRequestContext>) {
        router.get("/.well-known/openid-configuration") { _, _ in
            guard !self.keysOutage.load(ordering: .relaxed) else { return Response(status: .serviceUnavailable) }
            return Self.json(
                [
                    "issuer": .string(self.openIDIssuer), "jwks_uri": .string(self.baseURL + "/jwks"),
                    "authorization_endpoint": .string(self.baseURL + "/dev/authorize"),
                    "token_endpoint": .string(self.baseURL + "/token"), "revocation_endpoint": .string(self.baseURL + "/revoke"),
                    "id_token_signing_alg_values_supported": ["RS256"],
                    "code_challenge_methods_supported": ["plain", "S256"],
                ], maxAge: 300)
        }
        router.post("/token") { request, _ in
            try await self.tokenEndpoint(try await Self.form(request))
        }
        router.post("/revoke") { request, _ in
            self.revocationEndpoint(try await Self.form(request))
        }
        router.post("/dev/idtoken") { request, context in
            let idRequest = try await request.decode(as: IDTokenRequest.self, context: context)
            return Self.json(["id_token": .string(try await self.makeIDToken(idRequest))])
        }
        router.post("/dev/authorize") { request, context in
            let authorize = try await request.decode(as: AuthorizeRequest.self, context: context)
            return Self.json(["code": .string(self.authorize(authorize))])
        }
        router.post("/dev/refresh-token-status") { request, _ in
            let form = try await Self.form(request)
            return Self.json(self.refreshTokenStatus(form["token"] ?? ""))
        }
    }

    static func form(_ request: Request) async throws -> [String: String] {
        var request = request
        let body = try await request.collectBody(upTo: RequestLimits.maxBodyBytes)
        return FormEncoding.decode(String(buffer: body))
    }
}
