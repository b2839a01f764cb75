import Foundation
import Hummingbird
import Logging
import RISC
import RISCKeys
import RISCMetrics
import RISCStore

/// Sign-in with a Google ID token, and the session checks the app makes on every call.
public struct SessionController<Context: RequestContext, Sessions: SessionStoring>: Sendable {
    let verifier: IDTokenVerifier
    let sessions: Sessions

    public init(verifier: IDTokenVerifier, sessions: Sessions) {
        self.verifier = verifier
        self.sessions = sessions
    }

    public func addRoutes(to router: Router<Context>) {
        router.post("/tokensignin") { request, context in try await operationSpan("sign in") { try await self.signIn(request, context: context) } }
        router.get("/v1/session") { request, context in
            try await operationSpan("check session") { try await self.check(request, context: context) }
        }
        router.delete("/v1/session") { request, context in
            try await operationSpan("sign out") { try await self.signOut(request, context: context) }
        }
    }

    func signIn(_ request: Request, context: Context) async throws -> Response {
        var request = request
        let body: ByteBuffer
        do {
            body = try await request.collectBody(upTo: RequestLimits.maxBodyBytes)
        } catch {
            ServiceMetrics.signIn(outcome: "invalid_token")
            throw APIError(.contentTooLarge, "invalid_request", description: "the body is too large")
        }
        guard let idToken = Self.idToken(in: body, contentType: request.headers[.contentType]) else {
            ServiceMetrics.signIn(outcome: "invalid_token")
            throw APIError(.unauthorized, "invalid_token", description: "the body holds no idtoken")
        }
        let token: GoogleIDToken
        do {
            token = try await verifier.verify(idToken)
        } catch .invalid(let reason) {
            context.logger.info("Refused an ID token", metadata: ["reason": "\(reason)"])
            ServiceMetrics.signIn(outcome: "invalid_token")
            throw APIError(.unauthorized, "invalid_token")
        } catch {
            context.logger.warning("Cannot verify ID tokens: the identity provider's keys are unavailable")
            ServiceMetrics.signIn(outcome: "unavailable")
            throw APIError(.serviceUnavailable, "unavailable", retryAfter: 5)
        }
        let outcome = try await database(context, metric: true) { try await sessions.signIn(token.profile, issuedAt: token.issuedAt) }
        switch outcome {
        case .signedIn(let sessionToken, let expiresAt, let user):
            context.logger.info("Signed in", metadata: ["sub": "\(user.sub)"])
            ServiceMetrics.signIn(outcome: "success")
            return JSONResponse.make(
                status: .ok, json: ["session_token": .string(sessionToken), "expires_at": .timestamp(expiresAt), "user": user.jsonValue])
        case .signInDisabled:
            context.logger.info("Refused a sign-in: disabled by an account-disabled event", metadata: ["sub": "\(token.profile.sub)"])
            ServiceMetrics.signIn(outcome: "account_disabled")
            throw APIError(.forbidden, "account_disabled")
        case .tokenPredatesRevocation:
            context.logger.info(
                "Refused an ID token issued before the user's sessions were revoked", metadata: ["sub": "\(token.profile.sub)"])
            ServiceMetrics.signIn(outcome: "invalid_token")
            throw APIError(.unauthorized, "invalid_token")
        }
    }

    func check(_ request: Request, context: Context) async throws -> Response {
        guard let token = request.bearerToken else { throw APIError(.unauthorized, "invalid_session") }
        let lookup = try await database(context) { try await sessions.lookup(token: token) }
        switch lookup {
        case .valid(let user, let createdAt, let expiresAt, let flags):
            return JSONResponse.make(
                status: .ok,
                json: [
                    "user": user.jsonValue,
                    "session": ["created_at": JSONResponse.timestamp(createdAt), "expires_at": JSONResponse.timestamp(expiresAt)],
                    "flags": .array(flags.names.map(JSONValue.string)),
                ])
        case .revoked:
            throw APIError(.unauthorized, "session_revoked")
        case .invalid:
            throw APIError(.unauthorized, "invalid_session")
        }
    }

    func signOut(_ request: Request, context: Context) async throws -> Response {
        guard let token = request.bearerToken, try await database(context, { try await sessions.end(token: token) }) else {
            throw APIError(.unauthorized, "invalid_session")
        }
        return Response(status: .noContent)
    }

    /// A call to the sessions' store. The database down, or slower than RISC_DATABASE_TIMEOUT, is 503
    /// `unavailable` with Retry-After, as for a SET: the app can tell it from a bad session and retry. Any other
    /// error is ours, and stays a 500.
    func database<T>(_ context: Context, metric: Bool = false, _ call: () async throws -> T) async throws -> T {
        do {
            return try await call()
        } catch  where DatabaseErrors.isUnavailable(error) {
            context.logger.warning("The database is unavailable", metadata: ["error": "\(DatabaseErrors.describe(error))"])
            if metric { ServiceMetrics.signIn(outcome: "unavailable") }
            throw APIError(.serviceUnavailable, "unavailable", retryAfter: 5)
        }
    }

    /// `idtoken=` as a form, or `{"idToken": ...}` as JSON.
    static func idToken(in body: ByteBuffer, contentType: String?) -> String? {
        let text = String(buffer: body)
        if contentType?.lowercased().contains("json") == true {
            return (try? JSONValue.parse(Data(text.utf8)))?.objectValue?["idToken"]?.stringValue
        }
        return FormEncoding.decode(text.trimmingCharacters(in: .whitespacesAndNewlines))["idtoken"]
    }
}
