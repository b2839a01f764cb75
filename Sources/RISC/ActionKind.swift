/// The kinds of action recorded against an event: what `AccountAction` decides, and what
/// `risc_apply_actions` records. The raw values are stored in `risc_event_actions.kind` and picked by the
/// plpgsql `CASE`; a test holds the database to this list. It encodes as its raw value.
public enum ActionKind: String, Sendable, CaseIterable, Encodable {
    case revokeSessions = "revoke_sessions"
    case deleteGrants = "delete_grants"
    case deleteGrantByPrefix = "delete_grant_by_prefix"
    case deleteGrantByHash = "delete_grant_by_hash"
    case disableSignIn = "disable_sign_in"
    case enableSignIn = "enable_sign_in"
    case flagForReview = "flag_for_review"
    case requireCredentialChange = "require_credential_change"
    case recordVerification = "record_verification"
    case skip
    /// Recorded by the database, never decided: a token-revoked identifier matched more than one grant.
    case ambiguousTokenIdentifier = "ambiguous_token_identifier"

    /// The kinds the worker hands to `risc_apply_actions`: all but those the database records on its own.
    public static let decided: [ActionKind] = allCases.filter { $0 != .ambiguousTokenIdentifier }

    /// Kinds whose rows affected count as revoked sessions, and as deleted grants, in the metrics.
    public static let revokingSessions: [ActionKind] = [.revokeSessions]
    public static let deletingGrants: [ActionKind] = [.deleteGrants, .deleteGrantByPrefix, .deleteGrantByHash]

    /// The kinds the app's other services are notified of: every action on a user's sessions, grants or
    /// account. Not a verification, an event with nothing to do, or the ambiguity note beside a token deletion
    /// (the deletion itself is notified). The trigger that writes notifications holds the same list (a test checks).
    public static let notified: [ActionKind] = [
        .revokeSessions, .deleteGrants, .deleteGrantByPrefix, .deleteGrantByHash, .disableSignIn, .enableSignIn,
        .flagForReview, .requireCredentialChange,
    ]
}
