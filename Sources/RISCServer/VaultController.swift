import Foundation
import Hummingbird
import HummingbirdAuth
import Logging
import RISC
import RISCKeys
import RISCStore

/// The refresh-token vault, for the app's own backend. Every route needs
/// `Authorization: Bearer $RISC_SERVICE_TOKEN` (checked by the group's middleware); without that setting the
/// routes do not exist. Bodies are decoded by the context's decoder, which refuses with `APIError` bodies.
public struct VaultController<Context: AuthRequestContext<BearerIdentity>, Grants: GrantStoring>: Sendable {
    let serviceToken: String
    let grants: Grants
    let oauth: OAuthClient

    public init(serviceToken: String, grants: Grants, oauth: OAuthClient) {
        self.serviceToken = serviceToken
        self.grants = grants
        self.oauth = oauth
    }

    public func addRoutes(to router: Router<Context>) {
        let group = router.group("/v1/grants").requiringBearer(serviceToken, as: .service)
        group.post { request, context in try await operationSpan("vault store") { try await self.store(request, context: context) } }
        group.post("exchange") { request, context in
            try await operationSpan("vault exchange") { try await self.exchange(request, context: context) }
        }
        group.post(":id/token") { request, context in
            try await operationSpan("vault access token") { try await self.accessToken(request, context: context) }
        }
        group.delete(":id") { request, context in try await operationSpan("vault delete") { try await self.delete(request, context: context) } }
    }

    struct StoreRequest: Decodable {
        var sub: String
        var refresh_token: String
        var client_id: String
        var scopes: [String]?
    }

    struct ExchangeRequest: Decodable {
        var code: String
        var code_verifier: String?
        var redirect_uri: String
        var client_id: String
        var sub: String?
    }

    func store(_ request: Request, context: Context) async throws -> Response {
        let body = try await request.decode(as: StoreRequest.self, context: context)
        guard !body.sub.isEmpty, !body.refresh_token.isEmpty, !body.client_id.isEmpty else {
            throw APIError(.badRequest, "invalid_request", description: "sub, refresh_token and client_id must not be empty")
        }
        // Google's refresh tokens are printable ASCII; only then is a token-revoked prefix (16 bytes) unambiguous.
        guard TokenIdentifier.isPrintableASCII(body.refresh_token), body.refresh_token.utf8.count <= 4096 else {
            throw APIError(
                .badRequest, "invalid_request", description: "refresh_token must be printable ASCII (at most 4096 bytes)")
        }
        guard ClaimBounds.fits(body.sub), ClaimBounds.fits(body.client_id) else {
            throw APIError(
                .badRequest, "invalid_request", description: "sub and client_id must be at most \(ClaimBounds.maxIdentifierBytes) bytes")
        }
        let id = try await grants.store(sub: body.sub, clientID: body.client_id, scopes: body.scopes ?? [], refreshToken: body.refresh_token)
        context.logger.info("Stored a grant", metadata: ["grant_id": "\(id)", "sub": "\(body.sub)"])
        return JSONResponse.make(status: .created, json: ["grant_id": .string(id.uuidString.lowercased())])
    }

    func exchange(_ request: Request, context: Context) async throws -> Response {
        let body = try await request.decode(as: ExchangeRequest.self, context: context)
        let tokens: TokenResponse
        do {
            tokens = try await oauth.exchange(
                code: body.code, codeVerifier: body.code_verifier, redirectURI: body.redirect_uri, clientID: body.client_id)
        } catch {
            throw Self.refusal(for: error, context: context)
        }
        guard let refreshToken = tokens.refreshToken else {
            try? await oauth.revoke(token: tokens.accessToken)  // nothing is kept, so nothing stays live
            throw APIError(
                .unprocessableContent, "no_refresh_token",
                description: "the token endpoint issued no refresh token (ask for offline access)")
        }
        // The ID token came straight from the token endpoint over TLS, which vouches for it (OpenID Connect
        // Core §3.1.3.7); its sub names the user when the caller did not.
        let tokenSub = tokens.idToken.flatMap(Self.unverifiedSubject)
        guard let sub = body.sub ?? tokenSub else {
            try? await oauth.revoke(token: refreshToken)
            throw APIError(.badRequest, "invalid_request", description: "sub is required when no id_token is issued")
        }
        if let tokenSub, tokenSub != sub {
            try? await oauth.revoke(token: refreshToken)
            throw APIError(.badRequest, "invalid_request", description: "sub does not match the issued id_token")
        }
        let scopes = tokens.scope?.split(separator: " ").map(String.init) ?? []
        let id = try await grants.store(sub: sub, clientID: body.client_id, scopes: scopes, refreshToken: refreshToken)
        context.logger.info("Stored a grant from a code exchange", metadata: ["grant_id": "\(id)", "sub": "\(sub)"])
        var answer: [String: JSONValue] = [
            "grant_id": .string(id.uuidString.lowercased()), "access_token": .string(tokens.accessToken),
            "token_type": .string(tokens.tokenType ?? "Bearer"),
        ]
        if let expiresIn = tokens.expiresIn { answer["expires_in"] = .number(Double(expiresIn)) }
        if let scope = tokens.scope { answer["scope"] = .string(scope) }
        return JSONResponse.make(status: .ok, json: .object(answer))
    }

    func accessToken(_ request: Request, context: Context) async throws -> Response {
        guard let id = context.parameters.get("id").flatMap(UUID.init(uuidString:)) else {
            throw APIError(.notFound, "not_found")
        }
        let grant: GrantStore.Grant
        switch try await grants.lookup(id: id) {
        case .active(let active): grant = active
        case .revoked: throw APIError(.gone, "grant_revoked")
        case .notFound: throw APIError(.notFound, "not_found")
        }
        let tokens: TokenResponse
        do {
            tokens = try await oauth.refresh(refreshToken: grant.refreshToken, clientID: grant.clientID)
        } catch .refused(_, "invalid_grant") {
            // Google no longer honours the token: revoked there before any event reached us.
            throw APIError(.gone, "grant_revoked", description: "the identity provider refused the refresh token")
        } catch {
            throw Self.refusal(for: error, context: context)
        }
        var answer: [String: JSONValue] = [
            "access_token": .string(tokens.accessToken), "token_type": .string(tokens.tokenType ?? "Bearer"),
        ]
        if let expiresIn = tokens.expiresIn { answer["expires_in"] = .number(Double(expiresIn)) }
        answer["scope"] = .string(tokens.scope ?? grant.scopes.joined(separator: " "))
        return JSONResponse.make(status: .ok, json: .object(answer))
    }

    func delete(_ request: Request, context: Context) async throws -> Response {
        guard let id = context.parameters.get("id").flatMap(UUID.init(uuidString:)) else {
            throw APIError(.notFound, "not_found")
        }
        switch try await grants.lookup(id: id) {
        case .notFound:
            throw APIError(.notFound, "not_found")
        case .revoked:
            break  // already revoked by a RISC event: nothing left to revoke at Google
        case .active(let grant):
            do {
                try await oauth.revoke(token: grant.refreshToken)
            } catch {
                // Keep the grant: deleting it now would leave a live token at Google that we can no longer revoke.
                throw Self.refusal(for: error, context: context)
            }
        }
        _ = try await grants.delete(id: id)
        context.logger.info("Deleted a grant", metadata: ["grant_id": "\(id)"])
        return Response(status: .noContent)
    }

    /// What the caller is told when the identity provider's token or revocation endpoint did not do its part.
    static func refusal(for error: OAuthClient.Failure, context: Context) -> APIError {
        switch error {
        case .unknownClient:
            return APIError(.badRequest, "unknown_client", description: "no client secret is configured for this client_id")
        case .refused(let status, let code):
            context.logger.info("The identity provider refused a token request", metadata: ["status": "\(status)", "error": "\(code)"])
            // A bad code or verifier is the caller's to fix; our own client credentials being refused is not.
            let ours = code == "invalid_client" || status >= 500
            return APIError(
                ours ? .badGateway : .badRequest, code, description: "the identity provider refused the request (HTTP \(status))")
        case .unavailable(let reason):
            context.logger.warning("The identity provider is unavailable", metadata: ["reason": "\(reason)"])
            return APIError(.badGateway, "upstream_unavailable", description: reason)
        }
    }

    /// The `sub` claim of a JWT, signature not checked (see the caller for why that is sound).
    static func unverifiedSubject(_ jwt: String) -> String? {
        guard let jws = try? CompactJWS(jwt) else { return nil }
        return (try? JSONValue.parse(jws.payload))?.objectValue?["sub"]?.stringValue
    }
}
