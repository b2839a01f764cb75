import Crypto
import Foundation
import Hummingbird
import Logging
import RISC

/// A subscriber for trying notifications locally (`risc-receiver dev webhook-sink`): it checks each delivery's
/// Standard Webhooks signature with the subscriber's secret, as an app would, and reports what it received.
/// Answers 204 to a valid delivery and 401 to any other, so a bad signature shows up as retries in the receiver.
public struct WebhookSink: Sendable {
    /// One delivery as received: its webhook-id, and its body if the signature held.
    public struct Received: Sendable {
        public let webhookID: String?
        public let body: JSONValue?
        public let rejection: StandardWebhook.Rejection?
    }

    let key: SymmetricKey
    let port: Int

    public init(key: SymmetricKey, port: Int) {
        self.key = key
        self.port = port
    }

    public func makeApplication(
        logger: Logger, onReady: @escaping @Sendable (Int) async -> Void, onDelivery: @escaping @Sendable (Received) -> Void
    ) -> some ApplicationProtocol {
        let router = Router()
        let key = self.key
        @Sendable func receive(_ request: Request) async throws -> Response {
            var request = request
            let body = try await request.collectBody(upTo: 1 << 20)
            let bytes = Data(buffer: body)
            let headers = request.headers
            func header(_ name: String) -> String? { headers.first { $0.name.canonicalName == name }?.value }
            do throws(StandardWebhook.Rejection) {
                try StandardWebhook.verify(
                    id: header("webhook-id"), timestamp: header("webhook-timestamp"), signatures: header("webhook-signature"),
                    body: bytes, key: key)
            } catch {
                onDelivery(Received(webhookID: header("webhook-id"), body: nil, rejection: error))
                return Response(status: .unauthorized)
            }
            onDelivery(Received(webhookID: header("webhook-id"), body: try? JSONValue.parse(bytes), rejection: nil))
            return Response(status: .noContent)
        }
        // Any path: the root, and everything below it.
        router.post("/") { request, _ in try await receive(request) }
        router.post("**") { request, _ in try await receive(request) }
        return Application(
            router: router, configuration: .init(address: .hostname("127.0.0.1", port: port), serverName: nil),
            onServerRunning: { channel in await onReady(channel.localAddress?.port ?? 0) }, logger: logger)
    }
}
