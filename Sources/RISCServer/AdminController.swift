import Foundation
import Hummingbird
import HummingbirdAuth
import Logging
import PostgresNIO
import RISC
import RISCStore

/// The admin API under `/admin/v1`, for scripts. Every route needs
/// `Authorization: Bearer $RISC_ADMIN_TOKEN` (checked by the group's middleware); without that setting the
/// routes do not exist.
public struct AdminController<Context: AuthRequestContext<BearerIdentity>, Store: AdminStore>: Sendable {
    let adminToken: String
    let store: Store

    public init(adminToken: String, store: Store) {
        self.adminToken = adminToken
        self.store = store
    }

    public func addRoutes(to router: Router<Context>) {
        let group = router.group("/admin/v1").requiringBearer(adminToken, as: .admin).add(middleware: DatabaseUnavailable())
        group.get("openapi.json") { _, _ in JSONResponse.make(status: .ok, json: AdminOpenAPI.document) }
        group.get("events") { request, _ in try await self.events(request) }
        group.get("events/:id") { _, context in try await self.event(Self.id(context, of: "event")) }
        group.post("events/:id/replay") { _, context in try await self.replay(Self.id(context, of: "event")) }
        group.get("events/:id/explain") { _, context in try await self.explain(Self.id(context, of: "event")) }
        group.get("users/:sub") { _, context in try await self.user(context.parameters.get("sub")) }
        group.get("stats") { _, _ in try JSONResponse.make(status: .ok, encoding: try await self.store.stats()) }
        group.get("subscribers") { _, _ in
            try JSONResponse.make(status: .ok, encoding: SubscriberList(try await self.store.subscribers()))
        }
        group.post("subscribers") { request, context in try await self.addSubscriber(request, context: context) }
        group.delete("subscribers/:id") { _, context in try await self.removeSubscriber(Self.id(context, of: "subscriber")) }
        group.post("subscribers/:id/rotate-secret") { _, context in
            try await self.rotateSecret(Self.id(context, of: "subscriber"))
        }
        group.get("notifications") { request, _ in try await self.notifications(request) }
        group.get("notifications/:id") { _, context in try await self.notification(Self.id(context, of: "notification")) }
        group.post("notifications/:id/replay") { _, context in
            try await self.replayNotification(Self.id(context, of: "notification"))
        }
    }

    func events(_ request: Request) async throws -> Response {
        try Self.refuseUnknownParameters(request, known: ["status", "type", "sub", "since", "until", "limit", "cursor"])
        let query = request.uri.queryParameters
        let filter: AdminQueries.EventFilter
        do throws(AdminQueries.InvalidParameter) {
            filter = try AdminQueries.EventFilter.parse(
                status: query.get("status"), type: query.get("type"), sub: query.get("sub"), since: query.get("since"),
                until: query.get("until"), limit: query.get("limit"), cursor: query.get("cursor"))
        } catch {
            throw Self.invalid(error)
        }
        return try JSONResponse.make(status: .ok, encoding: try await store.events(filter))
    }

    func event(_ id: Int64) async throws -> Response {
        guard let event = try await store.event(id: id) else { throw APIError(.notFound, "not_found") }
        return try JSONResponse.make(status: .ok, encoding: event)
    }

    func explain(_ id: Int64) async throws -> Response {
        guard let explanation = try await store.explainEvent(id: id) else { throw APIError(.notFound, "not_found") }
        return try JSONResponse.make(status: .ok, encoding: explanation)
    }

    func replay(_ id: Int64) async throws -> Response {
        switch try await store.replayEvent(id: id) {
        case .replayed: return try JSONResponse.make(status: .accepted, encoding: Replayed(id: id, status: EventStatus.pending.rawValue))
        case .notFound: throw APIError(.notFound, "not_found")
        case .ignored:
            throw APIError(.conflict, "not_replayable", description: "the event has no known type, so nothing to do")
        }
    }

    func user(_ sub: String?) async throws -> Response {
        guard let sub, !sub.isEmpty else { throw Self.invalid(.init(name: "sub", problem: "is required")) }
        guard let user = try await store.user(sub: sub) else { throw APIError(.notFound, "not_found") }
        return try JSONResponse.make(status: .ok, encoding: user)
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

        enum CodingKeys: String, CodingKey { case id, secret, previousSecretKept = "previous_secret_kept" }
    }

    /// 202 to a replay: the event or notification waits again.
    struct Replayed: Encodable {
        var id: Int64
        var status: String
    }

    func addSubscriber(_ request: Request, context: Context) async throws -> Response {
        let body = try await request.decode(as: NewSubscriberBody.self, context: context)
        guard let url = body.url else { throw Self.invalid(.init(name: "url", problem: "is required")) }
        let subscriber: NotificationStore.NewSubscriber
        do throws(AdminQueries.InvalidParameter) {
            subscriber = try NotificationStore.NewSubscriber(url: url, secret: body.secret, actions: body.actions)
        } catch {
            throw Self.invalid(error)
        }
        let id = try await Self.sealing { try await store.addSubscriber(subscriber) }
        return try JSONResponse.make(status: .created, encoding: SubscriberCreated(id: id, secret: subscriber.secret), headers: Self.noStore)
    }

    /// 200 `{"id", "secret", "previous_secret_kept"}`: the new secret, shown this once; the old one signs beside it
    /// for 24 hours, unless it could not be opened (`previous_secret_kept` false).
    func rotateSecret(_ id: Int64) async throws -> Response {
        guard let rotation = try await Self.sealing({ try await store.rotateSubscriberSecret(id: id) }) else {
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
        } catch let error as NotificationStore.VaultKeyMissing {
            throw APIError(.conflict, "vault_key_required", description: error.description)
        } catch let error as NotificationStore.ConfiguredSubscriber {
            throw APIError(.conflict, "configured_subscriber", description: error.description)
        }
    }

    func removeSubscriber(_ id: Int64) async throws -> Response {
        guard try await store.removeSubscriber(id: id) else { throw APIError(.notFound, "not_found") }
        return Response(status: .noContent)
    }

    func notifications(_ request: Request) async throws -> Response {
        try Self.refuseUnknownParameters(request, known: ["status", "subscriber", "sub", "limit", "cursor"])
        let query = request.uri.queryParameters
        let filter: NotificationStore.Filter
        do throws(AdminQueries.InvalidParameter) {
            filter = try NotificationStore.Filter.parse(
                status: query.get("status"), subscriber: query.get("subscriber"), sub: query.get("sub"), limit: query.get("limit"),
                cursor: query.get("cursor"))
        } catch {
            throw Self.invalid(error)
        }
        return try JSONResponse.make(status: .ok, encoding: try await store.notifications(filter))
    }

    func notification(_ id: Int64) async throws -> Response {
        guard let record = try await store.notification(id: id) else {
            throw APIError(.notFound, "not_found")
        }
        return try JSONResponse.make(status: .ok, encoding: record)
    }

    func replayNotification(_ id: Int64) async throws -> Response {
        switch try await store.replayNotification(id: id) {
        case .replayed:
            return try JSONResponse.make(status: .accepted, encoding: Replayed(id: id, status: NotificationStatus.pending.rawValue))
        case .notFound: throw APIError(.notFound, "not_found")
        case .pending: throw APIError(.conflict, "not_replayable", description: "the notification is still pending: it will be sent")
        }
    }

    /// The query parameters, refusing one the route does not know (a misspelt filter must not widen a listing).
    static func refuseUnknownParameters(_ request: Request, known: Set<String>) throws {
        if let unknown = request.uri.queryParameters.map({ String($0.key) }).first(where: { !known.contains($0) }) {
            throw Self.invalid(AdminQueries.InvalidParameter(name: unknown, problem: "is not a parameter of this route"))
        }
    }

    /// The route's `:id`, refused with the API's own error body when it is not a number.
    static func id(_ context: Context, of thing: String) throws -> Int64 {
        do {
            return try context.parameters.require("id", as: Int64.self)
        } catch {
            throw invalid(.init(name: "id", problem: "must be a \(thing) id (a number)"))
        }
    }

    static func invalid(_ error: AdminQueries.InvalidParameter) -> APIError {
        APIError(.badRequest, "invalid_parameter", description: error.description, parameter: error.name)
    }
}

/// The database down, or slower than RISC_DATABASE_TIMEOUT, is 503 `unavailable` with Retry-After, as for the
/// app's calls: an operator's script can tell it from a bad request and retry.
struct DatabaseUnavailable<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch where DatabaseErrors.isUnavailable(error) {
            context.logger.warning("The database is unavailable", metadata: ["error": "\(DatabaseErrors.describe(error))"])
            throw APIError(.serviceUnavailable, "unavailable", retryAfter: 5)
        }
    }
}
