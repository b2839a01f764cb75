import Logging
import PostgresNIO

extension PostgresClient {
    /// `withTransaction`, throwing what actually went wrong (the body's error, or the BEGIN's or COMMIT's)
    /// rather than postgres-nio's wrapper, so callers can match on it.
    public func transaction<Result: Sendable>(
        logger: Logger, _ body: nonisolated(nonsending) (PostgresConnection) async throws -> sending Result
    ) async throws -> Result {
        do {
            return try await withTransaction(logger: logger, body)
        } catch let error as PostgresTransactionError {
            throw error.closureError ?? error.commitError ?? error.beginError ?? error
        }
    }
}

extension PostgresConnection {
    /// `withTransaction` on this connection, throwing what actually went wrong, as `PostgresClient.transaction` does.
    public func transaction<Result: Sendable>(
        logger: Logger, _ body: nonisolated(nonsending) (PostgresConnection) async throws -> sending Result
    ) async throws -> Result {
        do {
            return try await withTransaction(logger: logger, body)
        } catch let error as PostgresTransactionError {
            throw error.closureError ?? error.commitError ?? error.beginError ?? error
        }
    }
}

extension PostgresConnection {
    /// Every row of a one-column query, decoded, in the order the query gives them.
    func values<Value: PostgresDecodable & Sendable>(_ query: PostgresQuery, as type: Value.Type, logger: Logger) async throws -> [Value] {
        var values: [Value] = []
        for try await value in try await self.query(query, logger: logger).decode(Value.self) { values.append(value) }
        return values
    }
}
