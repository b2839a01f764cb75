import Synchronization

/// A check of the database that probes and scrapes share: a result at most `maxAge` old is reused, and callers that
/// arrive while one runs wait for it rather than start their own. However many probes come at once, the database
/// sees about one check per `maxAge`.
final class SharedCheck<Value: Sendable>: Sendable {
    private struct State {
        var last: (value: Value, startedAt: ContinuousClock.Instant)?
        var running: Task<Value, Never>?
    }

    private enum Next {
        case cached(Value)
        case wait(Task<Value, Never>)
    }

    private let maxAge: Duration
    private let check: @Sendable () async -> Value
    private let state = Mutex(State())

    init(maxAge: Duration = .seconds(1), _ check: @escaping @Sendable () async -> Value) {
        self.maxAge = maxAge
        self.check = check
    }

    var value: Value {
        get async {
            let next: Next = state.withLock { state in
                // Aged from when it started: its answer may describe the database as it was then.
                if let last = state.last, ContinuousClock.now - last.startedAt < maxAge { return .cached(last.value) }
                if let running = state.running { return .wait(running) }
                let startedAt = ContinuousClock.now
                // Not a child of the caller's task: a prober that hangs up must not cancel the check the others wait for.
                let task = Task {
                    let value = await self.check()
                    self.state.withLock { state in
                        state.last = (value, startedAt)
                        state.running = nil
                    }
                    return value
                }
                state.running = task
                return .wait(task)
            }
            switch next {
            case .cached(let value): return value
            case .wait(let task): return await task.value
            }
        }
    }
}
