import AsyncHTTPClient
import Foundation
import NIOCore
import NIOFoundationCompat
import RISC

/// An OAuth client's credentials, from a client-secret JSON file as Google's console downloads it:
/// `{"web": {...}}` or `{"installed": {...}}`.
public struct ClientSecret: Sendable, Equatable {
    public var clientID: String
    public var clientSecret: String

    public init(clientID: String, clientSecret: String) {
        self.clientID = clientID
        self.clientSecret = clientSecret
    }

    public init?(json data: Data) {
        guard let root = try? JSONValue.parse(data).objectValue,
            let body = (root["web"] ?? root["installed"])?.objectValue,
            let clientID = body["client_id"]?.stringValue, !clientID.isEmpty,
            let secret = body["client_secret"]?.stringValue, !secret.isEmpty
        else { return nil }
        self.init(clientID: clientID, clientSecret: secret)
    }
}

/// A token endpoint's answer (RFC 6749 §5.1).
public struct TokenResponse: Sendable, Codable, Equatable {
    public var accessToken: String
    public var expiresIn: Int?
    public var refreshToken: String?
    public var scope: String?
    public var tokenType: String?
    public var idToken: String?

    enum CodingKeys: String, CodingKey {
        case accessToken = "access_token"
        case expiresIn = "expires_in"
        case refreshToken = "refresh_token"
        case scope
        case
            tokenType = "token_type"
        case idToken = "id_token"
    }
}

/// Talks to Google's token and revocation endpoints, found in the OpenID configuration: https (or http to this
/// machine) only, and never following a redirect, as the requests carry the client secret and refresh tokens.
public struct OAuthClient: Sendable {
    public enum Failure: Error, Sendable, Equatable {
        /// No client secret is configured for this client ID.
        case unknownClient
        /// The provider refused (for instance `invalid_grant` for a revoked refresh token).
        case refused(status: Int, error: String)
        /// The provider could not be reached or answered nonsense.
        case unavailable(String)
    }

    let provider: IssuerKeys
    let secrets: [String: ClientSecret]

    public init(provider: IssuerKeys, secrets: [ClientSecret]) {
        self.provider = provider
        self.secrets = Dictionary(secrets.map { ($0.clientID, $0) }, uniquingKeysWith: { first, _ in first })
    }

    public func exchange(code: String, codeVerifier: String?, redirectURI: String, clientID: String) async throws(Failure) -> TokenResponse {
        var form = ["grant_type": "authorization_code", "code": code, "redirect_uri": redirectURI]
        if let codeVerifier { form["code_verifier"] = codeVerifier }
        return try await tokenRequest(form, clientID: clientID)
    }

    public func refresh(refreshToken: String, clientID: String) async throws(Failure) -> TokenResponse {
        try await tokenRequest(["grant_type": "refresh_token", "refresh_token": refreshToken], clientID: clientID)
    }

    /// Revokes a token at the provider. A token the provider no longer knows counts as revoked.
    public func revoke(token: String) async throws(Failure) {
        let endpoint = try await endpoint(\.revocation, "revocation_endpoint")
        let (status, body) = try await post(endpoint, form: ["token": token])
        if status == 200 { return }
        let error = Self.errorCode(body)
        if status == 400, error == "invalid_token" || error == "invalid_grant" { return }
        throw .refused(status: status, error: error)
    }

    private func tokenRequest(_ form: [String: String], clientID: String) async throws(Failure) -> TokenResponse {
        guard let secret = secrets[clientID] else { throw .unknownClient }
        var form = form
        form["client_id"] = secret.clientID
        form["client_secret"] = secret.clientSecret
        let endpoint = try await endpoint(\.token, "token_endpoint")
        let (status, body) = try await post(endpoint, form: form)
        guard status == 200 else {
            if (400..<500).contains(status) { throw .refused(status: status, error: Self.errorCode(body)) }
            throw .unavailable("the token endpoint answered HTTP \(status)")
        }
        guard let response = try? JSONDecoder().decode(TokenResponse.self, from: body) else {
            throw .unavailable("the token endpoint's answer is not a token response")
        }
        return response
    }

    private func endpoint(_ path: KeyPath<IssuerKeys.Endpoints, String?>, _ name: String) async throws(Failure) -> String {
        let endpoints: IssuerKeys.Endpoints
        do { endpoints = try await provider.oauthEndpoints() } catch { throw .unavailable("the OpenID configuration is unavailable") }
        guard let url = endpoints[keyPath: path] else { throw .unavailable("the OpenID configuration names no \(name)") }
        guard URLPolicy.isHTTPSOrLoopback(url) else { throw .unavailable("the OpenID configuration's \(name) is not https") }
        // The client secret and refresh tokens go there: never to a link-local or metadata address either.
        guard URLPolicy.subscriberURLProblem(url) == nil else {
            throw .unavailable("the OpenID configuration's \(name) is not an address the service sends credentials to")
        }
        return url
    }

    private func post(_ url: String, form: [String: String]) async throws(Failure) -> (Int, Data) {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
        request.headers.add(name: "Accept", value: "application/json")
        request.body = .bytes(ByteBuffer(string: FormEncoding.encode(form)))
        do {
            let response = try await HTTPClient.withoutRedirects.execute(request, timeout: .seconds(15))
            let body = try await response.body.collect(upTo: 1 << 20)
            return (Int(response.status.code), Data(buffer: body))
        } catch {
            throw .unavailable("\(url) could not be reached")
        }
    }

    static func errorCode(_ body: Data) -> String {
        (try? JSONValue.parse(body))?.objectValue?["error"]?.stringValue ?? "unknown_error"
    }
}
