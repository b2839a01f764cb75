import Foundation
import Hummingbird
import HummingbirdAuth
import Logging
import PostgresNIO
import RISC
import RISCStore

/// `/admin/v1/events`: the stored events, what applying one would do now, and replays.
struct AdminEventRoutes<Context: RequestContext, Store: EventAdministering>: Sendable {
    let store: Store

    func addRoutes(to group: RouterGroup<Context>) {
        group.get("events") { request, _ in try await self.events(request) }
        group.get("events/:id") { _, context in try await self.event(AdminAPI.id(context, of: "event")) }
        group.post("events/:id/replay") { _, context in try await self.replay(AdminAPI.id(context, of: "event")) }
        group.get("events/:id/explain") { _, context in try await self.explain(AdminAPI.id(context, of: "event")) }
    }

    func events(_ request: Request) async throws -> Response {
        try AdminAPI.refuseUnknownParameters(request, known: ["status", "type", "sub", "since", "until", "limit", "cursor"])
        let query = request.uri.queryParameters
        let filter: EventAdmin.Filter
        do throws(InvalidParameter) {
            filter = try EventAdmin.Filter.parse(
                status: query.get("status"), type: query.get("type"), sub: query.get("sub"), since: query.get("since"),
                until: query.get("until"), limit: query.get("limit"), cursor: query.get("cursor"))
        } catch {
            throw AdminAPI.invalid(error)
        }
        return try JSONResponse.make(status: .ok, encoding: try await store.events(filter))
    }

    func event(_ id: Int64) async throws -> Response {
        guard let event = try await store.event(id: id) else { throw APIError(.notFound, "not_found") }
        return try JSONResponse.make(status: .ok, encoding: event)
    }

    func explain(_ id: Int64) async throws -> Response {
        guard let explanation = try await store.explain(id: id) else { throw APIError(.notFound, "not_found") }
        return try JSONResponse.make(status: .ok, encoding: explanation)
    }

    func replay(_ id: Int64) async throws -> Response {
        switch try await store.replay(id: id) {
        case .replayed: return try JSONResponse.make(status: .accepted, encoding: AdminAPI.Replayed(id: id, status: EventStatus.pending.rawValue))
        case .notFound: throw APIError(.notFound, "not_found")
        case .ignored:
            throw APIError(.conflict, "not_replayable", description: "the event has no known type, so nothing to do")
        }
    }
}
