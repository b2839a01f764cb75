/// How many batches may be committing at once, found by climbing towards the most SETs committed per second.
///
/// No fixed number suits every machine. On a fast disk with CPU to spare, commits wait on the disk's flush and
/// more batches in flight fill the wait; with the CPU full, each batch more only adds switching and smaller
/// batches (each with its own statement and commit). The rate says which of the two holds: each window in which
/// SETs were waiting for a flusher (the load is more than the batches in flight take), the limit takes one more
/// step in the direction that last raised the rate, and turns when the rate falls. A window in which the
/// flushers kept up says nothing about the limit: the load decided the rate, and the climb starts again from there.
public struct AdaptiveConcurrency: Sendable {
    public let range: ClosedRange<Int>
    public private(set) var limit: Int
    /// How long each measurement runs.
    public let window: Duration

    private var direction = 1
    private var windowStart: ContinuousClock.Instant?
    private var committed = 0
    private var batches = 0
    private var waitedBatches = 0
    private var lastRate: Double?

    public init(initial: Int, range: ClosedRange<Int>, window: Duration = .milliseconds(500)) {
        self.range = range
        self.limit = min(max(initial, range.lowerBound), range.upperBound)
        self.window = window
    }

    /// A batch of `count` SETs committed at `now`; `waiting` is how many SETs were queued for a flusher then.
    /// Returns true when the limit changed.
    public mutating func batchCommitted(count: Int, waiting: Int, now: ContinuousClock.Instant) -> Bool {
        guard let start = windowStart else {
            windowStart = now
            return false
        }
        committed += count
        batches += 1
        if waiting > 0 { waitedBatches += 1 }
        let elapsed = now - start
        guard elapsed >= window else { return false }
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        let rate = Double(committed) / seconds
        let saturated = waitedBatches * 2 >= batches
        (windowStart, committed, batches, waitedBatches) = (now, 0, 0, 0)
        guard saturated else {
            lastRate = nil
            return false
        }
        defer { lastRate = rate }
        // The first saturated window, or a change within the noise of a loaded machine: keep climbing the way
        // it goes. A fall turns the climb.
        if let lastRate, rate < lastRate * 0.97 { direction = -direction }
        let next = min(max(limit + direction, range.lowerBound), range.upperBound)
        // At either end, the next step goes back in.
        if next == limit { direction = -direction }
        guard next != limit else { return false }
        limit = next
        return true
    }
}
