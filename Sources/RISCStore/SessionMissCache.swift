import Foundation
import Synchronization

/// Session tokens the database did not know a moment ago (no session at all), by their SHA-256 only, never the
/// token: a caller repeating an unknown or made-up token costs the database one lookup every few seconds instead of
/// one per request.
///
/// A cached miss cannot hide a real session. Sessions are created only by sign-in, under a token of 256 random bits
/// minted there: no check can have asked for that token before sign-in returned it, short of guessing it. Sign-in
/// in this process drops the entry for its new token all the same, so there it holds without the argument; another
/// process's sign-in cannot reach this cache, and there the argument is enough. (An expired session is not
/// remembered: a revocation can still reach it, and turn its answer into `session_revoked`.)
public final class SessionMissCache: Sendable {
    let maxEntries: Int
    let lifetime: Duration
    private let entries = Mutex<[Data: ContinuousClock.Instant]>([:])

    public init(maxEntries: Int = 10_000, lifetime: Duration = .seconds(5)) {
        self.maxEntries = maxEntries
        self.lifetime = lifetime
    }

    /// Whether the database answered "no such session" for this hash within the lifetime.
    func contains(_ hash: Data) -> Bool {
        entries.withLock { entries in
            guard let cachedAt = entries[hash] else { return false }
            if ContinuousClock.now - cachedAt < lifetime { return true }
            entries[hash] = nil
            return false
        }
    }

    func insert(_ hash: Data) {
        let now = ContinuousClock.now
        entries.withLock { entries in
            // Full means a flood of distinct tokens, which no cache helps with: start again rather than grow.
            if entries.count >= maxEntries, entries[hash] == nil { entries.removeAll(keepingCapacity: true) }
            entries[hash] = now
        }
    }

    func remove(_ hash: Data) {
        _ = entries.withLock { $0.removeValue(forKey: hash) }
    }

    var count: Int { entries.withLock { $0.count } }
}
