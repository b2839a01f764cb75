import Foundation
import Hummingbird
import HummingbirdAuth
import Logging
import PostgresNIO
import RISC
import RISCStore

/// `/admin/v1/notifications`: the outbox's notifications to subscribers, and replays.
struct AdminNotificationRoutes<Context: RequestContext, Store: NotificationAdministering>: Sendable {
    let store: Store

    func addRoutes(to group: RouterGroup<Context>) {
        group.get("notifications") { request, _ in try await self.notifications(request) }
        group.get("notifications/:id") { _, context in try await self.notification(AdminAPI.id(context, of: "notification")) }
        group.post("notifications/:id/replay") { _, context in
            try await self.replayNotification(AdminAPI.id(context, of: "notification"))
        }
    }

    func notifications(_ request: Request) async throws -> Response {
        try AdminAPI.refuseUnknownParameters(request, known: ["status", "subscriber", "sub", "limit", "cursor"])
        let query = request.uri.queryParameters
        let filter: NotificationOutbox.Filter
        do throws(InvalidParameter) {
            filter = try NotificationOutbox.Filter.parse(
                status: query.get("status"), subscriber: query.get("subscriber"), sub: query.get("sub"), limit: query.get("limit"),
                cursor: query.get("cursor"))
        } catch {
            throw AdminAPI.invalid(error)
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
        switch try await store.replay(id: id) {
        case .replayed:
            return try JSONResponse.make(status: .accepted, encoding: AdminAPI.Replayed(id: id, status: NotificationStatus.pending.rawValue))
        case .notFound: throw APIError(.notFound, "not_found")
        case .pending: throw APIError(.conflict, "not_replayable", description: "the notification is still pending: it will be sent")
        case .subscriberRemoved:
            throw APIError(.conflict, "not_replayable", description: "the notification's subscriber was removed")
        }
    }
}
