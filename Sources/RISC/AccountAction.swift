/// What an event does to the accounts this service owns. Decided here, without I/O, from the event alone; the
/// inbox (on receipt) or a worker hands the actions to `risc_apply_actions`, which carries them out in the
/// database. These rules need the rows as they are, so the SQL function decides them, not this type:
/// - staleness: an account-state change older than the account state (by iat, then arrival, then place in the
///   SET) changes nothing and is recorded as skipped;
/// - the hijacking cutoff: a revocation by such a stale event ends only the sessions created up to its iat;
///   otherwise every session created up to the event's arrival. ID tokens issued up to the cutoff no longer sign in;
/// - audience confinement: a token-revoked identifier erases only grants of the SET's audiences (`clientIDs`);
/// - the ambiguity flag: an identifier that matched several grants erases them all and records an
///   `ambiguous_token_identifier` action beside it.
public enum AccountAction: Sendable, Equatable {
    /// Revoke every session of the user created at or before the SET was received.
    case revokeSessions(user: AccountUser)
    /// Delete every stored refresh token of the user.
    case deleteGrants(user: AccountUser)
    /// Delete the stored refresh token the identifier names, among the grants of the SET's audiences
    /// (the client IDs the token could have been issued to).
    case deleteGrant(TokenIdentifier, clientIDs: [String])
    /// Refuse new Google sign-ins (ordered by the event's `iat`).
    case disableSignIn(user: AccountUser, reason: String?)
    /// Allow Google sign-ins again (ordered by the event's `iat`).
    case enableSignIn(user: AccountUser)
    case flagForReview(user: AccountUser)
    case requireCredentialChange(user: AccountUser)
    case recordVerification(state: String?)
    /// Nothing can be done, and why (say, a subject that names no Google account).
    case skip(reason: String)

    /// The kind recorded with the event; the database picks the statement by it.
    public var kind: ActionKind {
        switch self {
        case .revokeSessions: .revokeSessions
        case .deleteGrants: .deleteGrants
        case .deleteGrant(.prefix, _): .deleteGrantByPrefix
        case .deleteGrant(.doubleSHA512, _): .deleteGrantByHash
        case .disableSignIn: .disableSignIn
        case .enableSignIn: .enableSignIn
        case .flagForReview: .flagForReview
        case .requireCredentialChange: .requireCredentialChange
        case .recordVerification: .recordVerification
        case .skip: .skip
        }
    }

    /// Who the action is about, for the kinds that act on one user.
    public var user: AccountUser? {
        switch self {
        case .revokeSessions(let user), .deleteGrants(let user), .disableSignIn(let user, _), .enableSignIn(let user),
            .flagForReview(let user), .requireCredentialChange(let user):
            user
        case .deleteGrant, .recordVerification, .skip:
            nil
        }
    }

    /// The user the action changes, by Google `sub`, if it names one.
    public var sub: String? { user?.sub }

    /// The same action with an email subject resolved: to the user `users` says it names, or to nobody.
    public func resolvingEmail(_ users: [String: String]) -> AccountAction {
        guard let email = user?.email else { return self }
        return about(users[email].map(AccountUser.sub) ?? .nobody)
    }

    /// The same action about `user` instead (an email resolved to the user it names, or to nobody).
    public func about(_ user: AccountUser) -> AccountAction {
        switch self {
        case .revokeSessions: .revokeSessions(user: user)
        case .deleteGrants: .deleteGrants(user: user)
        case .disableSignIn(_, let reason): .disableSignIn(user: user, reason: reason)
        case .enableSignIn: .enableSignIn(user: user)
        case .flagForReview: .flagForReview(user: user)
        case .requireCredentialChange: .requireCredentialChange(user: user)
        case .deleteGrant, .recordVerification, .skip: self
        }
    }

    /// The action's one argument: a token identifier in its canonical form, a reason, a state.
    public var argument: String? {
        switch self {
        case .deleteGrant(let identifier, _): identifier.canonicalValue
        case .disableSignIn(_, let reason): reason
        case .recordVerification(let state): state
        case .skip(let reason): reason
        default: nil
        }
    }

    /// The client IDs a `deleteGrant` is confined to.
    public var clientIDs: [String] {
        if case .deleteGrant(_, let clientIDs) = self { return clientIDs }
        return []
    }

    /// The actions for one event, in the order they are applied. `audience` is the SET's `aud`: a
    /// token-revoked event only names tokens issued to those clients.
    public static func actions(for event: SecurityEvent, audience: [String]) -> [AccountAction] {
        guard let type = event.type else { return [.skip(reason: "unknown event type")] }
        guard event.unprocessedCriticalMembers.isEmpty else {
            let members = event.unprocessedCriticalMembers.joined(separator: ", ")
            return [.skip(reason: "the subject has critical members this receiver does not understand: \(members)")]
        }
        if type == .verification || type == .ssfVerification { return [.recordVerification(state: event.state)] }
        // The stream's status is recorded with the stream as the event is received; no user is named.
        if type == .ssfStreamUpdated { return [.skip(reason: "a stream status change names no user")] }
        if type == .tokenRevoked {
            guard case .oauthToken(let tokenType, let identifier)? = event.subject else {
                return [.skip(reason: "token-revoked without an oauth_token subject")]
            }
            // The vault holds refresh tokens only; an access token's identifier must not erase one.
            guard tokenType == "refresh_token" else {
                return [.skip(reason: "token-revoked for a token_type other than refresh_token")]
            }
            return [.deleteGrant(identifier, clientIDs: audience)]
        }
        let user: AccountUser
        switch event.subjectRules {
        case .google:
            switch event.subject?.userReference {
            case .named(let named)?: user = .sub(named)
            case .notAUser(let reason)?: return [.skip(reason: reason)]
            case nil: return [.skip(reason: "the subject names no Google account")]
            }
        case .sharedSignals:
            // Every event from a Shared Signals transmitter is acted on and notified, naming a user or not: the
            // app's own stores may hold the subject. An email is matched to a user when the actions are applied.
            if case .named(let named)? = event.subject?.userReference {
                user = .sub(named)
            } else if let email = event.subject?.email, !email.isEmpty {
                user = .email(email)
            } else {
                user = .nobody
            }
        }
        switch type {
        case .sessionsRevoked, .caepSessionRevoked:
            return [.revokeSessions(user: user)]
        case .tokensRevoked:
            return [.revokeSessions(user: user), .deleteGrants(user: user)]
        case .accountDisabled:
            switch event.reason {
            case "hijacking": return [.disableSignIn(user: user, reason: event.reason), .revokeSessions(user: user)]
            case "bulk-account": return [.disableSignIn(user: user, reason: event.reason), .flagForReview(user: user)]
            default: return [.disableSignIn(user: user, reason: event.reason)]
            }
        case .accountEnabled:
            return [.enableSignIn(user: user)]
        case .accountCredentialChangeRequired, .caepCredentialChange:
            return [.requireCredentialChange(user: user)]
        case .tokenRevoked, .verification, .ssfVerification, .ssfStreamUpdated:
            return []  // handled above
        }
    }

    /// The actions for every event of a SET, each with the position of its event in the SET: staleness is
    /// judged per event and per user, never per SET.
    public static func actions(for events: [SecurityEvent], audience: [String]) -> [(position: Int, action: AccountAction)] {
        events.enumerated().flatMap { position, event in
            actions(for: event, audience: audience).map { (position, $0) }
        }
    }
}

/// Who an action is about.
public enum AccountUser: Sendable, Equatable, Hashable {
    /// A user of this service, by Google `sub`.
    case sub(String)
    /// A Shared Signals `email` subject, not yet matched: it names the user whose latest verified Google ID token
    /// carried that address (ignoring case), found when the actions are applied.
    case email(String)
    /// No user of this service: the action changes nothing and is still recorded and notified.
    case nobody

    public var sub: String? {
        if case .sub(let sub) = self { return sub }
        return nil
    }

    public var email: String? {
        if case .email(let email) = self { return email }
        return nil
    }
}
