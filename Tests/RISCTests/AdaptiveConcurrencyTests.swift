import RISC
import Testing

@Suite("Batches in flight adapt to the database")
struct AdaptiveConcurrencyTests {
    /// Runs `windows` measurement windows against a database whose rate is `rate(limit)`, each window's SETs in ten
    /// batches; returns the limit after each window.
    static func climb(
        from initial: Int, range: ClosedRange<Int>, windows: Int, bound: Bool = true, rate: (Int) -> Double
    ) -> [Int] {
        var concurrency = AdaptiveConcurrency(initial: initial, range: range, window: .milliseconds(500))
        var now = ContinuousClock.now
        _ = concurrency.batchCommitted(count: 0, limitBound: bound, now: now)
        var limits: [Int] = []
        for _ in 0..<windows {
            let perBatch = Int(rate(concurrency.limit) / 2 / 10)
            for _ in 0..<10 {
                now += .milliseconds(50)
                _ = concurrency.batchCommitted(count: perBatch, limitBound: bound, now: now)
            }
            limits.append(concurrency.limit)
        }
        return limits
    }

    @Test("Where commits wait on the disk, it climbs to the rate's peak and stays around it")
    func climbsToThePeak() {
        // More in flight helps up to 5, then costs: a CPU that is full.
        let limits = Self.climb(from: 2, range: 1...8, windows: 40) { limit in
            limit <= 5 ? 1_000 * Double(limit) : 5_000 - 400 * Double(limit - 5)
        }
        #expect(limits.prefix(3) == [3, 4, 5], "\(limits)")
        #expect(limits.dropFirst(10).allSatisfy { (4...6).contains($0) }, "\(limits)")
    }

    @Test("Where a second batch only costs, it comes down to one")
    func comesDownWhenTheCPUIsFull() {
        let limits = Self.climb(from: 2, range: 1...8, windows: 40) { limit in 4_000 / Double(limit) }
        #expect(limits.dropFirst(4).allSatisfy { $0 <= 2 }, "\(limits)")
        #expect(limits.filter { $0 == 1 }.count >= 15, "\(limits)")
    }

    @Test("While the flushers keep up, the load decides the rate, and the limit stays where it is")
    func holdsWhileNotSaturated() {
        let limits = Self.climb(from: 2, range: 1...8, windows: 10, bound: false) { limit in 1_000 * Double(limit) }
        #expect(limits == Array(repeating: 2, count: 10))
    }

    @Test("It stays within its range")
    func staysInRange() {
        let limits = Self.climb(from: 20, range: 1...4, windows: 30) { limit in 1_000 * Double(limit) }
        #expect(limits.allSatisfy { (1...4).contains($0) }, "\(limits)")
        #expect(limits.filter { $0 == 4 }.count >= 10, "\(limits)")
    }
}
