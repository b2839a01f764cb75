import AsyncHTTPClient
import Foundation
import JWTKit
import NIOCore
import NIOFoundationCompat
import NIOHTTP1
import RISC

/// A Google service-account key file (`"type": "service_account"`), as the Cloud console downloads it.
public struct ServiceAccountKey: Sendable {
    public let clientEmail: String
    public let privateKeyID: String
    let privateKey: JWTKit.Insecure.RSA.PrivateKey

    public struct Invalid: Error, CustomStringConvertible, Sendable {
        public let description: String
    }

    public init(json data: Data) throws(Invalid) {
        guard let object = try? JSONValue.parse(data).objectValue else { throw Invalid(description: "not a JSON object") }
        guard object["type"]?.stringValue == "service_account" else {
            throw Invalid(description: "not a service-account key (type is not service_account)")
        }
        guard let email = object["client_email"]?.stringValue, !email.isEmpty else { throw Invalid(description: "client_email is missing") }
        guard let keyID = object["private_key_id"]?.stringValue, !keyID.isEmpty else { throw Invalid(description: "private_key_id is missing") }
        guard let pem = object["private_key"]?.stringValue else { throw Invalid(description: "private_key is missing") }
        do {
            privateKey = try JWTKit.Insecure.RSA.PrivateKey(pem: pem)
        } catch {
            throw Invalid(description: "private_key is not an RSA private key in PEM form")
        }
        clientEmail = email
        privateKeyID = keyID
    }

    /// The key file this key would be downloaded as (for the development transmitter).
    public static func file(clientEmail: String, privateKeyID: String, privateKeyPEM: String) -> JSONValue {
        [
            "type": "service_account", "project_id": "risc-dev", "private_key_id": .string(privateKeyID),
            "private_key": .string(privateKeyPEM), "client_email": .string(clientEmail),
            "client_id": "000000000000000000000", "token_uri": "https://oauth2.googleapis.com/token",
        ]
    }

    /// A self-signed RS256 JWT for Google's RISC management API, valid for one hour.
    public func managementToken(now: Date = Date()) async throws -> String {
        let keys = JWTKeyCollection()
        await keys.add(rsa: privateKey, digestAlgorithm: .sha256, kid: JWKIdentifier(string: privateKeyID))
        let iat = now.timeIntervalSince1970.rounded(.down)
        let claims = ManagementClaims(
            iss: .init(value: clientEmail), sub: .init(value: clientEmail), aud: .init(value: [RISCManagement.audience]),
            iat: .init(value: Date(timeIntervalSince1970: iat)), exp: .init(value: Date(timeIntervalSince1970: iat + 3600)))
        return try await keys.sign(claims, kid: JWKIdentifier(string: privateKeyID))
    }
}

/// The claims of a service-account JWT for the management API.
public struct ManagementClaims: JWTPayload, Equatable {
    public var iss: IssuerClaim
    public var sub: SubjectClaim
    public var aud: AudienceClaim
    public var iat: IssuedAtClaim
    public var exp: ExpirationClaim

    /// Checks expiry and audience; the caller checks the issuer against the key it used.
    public func verify(using algorithm: some JWTAlgorithm) async throws {
        try exp.verifyNotExpired()
        try aud.verifyIntendedAudience(includes: RISCManagement.audience)
    }
}

/// Google's RISC management API (`/stream`, `/stream:update`, `/stream/status`, `/stream/status:update`,
/// `/stream:verify`), authenticated with a service-account JWT.
public struct RISCManagement: Sendable {
    public static let audience = "https://risc.googleapis.com/google.identity.risc.v1beta.RiscManagementService"
    public static let defaultBaseURL = "https://risc.googleapis.com/v1beta"
    public static let pushDeliveryMethod = "https://schemas.openid.net/secevent/risc/delivery-method/push"

    public enum Failure: Error, CustomStringConvertible, Sendable {
        /// Google answered with an error; its message is shown as it is.
        case refused(status: Int, message: String)
        case unreachable(String)

        public var description: String {
            switch self {
            case .refused(let status, let message): "Google answered HTTP \(status): \(message)"
            case .unreachable(let reason): reason
            }
        }
    }

    let baseURL: String
    let key: ServiceAccountKey
    let httpClient: HTTPClient

    public init(baseURL: String = Self.defaultBaseURL, key: ServiceAccountKey, httpClient: HTTPClient? = nil) {
        self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
        self.key = key
        self.httpClient = httpClient ?? Self.untraced
    }

    /// `.shared`'s settings without AsyncHTTPClient's spans, which would send a traceparent to Google.
    static let untraced: HTTPClient = {
        var configuration = HTTPClient.Configuration()
        configuration.tracing.tracer = nil
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }()

    public func stream() async throws(Failure) -> JSONValue {
        try await call(.GET, "/stream")
    }

    public func update(url: String, events: [String]) async throws(Failure) {
        _ = try await call(
            .POST, "/stream:update",
            body: JSONValue.object([
                "delivery": ["delivery_method": .string(Self.pushDeliveryMethod), "url": .string(url)],
                "events_requested": .array(events.map(JSONValue.string)),
            ]))
    }

    public func status() async throws(Failure) -> JSONValue {
        try await call(.GET, "/stream/status")
    }

    public func setStatus(enabled: Bool) async throws(Failure) {
        _ = try await call(.POST, "/stream/status:update", body: ["status": enabled ? "enabled" : "disabled"])
    }

    public func verify(state: String) async throws(Failure) {
        _ = try await call(.POST, "/stream:verify", body: ["state": .string(state)])
    }

    private func call(_ method: HTTPMethod, _ path: String, body: JSONValue? = nil) async throws(Failure) -> JSONValue {
        let token: String
        do { token = try await key.managementToken() } catch { throw .unreachable("cannot sign the service-account JWT: \(error)") }
        let status: Int
        let data: Data
        do {
            (status, data) = try await httpClient.callJSON(method, baseURL + path, bearer: token, json: body)
        } catch {
            throw .unreachable("cannot reach \(baseURL): \(error)")
        }
        let json = (try? JSONValue.parse(data)) ?? .null
        guard (200..<300).contains(status) else {
            // Google's errors: {"error": {"code", "message", "status"}}.
            let message =
                json["error"]?["message"]?.stringValue ?? json["error"]?.stringValue
                ?? String(decoding: data, as: UTF8.self)
            throw .refused(status: status, message: message)
        }
        return json
    }
}
