import Crypto
import Foundation
import Hummingbird
import Logging
import RISC
import RISCKeys
import RISCStore

/// Receiving on the Shared Signals transmitters' streams: each transmitter with its own keys (from its metadata's
/// `jwks_uri`), issuer and stream audience. A push (`POST /ssf/{name}/events`) must carry the authorization header
/// the stream was created with; a poll stream's SETs come from its poller. Either way the SET is checked by Google's
/// rules and the stream's (`typ`, verification subject and state), stored, and a `stream-updated` recorded.
public actor StreamReceivers {
    let store: TransmitterStore
    let allowedAlgorithms: Set<String>
    let unknownKidRefetchInterval: TimeInterval
    let logger: Logger
    /// One key cache per transmitter, kept across reloads of its record (keyed by its metadata URL too, so a
    /// transmitter registered again under the same name starts afresh).
    private var keys: [String: IssuerKeys] = [:]
    /// Every push stream, as last read, and when; a push reads them again once they are older than
    /// `reloadInterval` (a stream replaced meanwhile), one read at a time.
    private var streams: [TransmitterName: TransmitterStore.ReceivingStream] = [:]
    private var loaded: ContinuousClock.Instant?
    private var reading: Task<[TransmitterName: TransmitterStore.ReceivingStream], any Error>?
    static let reloadInterval: Duration = .seconds(2)

    public init(store: TransmitterStore, allowedAlgorithms: Set<String>, unknownKidRefetchInterval: TimeInterval = 30, logger: Logger) {
        (self.store, self.allowedAlgorithms, self.unknownKidRefetchInterval, self.logger) =
            (store, allowedAlgorithms, unknownKidRefetchInterval, logger)
    }

    /// A name with no stream reads them again too, at most four times a second: a stream just created is found,
    /// and pushes to made-up names cost the database little.
    static let missReloadInterval: Duration = .milliseconds(250)

    private func reload(ifOlderThan age: Duration) async throws {
        guard loaded.map({ ContinuousClock.now - $0 >= age }) ?? true else { return }
        let task = reading ?? Task { [store] in try await store.receivingStreams() }
        reading = task
        defer { reading = nil }
        streams = try await task.value
        loaded = .now
    }

    func stream(named name: TransmitterName) async throws -> (TransmitterStore.ReceivingStream, SETVerifier)? {
        try await reload(ifOlderThan: Self.reloadInterval)
        if streams[name] == nil { try await reload(ifOlderThan: Self.missReloadInterval) }
        guard let stream = streams[name] else { return nil }
        return (stream, verifier(for: stream))
    }

    /// The verifier of `stream`'s SETs: its transmitter's keys (kept across reloads) and its stream's audience.
    func verifier(for stream: TransmitterStore.ReceivingStream) -> SETVerifier {
        let keyName = "\(stream.name.value) \(stream.configURL)"
        let issuerKeys: IssuerKeys
        if let existing = keys[keyName] {
            issuerKeys = existing
        } else {
            // The transmitter's metadata names its issuer and jwks_uri, as a RISC discovery document does.
            var settings = IssuerKeys.Settings(discoveryURL: stream.configURL, allowedAlgorithms: allowedAlgorithms)
            settings.unknownKidRefetchInterval = unknownKidRefetchInterval
            settings.metricsLabel = "ssf"
            issuerKeys = IssuerKeys(settings: settings, logger: logger)
            keys[keyName] = issuerKeys
        }
        let policy = SETPolicy(allowedAlgorithms: allowedAlgorithms, audiences: Set(stream.audience))
        return SETVerifier(keys: issuerKeys, policy: policy)
    }

    /// Exactly `Bearer <the stream's secret>`, compared by its SHA-256 in constant time.
    static func authorized(_ request: Request, secretHash: Data) -> Bool {
        guard let header = request.headers[.authorization], header.hasPrefix("Bearer ") else { return false }
        let given = Data(SHA256.hash(data: Data(header.dropFirst("Bearer ".count).utf8)))
        return SecretComparison.equalDigests(given, secretHash)
    }

    nonisolated func receive<Context: RequestContext, Inbox: SETStore>(
        _ request: Request, context: Context, controller: ReceiverController<Context, Inbox>
    ) async -> (Response, String, String) {
        guard let text = context.parameters.get("name"), let name = try? TransmitterName(text) else {
            return (Response(status: .notFound), "unparsed", "unknown_stream")
        }
        let found: (TransmitterStore.ReceivingStream, SETVerifier)?
        do {
            found = try await stream(named: name)
        } catch {
            return (ReceiverController<Context, Inbox>.retryLater(seconds: 5), "unparsed", "unavailable")
        }
        guard let (stream, verifier) = found, stream.delivery == .push, let secretHash = stream.secretHash else {
            return (Response(status: .notFound), "unparsed", "unknown_stream")
        }
        guard Self.authorized(request, secretHash: secretHash) else {
            let rejection = SETRejection(.authenticationFailed, "the push does not carry this stream's authorization header")
            var response = JSONResponse.make(status: .unauthorized, json: rejection.body.jsonValue)
            response.status = .unauthorized
            return (response, "unparsed", rejection.code.rawValue)
        }
        return await controller.receive(
            request, logger: context.logger,
            verify: { compact throws(SETVerifier.Failure) in try await self.check(compact, on: stream, verifier: verifier) },
            stored: { token, outcome in await self.stored(token, on: stream, outcome: outcome) })
    }

    /// A SET of the stream, checked by the rules of `/risc/events` and the stream's; the token to store, its events read by the stream's
    /// subject rules.
    nonisolated func check(
        _ compact: String, on stream: TransmitterStore.ReceivingStream, verifier: SETVerifier
    ) async throws(SETVerifier.Failure) -> SecurityEventToken {
        let token = try await verifier.verify(compact)
        // The issuer registered, not only the one the transmitter's metadata says now: a transmitter that
        // changed its metadata's issuer (to Google's, say) must not be believed.
        guard token.issuer == stream.issuer else {
            throw .rejected(SETRejection(.invalidIssuer, "the issuer is not this stream's transmitter"))
        }
        let states: [String]
        do throws(SETRejection) {
            try StreamEventRules.checkType(token.header)
            states = try StreamEventRules.checkVerifications(token, streamID: stream.streamID)
        } catch {
            throw .rejected(error)
        }
        for state in states {
            let expected: Bool
            do {
                expected = try await store.verificationExpected(of: stream.name, state: state, jti: token.jti)
            } catch {
                // The database is down: the transmitter retries, as for a SET that cannot be committed.
                throw .keysUnavailable(retryAfter: 5)
            }
            guard expected else {
                throw .rejected(SETRejection(.invalidState, "the state is not one this receiver asked for, or it has arrived already"))
            }
        }
        return token.receivedOnSharedSignalsStream(criticalSubjectMembers: stream.criticalSubjectMembers)
    }

    /// Once the SET is committed: its verification states arrive (a state used by a SET never stored stays open), and a
    /// stream-updated is recorded, unless it is a redelivery: an old status must not overwrite a newer one.
    nonisolated func stored(_ token: SecurityEventToken, on stream: TransmitterStore.ReceivingStream, outcome: EventInbox.Outcome) async {
        // The SET is committed and will be acknowledged whatever happens here; nothing retries a failure, so it is said.
        func warn(_ what: String, _ error: any Error) {
            logger.warning(
                "A stream's \(what) was not recorded", metadata: ["transmitter": "\(stream.name)", "error": "\(DatabaseErrors.describe(error))"])
        }
        for state in (try? StreamEventRules.checkVerifications(token, streamID: stream.streamID)) ?? [] {
            do {
                _ = try await store.verificationArrived(of: stream.name, state: state, jti: token.jti)
            } catch {
                warn("verification", error)
            }
        }
        guard outcome == .stored, let status = StreamEventRules.reportedStatus(token, streamID: stream.streamID) else { return }
        do {
            // As of the end of its iat's second (iat counts whole seconds, so a change made just after a read in the same
            // second still wins), but never later than now: a transmitter's fast clock must not outrank later reads.
            try await store.recordStatus(status, of: stream.name, streamID: stream.streamID, asOf: min(token.issuedAt.addingTimeInterval(1), Date()))
        } catch {
            warn("status", error)
        }
    }
}
