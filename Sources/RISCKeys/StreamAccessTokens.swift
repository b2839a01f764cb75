import AsyncHTTPClient
import Foundation
import JWTKit
import NIOCore
import NIOFoundationCompat
import RISC

/// Access tokens for one transmitter's stream endpoints. OAuth client credentials (RFC 6749 §4.4) with the client
/// authentication the operator chose; a token is reused until shortly before its `expires_in` runs out, and fetched
/// again at once when a stream endpoint answers 401 (`invalidate`). A fixed bearer token is simply given.
public actor StreamAccessTokens {
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public let description: String
    }

    let issuer: String
    let authorization: StreamAuthorization
    private var current: (token: String, reuseUntil: Date)?
    private var tokenEndpoint: String?
    private let clock: @Sendable () -> Date

    public init(issuer: String, authorization: StreamAuthorization, clock: @escaping @Sendable () -> Date = Date.init) {
        self.issuer = issuer
        self.authorization = authorization
        self.clock = clock
        if case .clientCredentials(_, _, _, _, let endpoint) = authorization { tokenEndpoint = endpoint }
    }

    /// How long before its end a token is no longer used: a fifth of its life, at most 60 s, so a 20-second token is
    /// used for 16 s and an hour's for 59 minutes.
    public static func reuseUntil(issuedAt: Date, expiresIn: Double?) -> Date {
        // Without expires_in, used until a 401 says otherwise (an hour at most).
        guard let expiresIn, expiresIn.isFinite, expiresIn > 0 else { return issuedAt.addingTimeInterval(3600) }
        return issuedAt.addingTimeInterval(expiresIn - min(60, expiresIn / 5))
    }

    public func token() async throws(Failure) -> String {
        switch authorization {
        case .bearer(let token):
            return token
        case .clientCredentials(let clientID, let method, let secret, let scope, _):
            if let current, clock() < current.reuseUntil { return current.token }
            let fetched = try await fetch(clientID: clientID, method: method, secret: secret, scope: scope)
            current = fetched
            return fetched.token
        }
    }

    /// A stream endpoint refused `token` (401): the next call fetches another.
    public func invalidate(_ token: String) {
        if current?.token == token { current = nil }
    }

    private func endpoint() async throws(Failure) -> String {
        if let tokenEndpoint { return tokenEndpoint }
        // RFC 8414's URL first, then OpenID's: transmitters publish one or the other.
        let candidates = [
            WellKnownURL.inserting(WellKnownURL.oauthAuthorizationServer, into: issuer), WellKnownURL.openIDConfiguration(of: issuer),
        ].compactMap { $0 }
        for url in candidates {
            guard let document = try? await HTTPClient.withoutRedirects.fetchDocument(url),
                let endpoint = (try? JSONValue.parse(document.body))?["token_endpoint"]?.stringValue
            else { continue }
            guard URLPolicy.isHTTPSOrLoopback(endpoint), URLPolicy.subscriberURLProblem(endpoint) == nil else {
                throw Failure(description: "the transmitter's token_endpoint is not an https:// URL the service sends credentials to")
            }
            tokenEndpoint = endpoint
            return endpoint
        }
        throw Failure(description: "no token_endpoint in the issuer's OAuth or OpenID metadata (give --token-endpoint)")
    }

    private func fetch(
        clientID: String, method: StreamAuthorization.ClientAuthentication, secret: String, scope: String
    ) async throws(Failure) -> (token: String, reuseUntil: Date) {
        let url = try await endpoint()
        var form = ["grant_type": "client_credentials", "scope": scope]
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
        request.headers.add(name: "Accept", value: "application/json")
        switch method {
        case .clientSecretBasic:
            // RFC 6749 §2.3.1: each part form-encoded before the Basic encoding.
            let pair = FormEncoding.escape(clientID) + ":" + FormEncoding.escape(secret)
            request.headers.add(name: "Authorization", value: "Basic " + Data(pair.utf8).base64EncodedString())
        case .clientSecretPost:
            form["client_id"] = clientID
            form["client_secret"] = secret
        case .privateKeyJWT:
            form["client_id"] = clientID
            form["client_assertion_type"] = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
            form["client_assertion"] = try await Self.clientAssertion(clientID: clientID, pem: secret, audience: url, now: clock())
        }
        request.body = .bytes(ByteBuffer(string: FormEncoding.encode(form)))
        let issuedAt = clock()
        let status: UInt
        let body: Data
        do {
            let response = try await HTTPClient.withoutRedirects.execute(request, timeout: .seconds(15))
            status = response.status.code
            body = Data(buffer: try await response.body.collect(upTo: 1 << 20))
        } catch {
            throw Failure(description: "the token endpoint could not be reached: \(NetworkErrors.describe(error))")
        }
        let answer = try? JSONValue.parse(body)
        guard status == 200 else {
            let code = answer?["error"]?.stringValue ?? "HTTP \(status)"
            throw Failure(description: "the token endpoint refused the client credentials: \(code)")
        }
        guard let token = answer?["access_token"]?.stringValue, !token.isEmpty,
            answer?["token_type"]?.stringValue?.lowercased() ?? "bearer" == "bearer"
        else { throw Failure(description: "the token endpoint's answer holds no bearer access_token") }
        var expiresIn: Double?
        if case .number(let seconds)? = answer?["expires_in"] { expiresIn = seconds }
        return (token, Self.reuseUntil(issuedAt: issuedAt, expiresIn: expiresIn))
    }

    /// RFC 7523 §2.2: a JWT signed with the client's private key (RSA or EC, as its PEM says), for the token endpoint.
    static func clientAssertion(clientID: String, pem: String, audience: String, now: Date) async throws(Failure) -> String {
        let keys = JWTKeyCollection()
        do {
            if let rsa = try? Insecure.RSA.PrivateKey(pem: pem) {
                await keys.add(rsa: rsa, digestAlgorithm: .sha256)
            } else if let ec = try? ES256PrivateKey(pem: pem) {
                await keys.add(ecdsa: ec)
            } else {
                throw Failure(description: "the client key is neither an RSA nor a P-256 private key in PEM")
            }
            let iat = now.timeIntervalSince1970.rounded(.down)
            let claims = ClientAssertionClaims(
                iss: .init(value: clientID), sub: .init(value: clientID), aud: .init(value: [audience]),
                jti: .init(value: Base64URL.random(bytes: 16)), iat: .init(value: Date(timeIntervalSince1970: iat)),
                exp: .init(value: Date(timeIntervalSince1970: iat + 60)))
            return try await keys.sign(claims)
        } catch let error as Failure {
            throw error
        } catch {
            throw Failure(description: "the client assertion could not be signed")
        }
    }
}

/// RFC 7523's claims for client authentication.
struct ClientAssertionClaims: JWTPayload {
    var iss: IssuerClaim
    var sub: SubjectClaim
    var aud: AudienceClaim
    var jti: IDClaim
    var iat: IssuedAtClaim
    var exp: ExpirationClaim

    func verify(using algorithm: some JWTAlgorithm) async throws { try exp.verifyNotExpired() }
}
