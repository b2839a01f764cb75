import Foundation
import Hummingbird
import HummingbirdAuth
import Logging
import PostgresNIO
import RISC
import RISCStore

/// `/admin/v1/users/:sub` and `/admin/v1/stats`: read-only reports.
struct AdminReportRoutes<Context: RequestContext, Store: AdminReporting>: Sendable {
    let store: Store

    func addRoutes(to group: RouterGroup<Context>) {
        group.get("users/:sub") { _, context in try await self.user(context.parameters.get("sub")) }
        group.get("stats") { _, _ in try JSONResponse.make(status: .ok, encoding: try await self.store.stats()) }
    }

    func user(_ sub: String?) async throws -> Response {
        guard let sub, !sub.isEmpty else { throw AdminAPI.invalid(.init(name: "sub", problem: "is required")) }
        guard let user = try await store.user(sub: sub) else { throw APIError(.notFound, "not_found") }
        return try JSONResponse.make(status: .ok, encoding: user)
    }
}
