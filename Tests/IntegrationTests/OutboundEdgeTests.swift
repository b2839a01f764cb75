import AsyncHTTPClient
import DevTransmitter
import Foundation
import Hummingbird
import NIOCore
import RISC
import RISCKeys
import ServiceLifecycle
import Synchronization
import Testing

/// Serves `router` on 127.0.0.1 while `body` runs, with the server's base URL (`http://127.0.0.1:PORT`).
func servingLocally<T: Sendable>(_ router: Router<BasicRequestContext>, _ body: @Sendable (String) async throws -> T) async throws -> T {
    let (ports, port) = AsyncStream.makeStream(of: Int.self)
    let app = Application(
        router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0), serverName: nil),
        onServerRunning: { channel in port.yield(channel.localAddress?.port ?? 0) }, logger: Harness.logger)
    let group = ServiceGroup(configuration: .init(services: [.init(service: app)], logger: Harness.logger))
    return try await withThrowingTaskGroup(of: Void.self) { tasks in
        tasks.addTask { try await group.run() }
        var iterator = ports.makeAsyncIterator()
        let base = "http://127.0.0.1:\(await iterator.next()!)"
        do {
            let result = try await body(base)
            await group.triggerGracefulShutdown()
            return result
        } catch {
            await group.triggerGracefulShutdown()
            throw error
        }
    }
}

/// What reached a test server, in order.
final class Recorded: Sendable {
    let items = Mutex<[String]>([])
    var all: [String] { items.withLock { $0 } }
    func append(_ item: String) { items.withLock { $0.append(item) } }
}

/// What the service sends out: to Google's OAuth endpoints, and to subscribers.
@Suite("The outbound edges")
struct OutboundEdgeTests {
    /// An OpenID provider on loopback whose token and revocation endpoints redirect (307 and 308, which keep the
    /// body) to a page that records what reaches it; `endpoints` may name other endpoints instead.
    static func provider<T: Sendable>(
        endpoints: (@Sendable (String) -> (token: String, revocation: String))? = nil,
        _ body: @Sendable (_ discoveryURL: String, _ stolen: Recorded) async throws -> T
    ) async throws -> T {
        let keys = try await DevTransmitter(settings: .init(port: 0, audience: Harness.audience), logger: Harness.logger).jwks()
        let stolen = Recorded()
        let router = Router()
        let base = Mutex("")
        router.get("/.well-known/openid-configuration") { _, _ -> Response in
            let root = base.withLock { $0 }
            let (token, revocation) = endpoints?(root) ?? (root + "/token", root + "/revoke")
            let document: JSONValue = [
                "issuer": "https://accounts.google.com", "jwks_uri": .string(root + "/jwks"), "token_endpoint": .string(token),
                "revocation_endpoint": .string(revocation),
            ]
            return Response(
                status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: document.serialized)))
        }
        router.get("/jwks") { _, _ -> Response in
            Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: keys.serialized)))
        }
        router.post("/token") { _, _ in Response(status: .temporaryRedirect, headers: [.location: base.withLock { $0 } + "/stolen"]) }
        router.post("/revoke") { _, _ in Response(status: .permanentRedirect, headers: [.location: base.withLock { $0 } + "/stolen"]) }
        router.post("/stolen") { request, _ -> Response in
            var request = request
            let text = String(buffer: try await request.collectBody(upTo: 1 << 20))
            stolen.append(text)
            return Response(
                status: .ok, headers: [.contentType: "application/json"],
                body: .init(byteBuffer: ByteBuffer(string: #"{"access_token": "stolen", "expires_in": 3600}"#)))
        }
        return try await servingLocally(router) { root in
            base.withLock { $0 = root }
            return try await body(root + "/.well-known/openid-configuration", stolen)
        }
    }

    static func oauthClient(_ discoveryURL: String) -> OAuthClient {
        let keys = IssuerKeys(settings: .init(discoveryURL: discoveryURL, allowedAlgorithms: ["RS256"]), logger: Harness.logger)
        return OAuthClient(provider: keys, secrets: [ClientSecret(clientID: "client", clientSecret: "the-client-secret")])
    }

    @Test("The OAuth calls follow no redirect: a 307 or 308 never carries the client secret or a token elsewhere")
    func oauthFollowsNoRedirect() async throws {
        try await Self.provider { discoveryURL, stolen in
            let oauth = Self.oauthClient(discoveryURL)
            await #expect(throws: OAuthClient.Failure.self) {
                _ = try await oauth.refresh(refreshToken: "1//a-refresh-token", clientID: "client")
            }
            await #expect(throws: OAuthClient.Failure.self) {
                _ = try await oauth.exchange(code: "a-code", codeVerifier: nil, redirectURI: "http://127.0.0.1/cb", clientID: "client")
            }
            await #expect(throws: OAuthClient.Failure.self) { try await oauth.revoke(token: "1//a-refresh-token") }
            #expect(stolen.all.isEmpty, "\(stolen.all)")
        }
    }

    @Test("An OAuth endpoint named by the OpenID configuration must be https (or loopback), as the key documents")
    func oauthEndpointsMustBeHTTPS() async throws {
        let insecure: @Sendable (String) -> (token: String, revocation: String) = { _ in
            ("http://oauth.example.com/token", "http://oauth.example.com/revoke")
        }
        try await Self.provider(endpoints: insecure) { discoveryURL, _ in
            let oauth = Self.oauthClient(discoveryURL)
            await #expect(throws: OAuthClient.Failure.unavailable("the OpenID configuration's token_endpoint is not https")) {
                _ = try await oauth.refresh(refreshToken: "1//a-refresh-token", clientID: "client")
            }
            await #expect(throws: OAuthClient.Failure.unavailable("the OpenID configuration's revocation_endpoint is not https")) {
                try await oauth.revoke(token: "1//a-refresh-token")
            }
        }
    }
}
