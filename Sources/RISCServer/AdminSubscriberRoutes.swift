import Foundation
import Hummingbird
import HummingbirdAuth
import Logging
import PostgresNIO
import RISC
import RISCStore

/// `/admin/v1/subscribers`: the services told of actions, and their secrets (shown only when issued).
struct AdminSubscriberRoutes<Context: RequestContext, Store: SubscriberStoring>: Sendable {
    let store: Store

    func addRoutes(to group: RouterGroup<Context>) {
        group.get("subscribers") { _, _ in
            try JSONResponse.make(status: .ok, encoding: SubscriberList(try await self.store.subscribers()))
        }
        group.post("subscribers") { request, context in try await self.addSubscriber(request, context: context) }
        group.delete("subscribers/:id") { _, context in try await self.removeSubscriber(AdminAPI.id(context, of: "subscriber")) }
        group.post("subscribers/:id/rotate-secret") { _, context in
            try await self.rotateSecret(AdminAPI.id(context, of: "subscriber"))
        }
    }

    /// `{"url": ..., "secret": ... (optional), "actions": [...] (optional)}` → 201 `{"id", "secret"}`: the only time
    /// the secret is shown.
    struct NewSubscriberBody: Decodable {
        var url: String?
        var secret: String?
        var actions: [String]?
    }

    /// 201 to an added subscriber.
    struct SubscriberCreated: Encodable {
        var id: Int64
        var secret: String
    }

    /// 200 to rotate-secret: the new secret, and whether the old one still signs beside it.
    struct SecretRotated: Encodable {
        var id: Int64
        var secret: String
        var previousSecretKept: Bool
    }

    func addSubscriber(_ request: Request, context: Context) async throws -> Response {
        let body = try await request.decode(as: NewSubscriberBody.self, context: context)
        guard let url = body.url else { throw AdminAPI.invalid(.init(name: "url", problem: "is required")) }
        let subscriber: NewSubscriber
        do throws(InvalidParameter) {
            subscriber = try NewSubscriber(url: url, secret: body.secret, actions: body.actions)
        } catch {
            throw AdminAPI.invalid(error)
        }
        let id = try await Self.sealing { try await store.add(subscriber) }
        return try JSONResponse.make(status: .created, encoding: SubscriberCreated(id: id, secret: subscriber.secret), headers: Self.noStore)
    }

    /// 200 `{"id", "secret", "previous_secret_kept"}`: the new secret, shown this once; the old one signs beside it
    /// for 24 hours, unless it could not be opened (`previous_secret_kept` false).
    func rotateSecret(_ id: Int64) async throws -> Response {
        guard let rotation = try await Self.sealing({ try await store.rotateSecret(subscriber: id) }) else {
            throw APIError(.notFound, "not_found")
        }
        return try JSONResponse.make(
            status: .ok, encoding: SecretRotated(id: id, secret: rotation.secret, previousSecretKept: rotation.previousKept), headers: Self.noStore)
    }

    /// An answer that shows a secret is kept by no cache.
    static var noStore: HTTPFields { [.cacheControl: "no-store"] }

    /// A call that seals a subscriber's secret: without RISC_VAULT_KEY, 409 `vault_key_required`.
    static func sealing<T>(_ call: () async throws -> T) async throws -> T {
        do {
            return try await call()
        } catch let error as VaultKeyMissing {
            throw APIError(.conflict, "vault_key_required", description: error.description)
        } catch let error as SubscriberStore.ConfiguredSubscriber {
            throw APIError(.conflict, "configured_subscriber", description: error.description)
        }
    }

    func removeSubscriber(_ id: Int64) async throws -> Response {
        guard try await store.remove(subscriber: id) else { throw APIError(.notFound, "not_found") }
        return Response(status: .noContent)
    }
}
