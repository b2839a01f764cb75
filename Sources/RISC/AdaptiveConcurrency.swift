/// How many batches may be committing at once, found by climbing towards the most SETs committed per second.
///
/// No fixed number suits every machine. On a fast disk with CPU to spare, commits wait on the disk's flush and
/// more batches in flight fill the wait; with the CPU full, each batch more only adds switching and smaller
/// batches (each with its own statement and commit: with many flushers waiting, each takes a SET or two). The rate
/// says which of the two holds. In each window in which the limit held the load back (SETs waited for a flusher, or
/// every flusher allowed was busy), the limit takes one more step in the direction that last raised the rate, turns
/// when the rate falls, and steps down when it stays level: fewer, larger batches cost the database less for the
/// same rate. A window in which the flushers kept up says nothing about the limit: the load decided the rate, and
/// the climb starts again from there.
public struct AdaptiveConcurrency: Sendable {
    public let range: ClosedRange<Int>
    public private(set) var limit: Int
    /// How long each measurement runs.
    public let window: Duration

    private var direction = 1
    private var windowStart: ContinuousClock.Instant?
    private var committed = 0
    private var batches = 0
    private var boundBatches = 0
    private var lastRate: Double?

    public init(initial: Int, range: ClosedRange<Int>, window: Duration = .milliseconds(500)) {
        self.range = range
        self.limit = min(max(initial, range.lowerBound), range.upperBound)
        self.window = window
    }

    /// A batch of `count` SETs committed at `now`; `limitBound` says whether the limit held the load back then (SETs
    /// were queued for a flusher, or every flusher allowed was committing). Returns true when the limit changed.
    public mutating func batchCommitted(count: Int, limitBound: Bool, now: ContinuousClock.Instant) -> Bool {
        guard let start = windowStart else {
            windowStart = now
            return false
        }
        committed += count
        batches += 1
        if limitBound { boundBatches += 1 }
        let elapsed = now - start
        guard elapsed >= window else { return false }
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        let rate = Double(committed) / seconds
        let saturated = boundBatches * 2 >= batches
        (windowStart, committed, batches, boundBatches) = (now, 0, 0, 0)
        guard saturated else {
            lastRate = nil
            return false
        }
        defer { lastRate = rate }
        if let lastRate {
            if rate < lastRate * 0.97 {
                direction = -direction
            } else if rate <= lastRate * 1.03 {
                direction = -1
            }
        }
        var next = min(max(limit + direction, range.lowerBound), range.upperBound)
        // At either end, the step goes back in.
        if next == limit {
            direction = -direction
            next = min(max(limit + direction, range.lowerBound), range.upperBound)
        }
        guard next != limit else { return false }
        limit = next
        return true
    }
}
