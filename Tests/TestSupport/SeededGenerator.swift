import Foundation
import Testing

/// Random test inputs, reproducibly: SplitMix64 (small, fast, the same sequence on every platform), from a seed of
/// the test's own, or from the seed in RISC_TEST_SEED when it is set, else one fresh seed for the whole run. A test
/// that draws from the run's seed carries the `.seeded` trait, which adds "RISC_TEST_SEED=<seed>" to every issue it
/// records, so a failure says how to run it again on the same inputs.
public struct SeededGenerator: RandomNumberGenerator {
    public static let seed: UInt64 = {
        guard let text = ProcessInfo.processInfo.environment["RISC_TEST_SEED"], !text.isEmpty else { return .random(in: .min ... .max) }
        guard let seed = UInt64(text) else { fatalError("RISC_TEST_SEED must be an unsigned 64-bit integer, not \(text)") }
        return seed
    }()

    private var state: UInt64

    /// From exactly `seed`: a test that must check the same inputs on every run.
    public init(seed: UInt64) { state = seed }

    /// From the run's seed mixed with the calling test's name (FNV-1a), so that tests draw different inputs and each
    /// draws the same ones again under the same RISC_TEST_SEED.
    public init(test: String = #function) {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in test.utf8 { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3 }
        state = Self.seed ^ hash
    }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

extension Trait where Self == IssueHandlingTrait {
    /// Notes the run's `SeededGenerator.seed` on every issue the test records.
    public static var seeded: Self {
        .compactMapIssues { issue in
            var issue = issue
            issue.comments.append("RISC_TEST_SEED=\(SeededGenerator.seed)")
            return issue
        }
    }
}
