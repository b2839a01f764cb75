import AsyncHTTPClient
import Foundation
import Hummingbird
import Logging
import NIOCore
import RISC
import RISCKeys
import Synchronization

/// A local stand-in for Google: RISC discovery document, OpenID configuration, JWKS with rotation,
/// token and revocation endpoints, and signing and pushing SETs and ID tokens on command; and beside it a Shared
/// Signals transmitter under `/ssf` (`DevSharedSignals`). It listens on loopback only.
public final class DevTransmitter: Sendable {
    public struct Settings: Sendable {
        public var port: Int
        /// Where SETs are pushed unless a request names another target.
        public var receiverURL: String
        /// The `aud` of the SETs and ID tokens, and the OAuth client ID: one of the receiver's client IDs.
        public var audience: String
        /// The OAuth client's secret, as in the client-secret file this transmitter writes.
        public var clientSecret: String

        public init(
            port: Int = 8765, receiverURL: String = "http://127.0.0.1:8080/risc/events",
            audience: String = "dev-client.apps.googleusercontent.com", clientSecret: String = "dev-client-secret"
        ) {
            self.port = port
            self.receiverURL = receiverURL
            self.audience = audience
            self.clientSecret = clientSecret
        }
    }

    public static let host = "127.0.0.1"

    let settings: Settings
    let keys: SigningKeys
    let httpClient: HTTPClient
    let logger: Logger
    private let boundPort: Mutex<Int?> = Mutex(nil)
    /// While true, the discovery document and JWKS answer 503 (to test a transmitter outage).
    let keysOutage = Atomic<Bool>(false)
    let oauth = DevOAuthState()
    let management: DevManagementAPI
    let sharedSignals: DevSharedSignals

    public init(settings: Settings, httpClient: HTTPClient = .shared, logger: Logger) async throws {
        self.settings = settings
        self.keys = try await SigningKeys()
        self.management = try DevManagementAPI()
        self.sharedSignals = try await DevSharedSignals()
        self.httpClient = httpClient
        self.logger = logger
    }

    /// The base URL once the server is running (the port may have been chosen by the system).
    public var baseURL: String {
        "http://\(Self.host):\(boundPort.withLock { $0 } ?? settings.port)"
    }

    /// The issuer of every SET this transmitter signs.
    public var issuer: String { baseURL + "/" }
    public var discoveryURL: String { baseURL + "/.well-known/risc-configuration" }

    public var currentKid: String { keys.current.kid }

    public func rotateKeys(retireOld: Bool) async throws -> String {
        try await keys.rotate(retireOld: retireOld)
    }

    public func setKeysOutage(_ on: Bool) {
        keysOutage.store(on, ordering: .relaxed)
    }

    /// Signs arbitrary claims with the current key (for tests that need malformed but signed tokens).
    public func sign(claims: JSONValue, typ: String? = "secevent+jwt", kid: String? = nil) async throws -> String {
        try await keys.sign(claims: claims, typ: typ, kid: kid)
    }

    /// The JWKS this transmitter publishes.
    public func jwks() throws -> JSONValue {
        try keys.jwks()
    }

    /// Signs a payload given as JSON text, exactly as written.
    public func sign(payloadJSON: String) throws -> String {
        try keys.sign(payloadJSON: payloadJSON)
    }

    struct SignBatchRequest: Decodable {
        var type: String
        var count: Int
        /// The first user's number: SETs name load-user-`first` … load-user-`first + count - 1`.
        var first: Int?
    }

    /// Signs `count` SETs of one type for distinct users, in parallel.
    func signMany(_ batch: SignBatchRequest) async throws -> [String] {
        let workers = max(1, ProcessInfo.processInfo.activeProcessorCount)
        return try await withThrowingTaskGroup(of: [String].self) { group in
            for worker in 0..<workers {
                group.addTask {
                    var tokens: [String] = []
                    for index in stride(from: worker, to: batch.count, by: workers) {
                        tokens.append(try await self.makeSET(SETRequest(type: batch.type, sub: "load-user-\((batch.first ?? 0) + index)")))
                    }
                    return tokens
                }
            }
            return try await group.reduce(into: []) { $0.append(contentsOf: $1) }
        }
    }

    /// Builds and signs the SET a request describes.
    public func makeSET(_ request: SETRequest) async throws -> String {
        try await sign(claims: try SETFactory.claims(for: request, issuer: issuer, audience: settings.audience))
    }

    public struct Delivery: Codable, Sendable {
        public var status: Int
        public var body: String
        public var jti: String?
    }

    /// The receiver did not answer: nothing was delivered.
    public struct ReceiverUnreachable: Error, CustomStringConvertible {
        public let url: String
        public let reason: String
        public var description: String { "cannot reach the receiver at \(url): \(reason)" }
    }

    /// Signs a SET and POSTs it to the receiver, as Google's push delivery does (RFC 8935).
    public func send(_ request: SETRequest) async throws -> Delivery {
        let claims = try SETFactory.claims(for: request, issuer: issuer, audience: settings.audience)
        let token = try await sign(claims: claims)
        let url = request.target ?? settings.receiverURL
        var post = HTTPClientRequest(url: url)
        post.method = .POST
        post.headers.add(name: "Content-Type", value: "application/secevent+jwt")
        post.headers.add(name: "Accept", value: "application/json")
        post.body = .bytes(ByteBuffer(string: token))
        let response: HTTPClientResponse
        do {
            response = try await HTTPClient.failFast.execute(post, timeout: .seconds(30))
        } catch {
            throw ReceiverUnreachable(url: url, reason: NetworkErrors.describe(error))
        }
        let body = try await response.body.collect(upTo: 1 << 20)
        return Delivery(status: Int(response.status.code), body: String(buffer: body), jti: claims["jti"]?.stringValue)
    }

    /// The HTTP application; `onServerRunning` learns the bound port.
    public func makeApplication(onServerRunning: @escaping @Sendable (Int) async -> Void = { _ in }) -> some ApplicationProtocol {
        let router = Router()
        addRoutes(to: router)
        return Application(
            router: router,
            configuration: .init(address: .hostname(Self.host, port: settings.port), serverName: nil),
            onServerRunning: { channel in
                let port = channel.localAddress?.port ?? self.settings.port
                self.boundPort.withLock { $0 = port }
                await onServerRunning(port)
            },
            logger: logger
        )
    }

    func addRoutes(to router: Router<BasicRequestContext>) {
        addOpenIDRoutes(to: router)
        addManagementRoutes(to: router)
        addSharedSignalsRoutes(to: router)
        router.get("/.well-known/risc-configuration") { _, _ in
            guard !self.keysOutage.load(ordering: .relaxed) else { return Response(status: .serviceUnavailable) }
            return Self.json(
                [
                    "issuer": .string(self.issuer),
                    "jwks_uri": .string(self.baseURL + "/jwks"),
                    "delivery_methods_supported": .array([
                        .string("https://schemas.openid.net/secevent/risc/delivery-method/push"), .string("urn:ietf:rfc:8935"),
                    ]),
                ], maxAge: 300)
        }
        router.get("/jwks") { _, _ in
            guard !self.keysOutage.load(ordering: .relaxed) else { return Response(status: .serviceUnavailable) }
            return Self.json(try self.keys.jwks(), maxAge: 300)
        }
        // Control endpoints for tests and `dev` commands.
        router.post("/dev/rotate") { request, _ in
            let retire = request.uri.queryParameters.get("retire") == "true"
            let kid = try await self.rotateKeys(retireOld: retire)
            return Self.json(["kid": .string(kid)])
        }
        router.post("/dev/outage") { request, _ in
            let on = request.uri.queryParameters.get("on") != "false"
            self.setKeysOutage(on)
            return Self.json(["outage": .bool(on)])
        }
        router.post("/dev/sign") { request, context in
            let setRequest = try await request.decode(as: SETRequest.self, context: context)
            return Self.json(["token": .string(try await self.makeSET(setRequest))])
        }
        // Many SETs at once, one per line, each with its own jti (for load tests).
        router.post("/dev/sign-batch") { request, context in
            let batch = try await request.decode(as: SignBatchRequest.self, context: context)
            guard (1...1_000_000).contains(batch.count) else { throw HTTPError(.badRequest, message: "count must be 1...1000000") }
            let tokens = try await self.signMany(batch)
            var headers = HTTPFields()
            headers[.contentType] = "text/plain"
            return Response(status: .ok, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(string: tokens.joined(separator: "\n") + "\n")))
        }
        router.post("/dev/send") { request, context in
            let setRequest = try await request.decode(as: SETRequest.self, context: context)
            do {
                let delivery = try await self.send(setRequest)
                return Self.json([
                    "status": .number(Double(delivery.status)), "body": .string(delivery.body),
                    "jti": delivery.jti.map(JSONValue.string) ?? .null,
                ])
            } catch let error as SETFactory.Invalid {
                throw HTTPError(.badRequest, message: error.description)
            } catch let error as ReceiverUnreachable {
                // Not the transmitter's fault: the caller must be able to tell, and say so.
                throw HTTPError(.badGateway, message: error.description)
            }
        }
    }

    static func json(_ value: JSONValue, maxAge: Int? = nil) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "application/json"
        if let maxAge { headers[.cacheControl] = "public, max-age=\(maxAge)" }
        let data = (try? JSONEncoder().encode(value)) ?? Data()
        return Response(status: .ok, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(data: data)))
    }
}

extension HTTPClient {
    /// For the development tools: a refused connection fails at once. (The shared client keeps retrying it until
    /// the request's deadline, so a mistyped port cost 30 s.)
    public static let failFast: HTTPClient = {
        var configuration = HTTPClient.Configuration()
        configuration.connectionPool.retryConnectionEstablishment = false
        configuration.timeout.connect = .seconds(5)
        return HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
    }()
}
