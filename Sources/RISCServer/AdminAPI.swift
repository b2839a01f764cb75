import Foundation
import Hummingbird
import HummingbirdAuth
import Logging
import PostgresNIO
import RISC
import RISCStore

/// The admin API under `/admin/v1`, for scripts. Every route needs `Authorization: Bearer $RISC_ADMIN_TOKEN` (checked
/// by the group's middleware); without that setting the routes do not exist. Its routes are grouped by resource,
/// each group with a store of its own.
public enum AdminAPI {
    public static func addRoutes<
        Context: AuthRequestContext<BearerIdentity>, Events: EventAdministering, Reports: AdminReporting, Subscribers: SubscriberStoring,
        Notifications: NotificationAdministering, Transmitters: TransmitterStoring
    >(
        to router: Router<Context>, adminToken: String, events: Events, reports: Reports, subscribers: Subscribers,
        notifications: Notifications, transmitters: Transmitters
    ) {
        let group = router.group("/admin/v1").requiringBearer(adminToken, as: .admin).add(middleware: DatabaseUnavailable())
        group.get("openapi.json") { _, _ in JSONResponse.make(status: .ok, json: AdminOpenAPI.document) }
        AdminEventRoutes<Context, Events>(store: events).addRoutes(to: group)
        AdminReportRoutes<Context, Reports>(store: reports).addRoutes(to: group)
        AdminSubscriberRoutes<Context, Subscribers>(store: subscribers).addRoutes(to: group)
        AdminNotificationRoutes<Context, Notifications>(store: notifications).addRoutes(to: group)
        AdminTransmitterRoutes<Context, Transmitters>(store: transmitters).addRoutes(to: group)
        AdminStreamRoutes<Context, Transmitters>(store: transmitters).addRoutes(to: group)
    }

    /// 202 to a replay: the event or notification waits again.
    struct Replayed: Encodable {
        var id: Int64
        var status: String
    }

    /// The query parameters, refusing one the route does not know (a misspelt filter must not widen a listing).
    static func refuseUnknownParameters(_ request: Request, known: Set<String>) throws {
        if let unknown = request.uri.queryParameters.map({ String($0.key) }).first(where: { !known.contains($0) }) {
            throw invalid(InvalidParameter(name: unknown, problem: "is not a parameter of this route"))
        }
    }

    /// The route's `:id`, refused with the API's own error body when it is not a number.
    static func id<Context: RequestContext>(_ context: Context, of thing: String) throws -> Int64 {
        do {
            return try context.parameters.require("id", as: Int64.self)
        } catch {
            throw invalid(.init(name: "id", problem: "must be a \(thing) id (a number)"))
        }
    }

    static func invalid(_ error: InvalidParameter) -> APIError {
        APIError(.badRequest, "invalid_parameter", description: error.description, parameter: error.name)
    }
}

/// The database down, or slower than RISC_DATABASE_TIMEOUT, is 503 `unavailable` with Retry-After, as for the
/// app's calls: an operator's script can tell it from a bad request and retry.
struct DatabaseUnavailable<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch  where DatabaseErrors.isUnavailable(error) {
            context.logger.warning("The database is unavailable", metadata: ["error": "\(DatabaseErrors.describe(error))"])
            throw APIError(.serviceUnavailable, "unavailable", retryAfter: 5)
        }
    }
}
