import Foundation
import Hummingbird
import Logging
import NIOCore
import PostgresNIO
import RISC
import RISCKeys
import RISCMetrics
import RISCStore
import ServiceLifecycle

/// `/healthz`, `/readyz` and `/metrics`. Probes and scrapes come unauthenticated and as often as anyone likes: each
/// database check they make is shared (`SharedCheck`), so the database answers about one of each per second.
public struct OperationsController<Context: RequestContext>: Sendable {
    static var logger: Logger { Logger(label: "risc-receiver.readiness") }
    /// The migrations and routines this build ships; nil when the directory could not be found.
    let expected: Migrator?
    let keys: [(name: String, keys: IssuerKeys)]
    /// The database's part of readiness: reachable, and which migrations are pending.
    let database: SharedCheck<DatabaseReadiness>
    let backlog: SharedCheck<Backlog?>

    enum DatabaseReadiness: Sendable {
        /// Pending migrations and routines; nil when none was ever applied.
        case reachable(pending: [String]?)
        case unreachable
    }

    public init(postgres: PostgresClient, expected: Migrator?, keys: [(name: String, keys: IssuerKeys)], reports: AdminReports) {
        self.expected = expected
        self.keys = keys
        self.database = SharedCheck {
            do {
                // Within 2 s, or the database counts as unreachable (and the connection is closed, not left leased).
                return .reachable(
                    pending: try await (expected ?? Migrator(migrations: [])).pending(client: postgres, timeout: .seconds(2), logger: Self.logger))
            } catch {
                return .unreachable
            }
        }
        self.backlog = Self.sharedBacklog(reports)
    }

    public func addRoutes(to router: Router<Context>) {
        router.get("/healthz") { _, _ in HTTPResponse.Status.ok }
        router.get("/readyz") { _, _ in await self.readiness() }
        router.get("/metrics") { _, _ in await self.metrics() }
    }

    func readiness() async -> Response {
        var checks: [String: JSONValue] = [:]
        var missing: [JSONValue] = []
        switch await database.value {
        case .reachable(let pending):
            checks["database"] = "ok"
            if let pending, !pending.isEmpty, expected != nil {
                checks["migrations"] = .string("pending: " + pending.joined(separator: ", "))
                missing.append("migrations")
            } else if pending == nil {
                checks["migrations"] = "none applied"
                missing.append("migrations")
            } else {
                checks["migrations"] = expected == nil ? "unchecked (migrations directory not found)" : "ok"
            }
        case .unreachable:
            checks["database"] = "unreachable"
            checks["migrations"] = "unknown"
            missing.append("database")
        }
        for (name, issuer) in keys {
            if await issuer.isLoaded {
                checks[name] = "ok"
            } else {
                checks[name] = "never loaded"
                missing.append(.string(name))
            }
        }
        let ready = missing.isEmpty
        return JSONResponse.make(
            status: ready ? .ok : .serviceUnavailable,
            json: ["status": ready ? "ready" : "not_ready", "checks": .object(checks), "missing": .array(missing)])
    }

    func metrics() async -> Response {
        await Self.metrics(backlog: backlog)
    }

    /// The backlog, read at scrape time (so it is right whichever process runs the workers), at most once a second.
    static func sharedBacklog(_ reports: AdminReports) -> SharedCheck<Backlog?> {
        SharedCheck { try? await reports.backlog() }
    }

    static func metrics(backlog: SharedCheck<Backlog?>) async -> Response {
        if let backlog = await backlog.value {
            ServiceMetrics.queueDepth(backlog.depth)
            ServiceMetrics.workerLag(seconds: backlog.oldestAgeSeconds ?? 0)
        }
        var headers = HTTPFields()
        headers[.contentType] = "text/plain; version=0.0.4; charset=utf-8"
        return Response(status: .ok, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(bytes: Telemetry.exposition())))
    }
}

/// Loads the issuers' keys at start-up (and retries until they load), so that readiness can report them
/// before the first SET or sign-in arrives.
public struct KeyWarmup: Service {
    let keys: [IssuerKeys]

    public init(keys: [IssuerKeys]) { self.keys = keys }

    public func run() async throws {
        try? await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                var allLoaded = true
                for issuer in keys where await !issuer.load() { allLoaded = false }
                if allLoaded { break }
                try await Task.sleep(for: .seconds(5))
            }
        }
        // Nothing more to do; a service that returns early would stop the group, so wait for shutdown.
        try? await gracefulShutdown()
    }
}

/// For a process that runs only a worker: `/healthz` and `/metrics` on their own port, for probes and scrapes.
public func buildMetricsApplication(host: String, port: Int, postgres: PostgresClient, logger: Logger) -> some ApplicationProtocol {
    _ = Telemetry.registry
    let backlog = OperationsController<BasicRequestContext>.sharedBacklog(AdminReports(client: postgres, logger: logger))
    let router = Router()
    router.get("/healthz") { _, _ in HTTPResponse.Status.ok }
    router.get("/metrics") { _, _ in await OperationsController<BasicRequestContext>.metrics(backlog: backlog) }
    return Application(router: router, configuration: .init(address: .hostname(host, port: port), serverName: nil), logger: logger)
}
