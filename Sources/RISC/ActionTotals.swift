/// What applied actions changed, for the metrics, whichever path applied them (on receipt, or a worker): as
/// `risc_apply_actions` returns it, each kind with its number of actions and the rows they changed in all.
public struct ActionTotals: Sendable, Equatable {
    public var sessionsRevoked = 0
    public var grantsDeleted = 0
    /// token-revoked identifiers that matched more than one grant (all erased, flagged for admins).
    public var ambiguousTokenIdentifiers = 0
    /// Actions of the kinds subscribers are notified of (`ActionKind.notified`): each may have written notifications.
    public var notifiedActions = 0

    public init() {}

    /// Parallel arrays, one element per kind. A kind this build does not know counts for nothing.
    public init(kinds: [String], actions: [Int64], rows: [Int64]) {
        for (kind, (actions, rows)) in zip(kinds, zip(actions, rows)) {
            guard let kind = ActionKind(rawValue: kind) else { continue }
            if ActionKind.revokingSessions.contains(kind) { sessionsRevoked += Int(rows) }
            if ActionKind.deletingGrants.contains(kind) { grantsDeleted += Int(rows) }
            if kind == .ambiguousTokenIdentifier { ambiguousTokenIdentifiers += Int(actions) }
            if ActionKind.notified.contains(kind) { notifiedActions += Int(actions) }
        }
    }

    public mutating func add(_ other: ActionTotals) {
        sessionsRevoked += other.sessionsRevoked
        grantsDeleted += other.grantsDeleted
        ambiguousTokenIdentifiers += other.ambiguousTokenIdentifiers
        notifiedActions += other.notifiedActions
    }
}
