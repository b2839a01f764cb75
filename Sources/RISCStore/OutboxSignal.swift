import RISC
import Synchronization

/// Wakes this process's notification dispatchers once a transaction of this process has committed actions that
/// may have written notifications (the inbox applying on receipt, or a worker). Not `NOTIFY` in that transaction:
/// a notifying transaction holds a cluster-wide lock through its commit's WAL flush, so those commits could not
/// share a flush. A dispatcher in another process finds the notifications on its poll, or sooner if it wrote some
/// itself; a spurious wake-up costs one claim that finds nothing.
public final class OutboxSignal: Sendable {
    private struct State {
        var wakers: [UInt64: @Sendable () -> Void] = [:]
        var next: UInt64 = 0
    }

    private let state = Mutex(State())

    public init() {}

    /// Calls `wake` after each commit signalled, until the returned token is passed to `remove`.
    public func add(_ wake: @escaping @Sendable () -> Void) -> UInt64 {
        state.withLock { state in
            state.next += 1
            state.wakers[state.next] = wake
            return state.next
        }
    }

    public func remove(_ token: UInt64) {
        _ = state.withLock { $0.wakers.removeValue(forKey: token) }
    }

    /// Actions that are notified have committed; `totals` says how many (nothing is woken for none).
    public func committed(_ totals: ActionTotals) {
        guard totals.notifiedActions > 0 else { return }
        for wake in state.withLock({ Array($0.wakers.values) }) { wake() }
    }
}
