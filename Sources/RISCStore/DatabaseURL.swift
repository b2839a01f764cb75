import Foundation
import Logging
import NIOCore
import NIOSSL
import PostgresNIO

/// Turns a `postgres://user:password@host:port/database?sslmode=...` URL into a client configuration.
/// A `host=/socket/dir` query parameter selects a Unix socket, as libpq does.
public enum DatabaseURL {
    public struct Invalid: Error, CustomStringConvertible {
        public let description: String
    }

    /// What the URL says, once: the pool's and a single connection's configurations are both made from it.
    struct Parts {
        enum Address {
            case tcp(host: String, port: Int)
            case socket(path: String)
        }
        enum TLSMode { case disable, prefer, require }

        var address: Address
        var username: String
        var password: String?
        var database: String?
        var tls: TLSMode

        /// For messages: where the database is, never who or with what password.
        var location: String {
            switch address {
            case .tcp(let host, let port): "\(host):\(port)"
            case .socket(let path): path
            }
        }
    }

    static func parts(_ url: String) throws(Invalid) -> Parts {
        guard let components = URLComponents(string: url),
            components.scheme == "postgres" || components.scheme == "postgresql"
        else {
            throw Invalid(description: "not a postgres:// URL")
        }
        let query = Dictionary(
            (components.queryItems ?? []).map { ($0.name, $0.value ?? "") }, uniquingKeysWith: { _, last in last })
        let username = components.user.flatMap { $0.removingPercentEncoding } ?? "postgres"
        let password = components.password.flatMap { $0.removingPercentEncoding }
        var database = components.path
        if database.hasPrefix("/") { database.removeFirst() }
        let databaseName = database.isEmpty ? nil : database.removingPercentEncoding
        let port = components.port ?? 5432

        if let socketDirectory = query["host"], socketDirectory.hasPrefix("/") {
            return Parts(
                address: .socket(path: "\(socketDirectory)/.s.PGSQL.\(port)"), username: username, password: password,
                database: databaseName, tls: .disable)
        }
        guard let host = components.host, !host.isEmpty else { throw Invalid(description: "the URL names no host") }
        let tls: Parts.TLSMode
        switch query["sslmode"] ?? "prefer" {
        case "disable": tls = .disable
        case "require", "verify-ca", "verify-full": tls = .require
        case "prefer", "allow": tls = .prefer
        case let other: throw Invalid(description: "unsupported sslmode \(other)")
        }
        return Parts(address: .tcp(host: host, port: port), username: username, password: password, database: databaseName, tls: tls)
    }

    /// The logger to give postgres-nio's pool: never below debug (`floor`). At trace it logs every message it sends
    /// and receives, bound values and rows included: session rows, subscribers' secrets, claims.
    public static func poolLogger(_ logger: Logger, atLeast floor: Logger.Level = .debug) -> Logger {
        let handler = logger.handler
        var poolLogger = Logger(label: logger.label) { _ in EarlyLeaseFilter(wrapping: handler) }
        poolLogger.logLevel = max(logger.logLevel, floor)
        return poolLogger
    }

    /// The pool of a one-shot command. Its routine lines are not the command's output, so it logs warnings and
    /// worse only, and never the early-lease warning: a script reads a command's standard error.
    public static func commandClient(_ url: String, logger: Logger) throws -> PostgresClient {
        PostgresClient(configuration: try configuration(from: url), backgroundLogger: poolLogger(logger, atLeast: .warning))
    }

    public static func configuration(from url: String) throws -> PostgresClient.Configuration {
        let parts = try parts(url)
        var configuration: PostgresClient.Configuration
        switch parts.address {
        case .socket(let path):
            configuration = PostgresClient.Configuration(
                unixSocketPath: path, username: parts.username, password: parts.password, database: parts.database)
        case .tcp(let host, let port):
            let tls: PostgresClient.Configuration.TLS =
                switch parts.tls {
                case .disable: .disable
                case .prefer: .prefer(.makeClientConfiguration())
                case .require: .require(.makeClientConfiguration())
                }
            configuration = PostgresClient.Configuration(
                host: host, port: port, username: parts.username, password: parts.password, database: parts.database, tls: tls)
        }
        // The pool's keep-alive query has no timeout: on a connection whose server vanished it would wait for good,
        // and the connection would never be leased or closed again. Idle connections are closed after a minute
        // instead (the pool's idle timeout), and every operation is bounded (`withConnection(timeout:)`).
        configuration.options.keepAliveBehavior = nil
        configuration.options.additionalStartupParameters = sessionParameters
        return configuration
    }

    /// The pool of a long-running process (`serve`, `worker`): as `configuration(from:)`, and PostgreSQL itself ends any
    /// statement of its sessions that runs past `statementTimeout`. The service bounds its own wait on every call, but
    /// a statement it gave up on runs on in the server (a client that left is noticed only when the server next
    /// writes to it), holding its locks and a connection slot. The bound must be longer than any wait of the
    /// service's own (`minimumStatementTimeout`), so that it never ends a statement the service still waits for.
    /// Not for `migrate`: building an index on a large table may rightly take longer.
    public static func serviceConfiguration(
        from url: String, statementTimeout: Duration = minimumStatementTimeout
    ) throws
        -> PostgresClient.Configuration
    {
        var configuration = try configuration(from: url)
        let milliseconds = max(statementTimeout, minimumStatementTimeout).components.seconds * 1000
        configuration.options.additionalStartupParameters.append(("statement_timeout", String(milliseconds)))
        return configuration
    }

    /// Twice the longest bound the service sets on a call of its own (the admin stats' counts, 60 s).
    public static let minimumStatementTimeout: Duration = .seconds(120)

    /// Set by every connection when it starts.
    /// - TCP keepalives and a user timeout for the server's side of each connection: when this process's host
    ///   vanishes, PostgreSQL drops its connections within about 30 s, and with them their locks and open
    ///   transactions. (This side's socket is not reachable through postgres-nio; `withConnection(timeout:)` bounds
    ///   it instead.)
    /// - No JIT compilation. PostgreSQL compiles a statement whose estimated cost passes `jit_above_cost`, again at
    ///   every execution, and the service's statements stop early (a LIMIT over a large backlog) far below their
    ///   estimate: the notifications' claim was compiled for up to 300 ms each time, to read a few rows in under a
    ///   millisecond. Whether it was depended on the table's last statistics.
    static let sessionParameters: [(String, String)] = [
        ("tcp_keepalives_idle", "10"), ("tcp_keepalives_interval", "5"), ("tcp_keepalives_count", "3"),
        ("tcp_user_timeout", "30000"), ("jit", "off"),
    ]

    /// The configuration of a single connection outside the pool, for whoever needs one connection's lifetime (the
    /// delivery prober's session advisory lock lives exactly as long as its connection).
    public static func connectionConfiguration(from url: String) throws -> PostgresConnection.Configuration {
        var configuration = try connectionConfiguration(try parts(url))
        configuration.options.additionalStartupParameters = sessionParameters
        return configuration
    }

    static func connectionConfiguration(_ parts: Parts) throws -> PostgresConnection.Configuration {
        switch parts.address {
        case .socket(let path):
            return .init(unixSocketPath: path, username: parts.username, password: parts.password, database: parts.database)
        case .tcp(let host, let port):
            let tls: PostgresConnection.Configuration.TLS =
                switch parts.tls {
                case .disable: .disable
                case .prefer: .prefer(try NIOSSLContext(configuration: .makeClientConfiguration()))
                case .require: .require(try NIOSSLContext(configuration: .makeClientConfiguration()))
                }
            return .init(host: host, port: port, username: parts.username, password: parts.password, database: parts.database, tls: tls)
        }
    }

    /// The database cannot be used, and why: the server's own words (an unknown role, a missing database) or the
    /// network's (refused, unknown host, no TLS), with where it is. Never the password.
    public struct Unreachable: Error, CustomStringConvertible {
        public let description: String
    }

    /// Opens one connection and closes it again, giving up after `timeout`. A command calls this before it starts a
    /// pool: a pool retries a refused connection for about a minute, logging each try, and then reports its own
    /// circuit breaker rather than the cause.
    /// `describeNetwork` words a network error (RISCKeys' `NetworkErrors.describe`, which this module cannot see).
    public static func check(
        _ url: String, timeout: Duration = .seconds(10), logger: Logger,
        describeNetwork: (any Error) -> String = { String(describing: $0) }
    ) async throws(Unreachable) {
        let parts: Parts
        do { parts = try Self.parts(url) } catch { throw Unreachable(description: "DATABASE_URL: \(error)") }
        var configuration: PostgresConnection.Configuration
        do { configuration = try connectionConfiguration(parts) } catch {
            throw Unreachable(description: "cannot set up TLS for the database: \(error)")
        }
        configuration.options.connectTimeout = .milliseconds(Int64(timeout.components.seconds * 1000))
        let reason: String
        let settings = configuration
        do {
            let connection = try await withTimeout(timeout) {
                try await PostgresConnection.connect(configuration: settings, id: 0, logger: logger)
            }
            try? await connection.close()
            return
        } catch is TimeoutError {
            reason = "no answer within \(timeout.components.seconds) s"
        } catch {
            reason = Self.reason(error, describeNetwork: describeNetwork)
        }
        throw Unreachable(description: "cannot connect to the database at \(parts.location) (DATABASE_URL): \(reason)")
    }

    static func reason(_ error: any Error, describeNetwork: (any Error) -> String) -> String {
        guard let error = error as? PSQLError else { return describeNetwork(error) }
        if let message = error.serverInfo?[.message] { return message }
        if error.code == .sslUnsupported { return "the server does not support TLS (sslmode=require)" }
        if let underlying = error.underlying { return describeNetwork(underlying) }
        return String(describing: error.code)
    }
}

/// Drops postgres-nio's warning that a connection was leased before `PostgresClient.run()`: the lease waits for
/// `run()`, so nothing is wrong. `whileRunning` starts its body once `run()` is called, but on another thread `run()`
/// may not have marked the client running yet; under load a command's standard error carried the warning.
struct EarlyLeaseFilter: LogHandler {
    static let message = "Trying to lease connection from `PostgresClient`, but `PostgresClient.run()` hasn't been called yet."
    var wrapped: any LogHandler
    /// The pool logger's own: `Logger` checks it before calling `log`, and the wrapped handler, which does not check
    /// again, still adds its own provider's metadata to each line it writes.
    var logLevel: Logger.Level
    var metadataProvider: Logger.MetadataProvider?

    init(wrapping handler: any LogHandler) {
        wrapped = handler
        logLevel = handler.logLevel
    }

    func log(event: LogEvent) {
        guard event.message.description != Self.message else { return }
        wrapped.log(event: event)
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { wrapped[metadataKey: key] }
        set { wrapped[metadataKey: key] = newValue }
    }

    var metadata: Logger.Metadata {
        get { wrapped.metadata }
        set { wrapped.metadata = newValue }
    }
}
