/// How the service authorises its calls to a transmitter's stream endpoints.
public enum StreamAuthorization: Sendable, Equatable {
    /// OAuth 2.0 client credentials (RFC 6749 §4.4). `secret` is the client secret, or for `privateKeyJWT` the private
    /// key in PEM. `tokenEndpoint` nil: discovered from the issuer's OAuth metadata.
    case clientCredentials(clientID: String, method: ClientAuthentication, secret: String, scope: String, tokenEndpoint: String?)
    /// A fixed bearer token the transmitter issued.
    case bearer(token: String)

    /// How the client proves itself at the token endpoint.
    public enum ClientAuthentication: String, Sendable, CaseIterable, Codable {
        case clientSecretBasic = "client_secret_basic"
        case clientSecretPost = "client_secret_post"
        case privateKeyJWT = "private_key_jwt"
    }

    public static let defaultScope = "ssf.read ssf.manage"

    /// The stored name of the method: a client authentication method, or `bearer`.
    public var methodName: String {
        switch self {
        case .clientCredentials(_, let method, _, _, _): method.rawValue
        case .bearer: "bearer"
        }
    }

    /// The token endpoint the operator named; nil: discovered (or a bearer token).
    public var tokenEndpoint: String? {
        if case .clientCredentials(_, _, _, _, let endpoint) = self { return endpoint }
        return nil
    }

    /// What is sealed: the client secret, the private key or the bearer token.
    public var secret: String {
        switch self {
        case .clientCredentials(_, _, let secret, _, _): secret
        case .bearer(let token): token
        }
    }
}

/// A transmitter as an operator registers it, checked: its name, its issuer (an https URL, http only on loopback), how
/// its SETs are delivered, the event types asked for, and the authorization for its stream endpoints.
public struct NewTransmitter: Sendable, Equatable {
    public let name: TransmitterName
    public let issuer: String
    /// Where to read the metadata; nil: the issuer's well-known URL.
    public let configURL: String?
    public let delivery: DeliveryMethod
    /// Event-type URIs.
    public let eventsRequested: [String]
    public let authorization: StreamAuthorization

    public init(
        name: String, issuer: String, configURL: String? = nil, delivery: DeliveryMethod = .push, events: [String]? = nil,
        authorization: StreamAuthorization
    ) throws(InvalidParameter) {
        self.name = try TransmitterName(name)
        guard URLPolicy.isHTTPSOrLoopback(issuer), WellKnownURL.inserting(WellKnownURL.sharedSignals, into: issuer) != nil else {
            throw InvalidParameter(name: "issuer", problem: "must be an https:// URL (http:// only on loopback), without query or fragment")
        }
        // Google is the built-in transmitter: another registered with its issuer would speak for it.
        guard !Subject.googleSignInIssuers.contains(issuer) else {
            throw InvalidParameter(name: "issuer", problem: "is Google's: Google is the built-in transmitter google")
        }
        self.issuer = issuer
        let issuerIsLocal = TransmitterMetadata.isLoopback(issuer)
        for (name, url) in [("config-url", configURL), ("token-endpoint", authorization.tokenEndpoint)] {
            guard let url else { continue }
            guard URLPolicy.isHTTPSOrLoopback(url), issuerIsLocal || !TransmitterMetadata.isLoopback(url) else {
                throw InvalidParameter(name: name, problem: "must be an https:// URL (http:// on loopback only for a transmitter on loopback)")
            }
            if let problem = URLPolicy.subscriberURLProblem(url) { throw InvalidParameter(name: name, problem: problem) }
        }
        self.configURL = configURL
        self.delivery = delivery
        if let events {
            guard !events.isEmpty else { throw InvalidParameter(name: "events", problem: "names no event type") }
            eventsRequested = try events.map { (value) throws(InvalidParameter) -> String in
                if let type = EventType(uriOrShortName: value) { return type.rawValue }
                // Another transmitter may offer types this service does not act on: asked for by URI, stored, notified.
                guard value.hasPrefix("https://") || value.hasPrefix("urn:"), ClaimBounds.fits(value) else {
                    throw InvalidParameter(name: "events", problem: "\(value) is neither a known short name nor an event-type URI")
                }
                return value
            }
        } else {
            eventsRequested = StreamRequest.defaultEventTypes
        }
        switch authorization {
        case .clientCredentials(let clientID, _, let secret, let scope, _):
            guard !clientID.isEmpty else { throw InvalidParameter(name: "client-id", problem: "is empty") }
            guard !secret.isEmpty else { throw InvalidParameter(name: "client-secret", problem: "is empty") }
            guard !scope.isEmpty else { throw InvalidParameter(name: "scope", problem: "is empty") }
        case .bearer(let token):
            guard !token.isEmpty, !token.contains(where: \.isWhitespace) else {
                throw InvalidParameter(name: "bearer", problem: "must be one token, without spaces")
            }
        }
        self.authorization = authorization
    }
}

extension NewTransmitter {
    /// The fields of `transmitters add` in snake_case, as the admin API and RISC_TRANSMITTERS take them: `name`,
    /// `issuer`, `config_url`, `delivery`, `events`, and `client_id` with `client_secret` (or `client_key`, PEM, for
    /// private_key_jwt), `token_auth`, `scope`, `token_endpoint`; or `bearer`. The credential is sealed and never
    /// returned.
    public init(json body: JSONValue) throws(InvalidParameter) {
        guard let fields = body.objectValue else { throw InvalidParameter(name: "body", problem: "must be a JSON object") }
        func text(_ name: String) throws(InvalidParameter) -> String? {
            guard let value = fields[name], value != .null else { return nil }
            guard let text = value.stringValue else { throw InvalidParameter(name: name, problem: "must be a string") }
            return text
        }
        guard let name = try text("name") else { throw InvalidParameter(name: "name", problem: "is required") }
        guard let issuer = try text("issuer") else { throw InvalidParameter(name: "issuer", problem: "is required") }
        guard let delivery = DeliveryMethod(rawValue: try text("delivery") ?? DeliveryMethod.push.rawValue) else {
            throw InvalidParameter(name: "delivery", problem: "must be push or poll")
        }
        var events: [String]?
        if let value = fields["events"], value != .null {
            guard let list = value.arrayValue?.compactMap(\.stringValue), list.count == value.arrayValue?.count else {
                throw InvalidParameter(name: "events", problem: "must be a list of strings")
            }
            events = list
        }
        let (clientID, clientSecret, clientKey) = (try text("client_id"), try text("client_secret"), try text("client_key"))
        let authorization: StreamAuthorization
        if let bearer = try text("bearer") {
            guard clientID == nil, clientSecret == nil, clientKey == nil else {
                throw InvalidParameter(name: "bearer", problem: "is given alone, without client credentials")
            }
            authorization = .bearer(token: bearer)
        } else {
            guard let clientID else { throw InvalidParameter(name: "client_id", problem: "is required without bearer") }
            let method: StreamAuthorization.ClientAuthentication
            if let tokenAuth = try text("token_auth") {
                guard let given = StreamAuthorization.ClientAuthentication(rawValue: tokenAuth) else {
                    throw InvalidParameter(name: "token_auth", problem: "must be client_secret_basic, client_secret_post or private_key_jwt")
                }
                method = given
            } else {
                method = clientKey != nil ? .privateKeyJWT : .clientSecretBasic
            }
            let secretField = method == .privateKeyJWT ? "client_key" : "client_secret"
            guard let secret = method == .privateKeyJWT ? clientKey : clientSecret else {
                throw InvalidParameter(name: secretField, problem: "is required for \(method.rawValue)")
            }
            authorization = .clientCredentials(
                clientID: clientID, method: method, secret: secret, scope: try text("scope") ?? StreamAuthorization.defaultScope,
                tokenEndpoint: try text("token_endpoint"))
        }
        try self.init(
            name: name, issuer: issuer, configURL: try text("config_url"), delivery: delivery, events: events, authorization: authorization)
    }
}
