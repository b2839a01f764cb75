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
    /// `execute` of a prepared statement, within `PostgresClient.withConnection(timeout:)`, which closes this
    /// connection once its body is done if this throws: postgres-nio 1.33.2 keeps a statement whose preparation
    /// failed failed for as long as its connection lives, and answers every later call with that error without
    /// asking the server. One refused preparation (a table renamed for a moment, a statement an operator cancelled)
    /// would then fail that statement on this connection for good; closed, the pool replaces it. Errors while
    /// reading the rows come after a preparation that succeeded, and keep the connection.
    func executePrepared<Statement: PostgresPreparedStatement>(
        _ statement: Statement, logger: Logger
    ) async throws -> AsyncThrowingMapSequence<PostgresRowSequence, Statement.Row> {
        do {
            return try await execute(statement, logger: logger)
        } catch {
            PreparationFailure.current?.record()
            throw error
        }
    }

    /// Every row of a one-column query, decoded, in the order the query gives them.
    func values<Value: PostgresDecodable & Sendable>(_ query: PostgresQuery, as type: Value.Type, logger: Logger) async throws -> [Value] {
        var values: [Value] = []
        for try await value in try await self.query(query, logger: logger).decode(Value.self) { values.append(value) }
        return values
    }
}
