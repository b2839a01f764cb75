import RISC
import Tracing

/// What `risc_apply_actions` returns: per event and action kind, the actions recorded and the rows they changed.
struct AppliedActions: Sendable {
    var events: [Int64]
    var kinds: [String]
    var actions: [Int64]
    var rows: [Int64]

    /// For the metrics, whichever events they were.
    var totals: ActionTotals { ActionTotals(kinds: kinds, actions: actions, rows: rows) }
}

extension Span {
    /// The events applied, and each action kind with its event and the rows it changed, as parallel arrays. No user,
    /// token or identifier: only ids, kinds and counts.
    func record(_ applied: AppliedActions) {
        updateAttributes { attributes in
            attributes["risc.event.ids"] = Array(Set(applied.events)).sorted()
            attributes["risc.action.event_ids"] = applied.events
            attributes["risc.action.kinds"] = applied.kinds
            attributes["risc.action.rows"] = applied.rows
        }
    }
}
