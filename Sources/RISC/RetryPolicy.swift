/// When a failed event is tried again: exponential backoff with jitter, then dead-lettered.
public struct RetryPolicy: Sendable, Equatable {
    public var maxAttempts: Int
    public var baseDelay: Double
    public var maxDelay: Double

    public init(maxAttempts: Int = 10, baseDelay: Double = 1, maxDelay: Double = 3600) {
        self.maxAttempts = maxAttempts
        self.baseDelay = baseDelay
        self.maxDelay = maxDelay
    }

    public enum Decision: Sendable, Equatable {
        case retry(afterSeconds: Double)
        case dead
    }

    /// What happens after the `attempts`-th failed attempt. `jitter` in 0...1 picks a point in the upper
    /// half of the delay, so workers that failed together do not retry together.
    public func decision(afterFailedAttempts attempts: Int, jitter: Double) -> Decision {
        guard attempts < maxAttempts else { return .dead }
        let exponential = baseDelay * Double(1 << min(max(attempts - 1, 0), 30))
        let capped = min(exponential, maxDelay)
        return .retry(afterSeconds: capped * (0.5 + 0.5 * min(max(jitter, 0), 1)))
    }
}
