import RISC
import RISCMetrics

extension ServiceMetrics {
    /// What applied actions changed, counted the same way by the inbox (on receipt) and by workers.
    public static func actionsApplied(_ totals: ActionTotals) {
        actionsApplied(
            sessionsRevoked: totals.sessionsRevoked, grantsDeleted: totals.grantsDeleted,
            ambiguousTokenIdentifiers: totals.ambiguousTokenIdentifiers)
    }
}
