import Foundation
import Logging
import PostgresNIO
import RISC
import ServiceLifecycle
import Synchronization

/// Valid session checks, kept in memory so the hot path skips the database. Correctness comes from
/// invalidation, not expiry: every change to a user's sessions or account flags is announced by triggers on
/// the `risc_session_changes` channel (routine risc_user_changed), and the entries of those users are dropped at once.
///
/// The cache only answers while its LISTEN connection is up; when the connection drops it is emptied and
/// bypassed until LISTEN is back, so a missed notification can never leave a revoked session valid.
public final class SessionCache: Service, Sendable {
    public static let channel = "risc_session_changes"

    struct Entry {
        var sub: String
        var value: SessionStore.Lookup
        var cachedAt: ContinuousClock.Instant
    }

    struct State {
        var entries: [Data: Entry] = [:]
        var hashesBySub: [String: Set<Data>] = [:]
        var listening = false
        /// Whether the database's triggers announce changes on this build's channel, in its format, as last checked.
        /// A build that listens on a channel nobody sends on would hear nothing: a new binary started before
        /// `migrate`, or the triggers put back by an older build's `migrate`.
        var triggersSpeakChannel = false
        /// The cache answers, and keeps what it reads, only while both hold.
        var answering: Bool { listening && triggersSpeakChannel }
        /// Bumped by every invalidation: a database read that began before one must not be cached after it.
        var epoch: UInt64 = 0
    }

    let client: PostgresClient
    let logger: Logger
    let maxEntries: Int
    /// A safety net only: entries are refreshed after this long even without a notification.
    let maxAge: Duration
    private let state = Mutex(State())

    public init(client: PostgresClient, maxEntries: Int = 200_000, maxAge: Duration = .seconds(60), logger: Logger) {
        self.client = client
        self.maxEntries = maxEntries
        self.maxAge = maxAge
        self.logger = logger
    }

    /// A cached answer for a token hash, if there is a fresh one.
    func lookup(_ hash: Data, now: Date) -> SessionStore.Lookup? {
        state.withLock { state in
            guard state.answering, let entry = state.entries[hash] else { return nil }
            guard ContinuousClock.now - entry.cachedAt < maxAge, case .valid(_, _, let expiresAt, _) = entry.value,
                expiresAt > now
            else {
                state.entries[hash] = nil
                state.hashesBySub[entry.sub]?.remove(hash)
                return nil
            }
            return entry.value
        }
    }

    /// The epoch to pass to `store` once the database has answered.
    func currentEpoch() -> UInt64? {
        state.withLock { $0.answering ? $0.epoch : nil }
    }

    /// Caches a valid answer read from the database, unless an invalidation arrived since the read began.
    func store(_ hash: Data, sub: String, _ value: SessionStore.Lookup, readAt epoch: UInt64) {
        state.withLock { state in
            guard state.answering, state.epoch == epoch else { return }
            if state.entries.count >= maxEntries {
                state.entries.removeAll(keepingCapacity: true)
                state.hashesBySub.removeAll(keepingCapacity: true)
            }
            state.entries[hash] = Entry(sub: sub, value: value, cachedAt: .now)
            state.hashesBySub[sub, default: []].insert(hash)
        }
    }

    /// Drops these users' entries at once: this process changed them (the inbox applied events on receipt),
    /// so its next check must not wait for the NOTIFY. The trigger tells the other processes.
    public func invalidate(subs: some Collection<String>) {
        guard !subs.isEmpty else { return }
        state.withLock { state in
            state.epoch &+= 1
            for sub in subs {
                for hash in state.hashesBySub.removeValue(forKey: sub) ?? [] { state.entries[hash] = nil }
            }
        }
    }

    func invalidateAll() {
        state.withLock { state in
            state.epoch &+= 1
            state.entries.removeAll()
            state.hashesBySub.removeAll()
        }
    }

    /// Drops one session at once (sign-out in this process); the trigger tells the others.
    func remove(_ hash: Data) {
        state.withLock { state in
            state.epoch &+= 1
            if let entry = state.entries.removeValue(forKey: hash) { state.hashesBySub[entry.sub]?.remove(hash) }
        }
    }

    /// A payload on the channel: empty is the heartbeat; else a JSON array of the subs a statement changed, or `*` (a
    /// sub too long to share a payload), which drops everything, as does anything unreadable.
    func heard(_ payload: String) {
        guard !payload.isEmpty else { return }
        guard payload != "*", let listed = try? JSONValue.parse(payload.utf8).arrayValue,
            case let subs = listed.compactMap(\.stringValue), subs.count == listed.count
        else {
            invalidateAll()
            return
        }
        invalidate(subs: subs)
    }

    private func setListening(_ listening: Bool) {
        invalidateAll()
        state.withLock { state in
            state.listening = listening
            // A new connection checks the triggers again before the cache answers.
            if !listening { state.triggersSpeakChannel = false }
        }
    }

    private func setTriggersSpeakChannel(_ speak: Bool) {
        let stopped = state.withLock { state in
            defer { state.triggersSpeakChannel = speak }
            return state.triggersSpeakChannel && !speak
        }
        guard stopped else { return }
        invalidateAll()
        logger.warning(
            "The database's session triggers do not announce changes on this build's channel; checking sessions in the database",
            metadata: ["channel": "\(Self.channel)"])
    }

    /// Holds the LISTEN connection; reconnects after a failure, with the cache bypassed meanwhile.
    /// How often the listener checks its own connection with a heartbeat notification, and how long it
    /// waits for one before it treats the connection as dead (a half-open TCP connection reports no error).
    static let heartbeatInterval: Duration = .seconds(5)
    static let heartbeatTimeout: Duration = .seconds(12)

    struct StaleConnection: Error {}

    final class LastHeard: Sendable {
        private let time = Mutex(ContinuousClock.now)
        func withLock<T>(_ body: (inout ContinuousClock.Instant) -> T) -> T { time.withLock { body(&$0) } }
    }

    public func run() async throws {
        try? await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                do {
                    try await self.listenWithHeartbeat()
                } catch {
                    if Task.isCancelled { break }
                    self.logger.warning(
                        "Lost the session-invalidation LISTEN connection; checking sessions in the database until it is back",
                        metadata: ["error": "\(DatabaseErrors.describe(error))"])
                }
                self.setListening(false)
                try await Task.sleep(for: .seconds(1))
            }
        }
        setListening(false)
    }

    private func listenWithHeartbeat() async throws {
        let lastHeard = LastHeard()
        try await client.withConnection { connection in
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    // Ends as soon as the connection closes: a LISTEN on a closed connection would wait for good.
                    try await whileOpen(connection) {
                        try await connection.listen(on: Self.channel) { notifications in
                            lastHeard.withLock { $0 = .now }
                            self.setListening(true)
                            for try await notification in notifications {
                                lastHeard.withLock { $0 = .now }
                                self.heard(notification.payload)
                            }
                        }
                    }
                }
                group.addTask {
                    while true {
                        // The heartbeat, and whether the triggers still speak this build's channel: checked before
                        // the cache first answers, then every interval. A failed check leaves the last answer.
                        let speak = try? await self.client.withConnection(timeout: .seconds(2)) { connection in
                            try await connection.query(
                                """
                                SELECT EXISTS (SELECT 1 FROM pg_proc WHERE proname = 'risc_user_changed' AND strpos(prosrc, \(Self.channel)) > 0)
                                  FROM (SELECT pg_notify(\(Self.channel), '')) AS heartbeat
                                """, logger: self.logger
                            ).collect().first?.decode(Bool.self)
                        }
                        if let speak { self.setTriggersSpeakChannel(speak) }
                        try await Task.sleep(for: Self.heartbeatInterval)
                        if ContinuousClock.now - lastHeard.withLock({ $0 }) > Self.heartbeatTimeout {
                            // Closed, not abandoned: a connection whose server vanished would stay leased for good.
                            try? await connection.close()
                            throw StaleConnection()
                        }
                    }
                }
                // Either child ending ends the connection: the caller empties the cache and reconnects.
                try await group.next()
                group.cancelAll()
            }
        }
    }
}
