import CryptoExtras
import Foundation
import Hummingbird
import JWTKit
import RISC
import RISCKeys
import Synchronization

/// A fake of Google's RISC management API (the `stream` commands), backed by a service account whose key
/// file this transmitter writes. `stream:verify` really pushes a verification SET, after answering, as Google does;
/// a disabled stream sends nothing. Tests break delivery through it (`stream:update` elsewhere, a disabled status).
final class DevManagementAPI: Sendable {
    struct Stream {
        var url: String?
        var events: [String] = []
        var enabled = true
    }

    let clientEmail = "risc-dev@risc-dev.iam.gserviceaccount.com"
    let privateKeyID: String
    let privateKey: JWTKit.Insecure.RSA.PrivateKey
    let stream = Mutex(Stream())

    init() throws {
        privateKey = try JWTKit.Insecure.RSA.PrivateKey(backing: try _RSA.Signing.PrivateKey(keySize: .bits2048))
        privateKeyID = UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "")
    }

    var keyFile: JSONValue {
        ServiceAccountKey.file(clientEmail: clientEmail, privateKeyID: privateKeyID, privateKeyPEM: privateKey.pemRepresentation)
    }

    /// Checks the bearer JWT as Google would: our kid, RS256 by our key, iss = sub = the account, the audience, not expired.
    func authenticate(_ request: Request) async -> Bool {
        guard let header = request.headers[.authorization], header.hasPrefix("Bearer ") else { return false }
        let token = String(header.dropFirst("Bearer ".count))
        guard let jws = try? CompactJWS(token), let jwsHeader = try? JSONValue.parse(jws.header),
            jwsHeader["kid"]?.stringValue == privateKeyID, jwsHeader["alg"]?.stringValue == "RS256"
        else { return false }
        let keys = JWTKeyCollection()
        await keys.add(rsa: privateKey.publicKey, digestAlgorithm: .sha256, kid: JWKIdentifier(string: privateKeyID))
        guard let claims = try? await keys.verify(token, as: ManagementClaims.self) else { return false }
        return claims.iss.value == clientEmail && claims.sub.value == clientEmail
    }

    static func googleError(_ status: HTTPResponse.Status, _ message: String, _ code: String) -> Response {
        var response = DevTransmitter.json(["error": ["code": .number(Double(status.code)), "message": .string(message), "status": .string(code)]])
        response.status = status
        return response
    }
}

extension DevTransmitter {
    /// The service-account key file for `risc-receiver stream` (GOOGLE_SERVICE_ACCOUNT_FILE).
    public func serviceAccountFile() -> JSONValue { management.keyFile }

    func addManagementRoutes(to router: Router<BasicRequestContext>) {
        let api = management
        let group = router.group("/v1beta")
        @Sendable func authorized(_ request: Request, _ handler: () async throws -> Response) async throws -> Response {
            guard await api.authenticate(request) else {
                return DevManagementAPI.googleError(.unauthorized, "Request had invalid authentication credentials.", "UNAUTHENTICATED")
            }
            return try await handler()
        }
        group.get("stream") { request, _ in
            try await authorized(request) {
                let stream = api.stream.withLock { $0 }
                guard let url = stream.url else {
                    return DevManagementAPI.googleError(.notFound, "No stream configuration exists for this project.", "NOT_FOUND")
                }
                return Self.json([
                    "delivery": ["delivery_method": .string(RISCManagement.pushDeliveryMethod), "url": .string(url)],
                    "events_requested": .array(stream.events.map(JSONValue.string)),
                ])
            }
        }
        group.post("stream:update") { request, context in
            try await authorized(request) {
                let body = try await Self.jsonBody(request, context: context)
                guard let url = body["delivery"]?["url"]?.stringValue, URL(string: url)?.host != nil else {
                    return DevManagementAPI.googleError(.badRequest, "delivery.url must be a URL.", "INVALID_ARGUMENT")
                }
                let events = body["events_requested"]?.arrayValue?.compactMap(\.stringValue) ?? []
                api.stream.withLock { stream in
                    stream.url = url
                    stream.events = events
                }
                return Self.json([:])
            }
        }
        group.get("stream/status") { request, _ in
            try await authorized(request) {
                Self.json(["status": api.stream.withLock { $0.enabled } ? "enabled" : "disabled"])
            }
        }
        group.post("stream/status:update") { request, context in
            try await authorized(request) {
                let body = try await Self.jsonBody(request, context: context)
                guard let status = body["status"]?.stringValue, ["enabled", "disabled"].contains(status) else {
                    return DevManagementAPI.googleError(.badRequest, "status must be enabled or disabled.", "INVALID_ARGUMENT")
                }
                api.stream.withLock { $0.enabled = status == "enabled" }
                return Self.json([:])
            }
        }
        group.post("stream:verify") { request, context in
            try await authorized(request) {
                let body = try await Self.jsonBody(request, context: context)
                let stream = api.stream.withLock { $0 }
                guard let url = stream.url else {
                    return DevManagementAPI.googleError(.notFound, "No stream configuration exists for this project.", "NOT_FOUND")
                }
                // Like Google: accepted at once and delivered afterwards, so a delivery that fails (the stream points
                // elsewhere, the receiver is down) fails silently; a disabled stream neither sends nor buffers.
                if stream.enabled {
                    var verification = SETRequest(type: "verification")
                    verification.state = body["state"]?.stringValue
                    verification.target = url
                    Task { _ = try? await self.send(verification) }
                }
                return Self.json([:])
            }
        }
    }

    static func jsonBody(_ request: Request, context: BasicRequestContext) async throws -> JSONValue {
        var request = request
        let buffer = try await request.collectBody(upTo: RequestLimits.maxBodyBytes)
        return (try? JSONValue.parse(Data(buffer: buffer))) ?? .null
    }
}
