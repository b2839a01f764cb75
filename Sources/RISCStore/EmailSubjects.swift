import Logging
import PostgresNIO
import RISC

/// Matches the `email` subjects of Shared Signals events to users: an address names the user whose latest verified
/// Google ID token carried it, ignoring case (the user who signed in last, if two did). Asked on the connection that
/// applies the actions, just before, and only when an action names an email: Google's events never do.
enum EmailSubjects {
    /// `actions` with every email resolved to its user, or to nobody.
    static func resolve(
        _ actions: [(position: Int, action: AccountAction)], on connection: PostgresConnection, logger: Logger
    ) async throws -> [(position: Int, action: AccountAction)] {
        let emails = actions.compactMap(\.action.user?.email)
        guard !emails.isEmpty else { return actions }
        let users = try await users(for: emails, on: connection, logger: logger)
        return actions.map { ($0.position, $0.action.resolvingEmail(users)) }
    }

    /// The user each address names; an address that names nobody is absent.
    static func users(for emails: [String], on connection: PostgresConnection, logger: Logger) async throws -> [String: String] {
        let distinct = Array(Set(emails))
        guard !distinct.isEmpty else { return [:] }
        var users: [String: String] = [:]
        for try await (email, sub) in try await connection.query(
            """
            SELECT given, (SELECT u.sub FROM risc_users u WHERE lower(u.email) = lower(given) AND u.email_verified
                           ORDER BY u.last_sign_in_at DESC NULLS LAST, u.sub LIMIT 1)
            FROM unnest(\(distinct)::text[]) AS given
            """, logger: logger
        ).decode((String, String?).self) {
            if let sub { users[email] = sub }
        }
        return users
    }
}
