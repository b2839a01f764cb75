import Hummingbird
import HummingbirdAuth
import RISC

/// Vouches for a request whose `Authorization: Bearer` token is one configured secret, as that secret's identity.
public struct BearerTokenAuthenticator<Context: AuthRequestContext<BearerIdentity>>: AuthenticatorMiddleware {
    let secret: String
    let identity: BearerIdentity

    public init(secret: String, identity: BearerIdentity) {
        self.secret = secret
        self.identity = identity
    }

    public func authenticate(request: Request, context: Context) async throws -> BearerIdentity? {
        // `bearerToken`, not HummingbirdAuth's `headers.bearer`: the scheme is case-insensitive (RFC 9110 §11.1)
        // and the session routes parse it the same way. Constant time, so no byte of the secret leaks by timing.
        guard let presented = request.bearerToken, SecretComparison.equal(presented, secret) else { return nil }
        return identity
    }
}

/// Refuses with the API's 401 body every request that its group's authenticator did not vouch for as `identity`.
public struct RequireBearerIdentity<Context: AuthRequestContext<BearerIdentity>>: RouterMiddleware {
    let identity: BearerIdentity

    public init(_ identity: BearerIdentity) { self.identity = identity }

    public func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard context.identity == identity else {
            throw APIError(.unauthorized, "unauthorized", description: "a valid \(identity.rawValue) token is required")
        }
        return try await next(request, context)
    }
}

extension RouterGroup where Context: AuthRequestContext<BearerIdentity> {
    /// Routes added to the returned group need `Authorization: Bearer <secret>`; without it they answer 401.
    /// Unknown paths stay 404: the middleware runs only once a route has matched.
    func requiringBearer(_ secret: String, as identity: BearerIdentity) -> RouterGroup<Context> {
        add(middleware: BearerTokenAuthenticator(secret: secret, identity: identity))
            .add(middleware: RequireBearerIdentity(identity))
    }
}
