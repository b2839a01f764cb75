import Foundation
import Logging
import PostgresNIO
import RISC
import RISCKeys
import RISCMetrics
import RISCStore
import ServiceLifecycle
import Synchronization

/// Takes the SETs of every poll stream (RFC 8936). One instance polls each stream: the one holding its advisory lock,
/// asked for on a connection of this poller's own, outside the pool, so that the lock lives exactly as long as the
/// connection (an instance that dies hands its streams on). Each SET is checked and stored as a push would be; its
/// jti is acknowledged only in a poll sent after its commit, and a SET refused goes into `setErrs` with the error a
/// push would have been answered with. What is owed is durable (`PollAcks`) until a poll carrying it is answered.
public struct StreamPoller: Service {
    public struct Settings: Sendable {
        /// SETs asked for per poll.
        public var maxEvents = 1_000
        /// How often an instance looks for poll streams to take, and for streams it polls that are gone.
        public var lookInterval: Duration = .seconds(2)
        /// After a failed poll, or one whose SETs could not all be settled: the first wait, doubled each time (with
        /// jitter) up to `maxBackoff`.
        public var backoffBase: Duration = .seconds(1)
        public var maxBackoff: Duration = .seconds(60)
        /// The least time between two polls that brought nothing: a transmitter that answers at once instead of holding
        /// the request (as Keycloak does) is asked once a second, not in a loop.
        public var idlePause: Duration = .seconds(1)
        public init() {}
    }

    let lockConnection: PostgresConnection.Configuration
    let store: TransmitterStore
    let receivers: StreamReceivers
    let inbox: any SETStore
    let acks: PollAcks
    let settings: Settings
    let logger: Logger
    let tokens = StreamTokenCache()

    public init(
        client: PostgresClient, lockConnection: PostgresConnection.Configuration, store: TransmitterStore, receivers: StreamReceivers,
        inbox: any SETStore, settings: Settings = Settings(), logger: Logger
    ) {
        self.lockConnection = lockConnection
        (self.store, self.receivers, self.inbox, self.settings, self.logger) = (store, receivers, inbox, settings, logger)
        self.acks = PollAcks(client: client, logger: logger)
    }

    public func run() async throws {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                do {
                    try await pollWhileConnected()
                } catch {
                    if Task.isCancelled { return }
                    logger.warning(
                        "The stream poller lost its database connection; will retry", metadata: ["error": "\(DatabaseErrors.describe(error))"])
                }
                try? await Task.sleep(for: settings.lookInterval)
            }
        }
    }

    /// On a connection of its own: every `lookInterval`, takes the lock of each poll stream nobody polls, and polls
    /// those it holds, until the connection fails or this task ends.
    private func pollWhileConnected() async throws {
        let connection = try await PostgresConnection.connect(configuration: lockConnection, id: 0, logger: DatabaseURL.poolLogger(logger))
        do {
            try await pollWhileOpen(connection)
        } catch {
            try? await connection.close()
            throw error
        }
        try? await connection.close()
    }

    private func pollWhileOpen(_ connection: PostgresConnection) async throws {
        try await whileOpen(connection) {
            try await withThrowingDiscardingTaskGroup { group in
                let polling = PollingStreams()
                while !Task.isCancelled {
                    let streams = try await self.store.receivingStreams().filter { $0.value.delivery == .poll }
                    for (name, _) in streams where !polling.contains(name) {
                        guard try await self.takeLock(of: name, on: connection) else { continue }
                        polling.insert(name)
                        group.addTask {
                            await self.poll(name)
                            // The stream is gone: its lock goes back, so that it is polled again should it come back.
                            _ = try? await connection.query(
                                "SELECT pg_advisory_unlock(\(AdvisoryLock.pollStreamClass), hashtext(\(name.value)))", logger: self.logger)
                            polling.remove(name)
                        }
                    }
                    try await Task.sleep(for: self.settings.lookInterval)
                }
            }
        }
    }

    private func takeLock(of name: TransmitterName, on connection: PostgresConnection) async throws -> Bool {
        for try await taken in try await connection.query(
            "SELECT pg_try_advisory_lock(\(AdvisoryLock.pollStreamClass), hashtext(\(name.value)))", logger: logger
        ).decode(Bool.self) {
            return taken
        }
        return false
    }

    /// Polls one stream for as long as it is a poll stream: at once again after SETs came, at least `idlePause` after a
    /// poll that brought none, and after a backoff with jitter after an error, or after SETs that could not all be
    /// settled (the database or the keys unavailable: the transmitter will offer them again).
    func poll(_ name: TransmitterName) async {
        logger.info("Polling a stream", metadata: ["transmitter": "\(name)"])
        var failures = 0
        while !Task.isCancelled {
            do {
                guard let stream = try await store.receivingStreams()[name], stream.delivery == .poll, let url = stream.pollURL else {
                    logger.info("A polled stream is gone; no longer polling it", metadata: ["transmitter": "\(name)"])
                    return
                }
                let started = ContinuousClock.now
                let result = try await pollOnce(stream, url: url)
                if result.unsettled > 0 {
                    failures += 1
                    try? await Task.sleep(for: backoff(afterFailures: failures))
                } else {
                    failures = 0
                    if result.taken == 0 { try? await Task.sleep(until: started + settings.idlePause) }
                }
            } catch {
                if Task.isCancelled { return }
                failures += 1
                try? await acks.recordPoll(of: name, outcome: "failed: \(error)")
                ServiceMetrics.pollFailed(transmitter: name.value)
                logger.warning("A poll failed; backing off", metadata: ["transmitter": "\(name)", "error": "\(error)"])
                try? await Task.sleep(for: backoff(afterFailures: failures))
            }
        }
    }

    func backoff(afterFailures failures: Int) -> Duration {
        let base = Double(settings.backoffBase.components.seconds) + Double(settings.backoffBase.components.attoseconds) / 1e18
        let cap = Double(settings.maxBackoff.components.seconds)
        let delay = min(cap, base * pow(2, Double(min(failures - 1, 16))))
        return .milliseconds(Int64(delay * Double.random(in: 0.5...1) * 1000))
    }

    struct PollRefused: Error, CustomStringConvertible {
        let description: String
    }

    /// One poll: sends what is owed, stores each SET returned, and records each one's outcome to send next time.
    /// Returns how many SETs it brought, and how many of them are left for the transmitter to offer again.
    @discardableResult
    func pollOnce(_ stream: TransmitterStore.ReceivingStream, url: String) async throws -> (taken: Int, unsettled: Int) {
        if let problem = TransmitterMetadata.endpointProblem(url, issuer: stream.issuer) {
            throw PollRefused(description: "the stream's poll URL \(problem)")
        }
        let (acknowledged, errors) = try await acks.owed(to: stream.name)
        let request: JSONValue = [
            "maxEvents": .number(Double(settings.maxEvents)), "returnImmediately": false,
            "ack": .array(acknowledged.map(JSONValue.string)),
            "setErrs": .object(errors.mapValues { $0.body.jsonValue }),
        ]
        let management = try await ManagedStream.open(stream.name, store: store, publicURL: nil, tokens: tokens).management
        let answer: (status: Int, body: JSONValue)
        do {
            answer = try await management.poll(url: url, request)
        } catch {
            throw PollRefused(description: error.description)
        }
        guard answer.status == 200, let answered = answer.body["sets"]?.objectValue else {
            throw PollRefused(description: "the transmitter answered HTTP \(answer.status) without sets")
        }
        // The transmitter has what was sent: it is no longer owed. If that cannot be recorded now, it is sent again,
        // which is harmless; the SETs of this answer are taken all the same.
        do {
            try await acks.sent(acknowledged + Array(errors.keys), to: stream.name)
        } catch {
            logger.warning("Could not record the acknowledgements as sent; they go again", metadata: ["transmitter": "\(stream.name)"])
        }
        // At most what was asked for; a jti too long to store or report is left alone (and logged), so that one bad
        // entry cannot stop the rest.
        let sets = answered.sorted { $0.key < $1.key }.prefix(settings.maxEvents).filter { ClaimBounds.fits($0.key) && !$0.key.isEmpty }
        if sets.count < min(answered.count, settings.maxEvents) {
            logger.warning("A poll answer holds SETs under a jti that cannot be kept; they are left", metadata: ["transmitter": "\(stream.name)"])
        }
        ServiceMetrics.polled(transmitter: stream.name.value, sets: answered.count, acks: acknowledged.count, errors: errors.count)
        // Checked against the stream as read for this poll: the receivers' own copy may be a replaced stream's.
        let verifier = await receivers.verifier(for: stream)
        let outcomes = await withTaskGroup(of: PollAcks.Outcome?.self) { group in
            for (jti, value) in sets { group.addTask { await self.take(jti: jti, value, from: stream, verifier: verifier) } }
            var outcomes: [PollAcks.Outcome] = []
            for await outcome in group { if let outcome { outcomes.append(outcome) } }
            return outcomes
        }
        try await acks.record(outcomes, for: stream.name)
        let refused = outcomes.filter { $0.error != nil }.count
        let unsettled = answered.count - outcomes.count
        try await acks.recordPoll(
            of: stream.name,
            outcome: "ok: \(answered.count) SETs, \(outcomes.count - refused) stored, \(refused) refused, \(unsettled) left for later")
        return (answered.count, unsettled)
    }

    /// One SET of a poll: its outcome once final (stored, or refused), or nil when a push would have been answered
    /// 503 (the keys or the database unavailable): it is neither acknowledged nor reported, and comes again.
    func take(
        jti: String, _ value: JSONValue, from stream: TransmitterStore.ReceivingStream, verifier: SETVerifier
    ) async -> PollAcks.Outcome? {
        guard let compact = value.stringValue else {
            return PollAcks.Outcome(jti: jti, error: .invalidRequest("the SET is not a compact JWS string"))
        }
        // As large as a push may be, no larger.
        guard compact.utf8.count <= RequestLimits.maxBodyBytes else {
            return PollAcks.Outcome(jti: jti, error: .invalidRequest("the SET is larger than \(RequestLimits.maxBodyBytes) bytes"))
        }
        let token: SecurityEventToken
        do throws(SETVerifier.Failure) {
            token = try await receivers.check(compact, on: stream, verifier: verifier)
        } catch {
            switch error {
            case .rejected(let rejection): return PollAcks.Outcome(jti: jti, error: rejection)
            case .keysUnavailable: return nil
            }
        }
        guard token.jti == jti else {
            return PollAcks.Outcome(jti: jti, error: .invalidRequest("the SET's jti is not the one it was delivered under"))
        }
        let outcome: EventInbox.Outcome
        do {
            outcome = try await inbox.store(InboundEvent(token: token))
        } catch EventInbox.Failure.unstorable {
            return PollAcks.Outcome(jti: jti, error: .invalidRequest("the claims cannot be stored"))
        } catch {
            return nil
        }
        await receivers.stored(token, on: stream, outcome: outcome)
        return PollAcks.Outcome(jti: jti)
    }
}

/// The streams this instance polls, shared by the loop that takes their locks and the tasks that poll them.
final class PollingStreams: Sendable {
    private let names = Mutex<Set<TransmitterName>>([])

    func contains(_ name: TransmitterName) -> Bool { names.withLock { $0.contains(name) } }
    func insert(_ name: TransmitterName) { _ = names.withLock { $0.insert(name) } }
    func remove(_ name: TransmitterName) { _ = names.withLock { $0.remove(name) } }
}
