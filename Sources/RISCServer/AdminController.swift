import Foundation
import Hummingbird
import HummingbirdAuth
import Logging
import RISC
import RISCStore
import RISCWorker

/// The admin API under `/admin/v1` (SPEC §6), for scripts. Every route needs
/// `Authorization: Bearer $RISC_ADMIN_TOKEN` (checked by the group's middleware); without that setting the
/// routes do not exist.
public struct AdminController<Context: AuthRequestContext<BearerIdentity>>: Sendable {
    let adminToken: String
    let queries: AdminQueries
    let queue: EventQueue

    public init(adminToken: String, queries: AdminQueries, queue: EventQueue) {
        self.adminToken = adminToken
        self.queries = queries
        self.queue = queue
    }

    public func addRoutes(to router: Router<Context>) {
        let group = router.group("/admin/v1").requiringBearer(adminToken, as: .admin)
        group.get("openapi.json") { _, _ in JSONResponse.make(status: .ok, json: AdminOpenAPI.document) }
        group.get("events") { request, _ in try await self.events(request) }
        group.get("events/:id") { _, context in try await self.event(context.parameters.get("id")) }
        group.post("events/:id/replay") { _, context in try await self.replay(context.parameters.get("id")) }
        group.get("users/:sub") { _, context in try await self.user(context.parameters.get("sub")) }
        group.get("stats") { _, _ in JSONResponse.make(status: .ok, json: try await self.queries.stats().jsonValue) }
    }

    func events(_ request: Request) async throws -> Response {
        let query = request.uri.queryParameters
        let known: Set<String> = ["status", "type", "sub", "since", "until", "limit", "cursor"]
        if let unknown = query.map({ String($0.key) }).first(where: { !known.contains($0) }) {
            throw Self.invalid(AdminQueries.InvalidParameter(name: unknown, problem: "is not a parameter of this route"))
        }
        let filter: AdminQueries.EventFilter
        do {
            filter = try AdminQueries.EventFilter.parse(
                status: query.get("status"), type: query.get("type"), sub: query.get("sub"), since: query.get("since"),
                until: query.get("until"), limit: query.get("limit"), cursor: query.get("cursor"))
        } catch {
            throw Self.invalid(error)
        }
        return JSONResponse.make(status: .ok, json: try await queries.events(filter).jsonValue)
    }

    func event(_ id: String?) async throws -> Response {
        guard let id = id.flatMap(Int64.init) else {
            throw Self.invalid(.init(name: "id", problem: "must be an event id (a number)"))
        }
        guard let event = try await queries.event(id: id) else { throw APIError(.notFound, "not_found") }
        return JSONResponse.make(status: .ok, json: event.jsonValue)
    }

    func replay(_ id: String?) async throws -> Response {
        guard let id = id.flatMap(Int64.init) else {
            throw Self.invalid(.init(name: "id", problem: "must be an event id (a number)"))
        }
        switch try await queue.replay(id: id) {
        case .replayed: return JSONResponse.make(status: .accepted, json: ["id": .number(Double(id)), "status": .string(EventStatus.pending.rawValue)])
        case .notFound: throw APIError(.notFound, "not_found")
        case .ignored:
            throw APIError(.conflict, "not_replayable", description: "the event has no known type, so nothing to do")
        }
    }

    func user(_ sub: String?) async throws -> Response {
        guard let sub, !sub.isEmpty else { throw Self.invalid(.init(name: "sub", problem: "is required")) }
        guard let user = try await queries.user(sub: sub) else { throw APIError(.notFound, "not_found") }
        return JSONResponse.make(status: .ok, json: user.jsonValue)
    }

    static func invalid(_ error: AdminQueries.InvalidParameter) -> APIError {
        APIError(.badRequest, "invalid_parameter", description: error.description, parameter: error.name)
    }
}
