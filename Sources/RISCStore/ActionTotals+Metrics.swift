import RISC
import RISCMetrics

extension ServiceMetrics {
    /// What applied actions changed, counted the same way by the inbox (on receipt) and by workers.
    /// In shadow mode (`enforced` false) they are counted apart, as what would have changed.
    public static func actionsApplied(_ totals: ActionTotals, enforced: Bool) {
        let (sessions, grants, ambiguous) = (totals.sessionsRevoked, totals.grantsDeleted, totals.ambiguousTokenIdentifiers)
        if enforced {
            actionsApplied(sessionsRevoked: sessions, grantsDeleted: grants, ambiguousTokenIdentifiers: ambiguous)
        } else {
            shadowActionsRecorded(sessionsRevoked: sessions, grantsDeleted: grants, ambiguousTokenIdentifiers: ambiguous)
        }
    }
}
