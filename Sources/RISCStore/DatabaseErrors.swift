import PostgresNIO

/// What the service says about a database error, and how it classifies one.
public enum DatabaseErrors {
    /// An error for the log. Never the query's bound values: they hold the claims.
    public static func describe(_ error: any Error) -> String {
        guard let error = error as? PSQLError else { return String(describing: error) }
        let sqlState = error.serverInfo?[.sqlState].map { " sqlstate=\($0)" } ?? ""
        let message = error.serverInfo?[.message].map { " \($0)" } ?? ""
        return "\(error.code)\(sqlState)\(message)"
    }

    /// The database cannot answer now, whatever was asked: no connection, no answer within
    /// RISC_DATABASE_TIMEOUT, or one of the SQLSTATE classes of `PSQLError.unavailableClasses`. A route answers
    /// these with 503 and Retry-After; any other error is a fault of ours, a 500.
    public static func isUnavailable(_ error: any Error) -> Bool {
        if error is TimeoutError { return true }
        guard let error = error as? PSQLError else { return false }
        guard error.code == .server else { return true }
        guard let sqlState = error.serverInfo?[.sqlState] else { return false }
        return PSQLError.unavailableClasses.contains(sqlState.prefix(2))
    }
}

extension PSQLError {
    /// SQLSTATE classes that say the database cannot take writes now, whatever the data: connection trouble,
    /// transaction rollbacks (deadlock, serialization), resources, shutdown, system and internal errors, and a
    /// schema or role that is not what the service expects. A SET failing with one of these gets 503.
    static let unavailableClasses: Set<Substring> = [
        "08", "25", "28", "3D", "3F", "40", "42", "53", "55", "57", "58", "F0", "XX",
    ]

    /// The server refused the statement for a reason that may lie in one row's data (any other SQLSTATE:
    /// a data exception, a constraint, an index row too large, ...). Only a statement of that one row can
    /// tell; its SET is then refused with 400, while the others commit.
    var isRefusalOfData: Bool {
        guard code == .server, let sqlState = serverInfo?[.sqlState] else { return false }
        return !Self.unavailableClasses.contains(sqlState.prefix(2))
    }
}
