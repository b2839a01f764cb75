import Foundation
import PostgresNIO

/// Turns a `postgres://user:password@host:port/database?sslmode=...` URL into a client configuration.
/// A `host=/socket/dir` query parameter selects a Unix socket, as libpq does.
public enum DatabaseURL {
    public struct Invalid: Error, CustomStringConvertible {
        public let description: String
    }

    public static func configuration(from url: String) throws -> PostgresClient.Configuration {
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

        if let socketDirectory = query["host"], socketDirectory.hasPrefix("/") {
            let port = components.port ?? 5432
            return PostgresClient.Configuration(
                unixSocketPath: "\(socketDirectory)/.s.PGSQL.\(port)", username: username, password: password,
                database: databaseName)
        }
        guard let host = components.host, !host.isEmpty else { throw Invalid(description: "the URL names no host") }
        let tls: PostgresClient.Configuration.TLS
        switch query["sslmode"] ?? "prefer" {
        case "disable": tls = .disable
        case "require", "verify-ca", "verify-full": tls = .require(.makeClientConfiguration())
        case "prefer", "allow": tls = .prefer(.makeClientConfiguration())
        case let other: throw Invalid(description: "unsupported sslmode \(other)")
        }
        return PostgresClient.Configuration(
            host: host, port: components.port ?? 5432, username: username, password: password, database: databaseName,
            tls: tls)
    }
}
