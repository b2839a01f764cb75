import Crypto
import Foundation
import RISC
import RISCKeys
import RISCStore
import Synchronization

/// The stream the service manages at one Shared Signals transmitter: what `risc-receiver streams ...` and
/// `/admin/v1/transmitters/{name}/stream` do, one implementation for both. Each call goes to the transmitter's stream
/// endpoints with the stream's access token, and what the transmitter answers is recorded here.
public struct ManagedStream: Sendable {
    /// Why an operation could not be done, in words an operator can act on.
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public enum Kind: Sendable, Equatable {
            /// No such transmitter, or `google` (managed with `stream`).
            case unknownTransmitter
            /// The transmitter has no stream yet, or no longer has it.
            case noStream
            /// What was asked is not valid (an event type, a status).
            case invalid(parameter: String)
            /// RISC_PUBLIC_URL is needed and not set.
            case notConfigured
            /// The transmitter refused, could not be reached, or answered something unusable.
            case transmitter
            /// `verify` with a wait: the event did not arrive in time.
            case timedOut
        }

        public let kind: Kind
        public let description: String

        public init(_ kind: Kind, _ description: String) { (self.kind, self.description) = (kind, description) }
    }

    public let name: TransmitterName
    let store: TransmitterStore
    let connection: TransmitterStore.Connection
    let management: StreamManagement
    /// RISC_PUBLIC_URL: a push stream's URL is made from it.
    let publicURL: String?

    /// The stream of the transmitter `name`; `tokens` keeps access tokens across operations (the server's), else one
    /// is fetched when first needed.
    public static func open(
        _ name: TransmitterName, store: TransmitterStore, publicURL: String?, tokens cache: StreamTokenCache? = nil
    ) async throws -> ManagedStream {
        guard name != .google else { throw Failure(.unknownTransmitter, "google's stream is managed with `risc-receiver stream`") }
        guard let connection = try await store.connection(named: name) else {
            throw Failure(.unknownTransmitter, "no transmitter \(name) (transmitters add \(name) ...)")
        }
        let tokens =
            cache?.tokens(for: name, issuer: connection.metadata.issuer, authorization: connection.authorization)
            ?? StreamAccessTokens(issuer: connection.metadata.issuer, authorization: connection.authorization)
        return ManagedStream(
            name: name, store: store, connection: connection, management: StreamManagement(metadata: connection.metadata, tokens: tokens),
            publicURL: publicURL)
    }

    var authorization: StreamAuthorization { connection.authorization }

    var streamID: String {
        get throws(Failure) {
            guard let id = connection.record.stream?.streamID else { throw Failure(.noStream, "\(name) has no stream yet (streams create \(name))") }
            return id
        }
    }

    /// What to ask for: the transmitter's delivery and events; for push a new URL secret, returned as its hash.
    func request() throws(Failure) -> (StreamRequest, pushSecretHash: Data?) {
        let record = connection.record
        switch record.delivery {
        case .poll:
            return (StreamRequest(delivery: .poll, eventsRequested: record.eventsRequested), nil)
        case .push:
            guard let publicURL else { throw Failure(.notConfigured, "RISC_PUBLIC_URL is not set: a push stream's URL is made from it") }
            let secret = Base64URL.random(bytes: 32)
            let request = StreamRequest(
                delivery: .push(endpointURL: Self.pushEndpoint(publicURL: publicURL, name: name), authorizationHeader: "Bearer " + secret),
                eventsRequested: record.eventsRequested)
            return (request, Data(SHA256.hash(data: Data(secret.utf8))))
        }
    }

    /// Where a push stream delivers: RISC_PUBLIC_URL/ssf/NAME/events.
    public static func pushEndpoint(publicURL: String, name: TransmitterName) -> String {
        let base = publicURL.hasSuffix("/") ? String(publicURL.dropLast()) : publicURL
        return "\(base)/ssf/\(name.value)/events"
    }

    /// A transmitter's refusal, named after it.
    func failure(_ error: StreamManagement.Failure) -> Failure {
        Failure(.transmitter, "\(name): \(error.description)")
    }

    public struct Created: Sendable {
        public var stream: StreamConfiguration
        /// The transmitter answered 409 and its existing stream was taken over.
        public var takenOver: Bool
        /// Event types asked for that the transmitter will not deliver.
        public var notDelivered: [String]

        public var json: JSONValue {
            [
                "stream_id": .string(stream.streamID), "taken_over": .bool(takenOver),
                "events_delivered": .array(stream.eventsDelivered.map(JSONValue.string)),
                "events_not_delivered": .array(notDelivered.map(JSONValue.string)),
            ]
        }
    }

    /// Creates the stream, or takes over the one the transmitter has (409). A stream whose `iss` is not the
    /// transmitter's issuer is never used: it is deleted at once and this fails.
    public func create() async throws -> Created {
        let (request, pushSecretHash) = try request()
        let stream: StreamConfiguration
        var takenOver = false
        do {
            switch try await management.create(request) {
            case .created(let created):
                stream = created
            case .foreign(let streamID, let deleted):
                throw Failure(
                    .transmitter,
                    "\(name): the stream the transmitter made (\(streamID)) names another issuer; it was "
                        + (deleted ? "deleted there, and is not used" : "not used, and could not be deleted: delete it at the transmitter"))
            case .conflict:
                guard let existing = try await management.streams().streams.first else {
                    throw Failure(.transmitter, "\(name): the transmitter answered 409 but lists no stream of its issuer to take over")
                }
                stream = try await management.change(streamID: existing.streamID, request, replace: true)
                takenOver = true
            }
        } catch let error as StreamManagement.Failure {
            throw failure(error)
        }
        try await store.recordStream(stream, of: name, pushSecretHash: pushSecretHash)
        return Created(stream: stream, takenOver: takenOver, notDelivered: Set(request.eventsRequested).subtracting(stream.eventsDelivered).sorted())
    }

    /// The stream's configuration and status, read from the transmitter (the status is recorded), in the order shown.
    public func show() async throws -> [(String, JSONValue)] {
        let streamID = try streamID
        let stream: StreamConfiguration?
        let status: StreamStatus?
        let asked = Date()
        do throws(StreamManagement.Failure) {
            stream = try await management.stream(id: streamID)
            status = connection.metadata.statusEndpoint == nil ? nil : try await management.status(streamID: streamID)
        } catch {
            throw failure(error)
        }
        guard let stream else { throw Failure(.noStream, "\(name): the transmitter no longer has stream \(streamID)") }
        if let status { try await store.recordStatus(status, of: name, streamID: streamID, asOf: asked) }
        return [
            ("stream_id", .string(stream.streamID)), ("iss", .string(stream.issuer)), ("aud", .array(stream.audience.map(JSONValue.string))),
            ("delivery", stream.deliveryMethod.map { .string($0.rawValue) } ?? .null),
            ("endpoint_url", stream.endpointURL.map(JSONValue.string) ?? .null),
            ("events_requested", .array(stream.eventsRequested.map(JSONValue.string))),
            ("events_delivered", .array(stream.eventsDelivered.map(JSONValue.string))),
            ("status", status.map { .string($0.state.rawValue) } ?? .null), ("reason", status?.reason.map(JSONValue.string) ?? .null),
        ] + pollFields
    }

    /// A poll stream's last poll, as this service recorded it.
    var pollFields: [(String, JSONValue)] {
        guard connection.record.delivery == .poll else { return [] }
        let recorded = connection.record.stream
        return [
            ("last_poll_at", recorded?.lastPollAt.map(JSONValue.timestamp) ?? .null),
            ("last_poll_outcome", recorded?.lastPollOutcome.map(JSONValue.string) ?? .null),
        ]
    }

    /// Asks for other event types (`PATCH`); returns what the transmitter will deliver.
    public func update(events: [String]) async throws -> [String] {
        let streamID = try streamID
        let checked: NewTransmitter
        do throws(InvalidParameter) {
            checked = try NewTransmitter(name: name.value, issuer: connection.metadata.issuer, events: events, authorization: authorization)
        } catch {
            throw Failure(.invalid(parameter: error.name), error.description)
        }
        let stream: StreamConfiguration
        do throws(StreamManagement.Failure) {
            stream = try await management.change(
                streamID: streamID, StreamRequest(delivery: .poll, eventsRequested: checked.eventsRequested), replace: false)
        } catch {
            throw failure(error)
        }
        try await store.recordStream(stream, of: name, pushSecretHash: nil)
        return stream.eventsDelivered
    }

    /// Replaces the stream's configuration with what the transmitter was registered with (`PUT`; a push stream gets a
    /// new secret).
    public func replace() async throws {
        let streamID = try streamID
        let (request, pushSecretHash) = try request()
        let stream: StreamConfiguration
        do throws(StreamManagement.Failure) {
            stream = try await management.change(streamID: streamID, request, replace: true)
        } catch {
            throw failure(error)
        }
        try await store.recordStream(stream, of: name, pushSecretHash: pushSecretHash)
    }

    /// Deletes the stream at the transmitter and forgets it here; returns its id.
    public func delete() async throws -> String {
        let streamID = try streamID
        do throws(StreamManagement.Failure) {
            try await management.delete(streamID: streamID)
        } catch {
            throw failure(error)
        }
        try await store.forgetStream(of: name)
        return streamID
    }

    /// Sets the status, or with nil reads it; either way the status the transmitter answers is recorded and returned.
    public func status(setting wanted: StreamStatus?) async throws -> StreamStatus {
        let streamID = try streamID
        let current: StreamStatus
        // A read is as of when it was sent. A change is as of its answer: any read sent before that answer may have
        // been served before the change, and must not be recorded over it.
        var asOf = Date()
        do throws(StreamManagement.Failure) {
            if let wanted {
                current = try await management.setStatus(streamID: streamID, wanted)
                asOf = Date()
            } else {
                current = try await management.status(streamID: streamID)
            }
        } catch {
            throw failure(error)
        }
        try await store.recordStatus(current, of: name, streamID: streamID, asOf: asOf)
        return current
    }

    /// Asks for a verification event with a fresh random state; with `wait`, until it is stored (or fails with
    /// `timedOut`). Returns the state and, having waited, how long it took.
    public func verify(wait: Duration?) async throws -> (state: String, waited: Duration?) {
        _ = try streamID
        let state = Base64URL.random(bytes: 16)
        // Recorded first: the event may arrive before the transmitter has answered.
        try await store.requestVerification(of: name, state: state)
        let started = ContinuousClock.now
        try await verifyRecorded(state: state)
        guard let wait else { return (state, nil) }
        while ContinuousClock.now - started < wait {
            if try await store.verificationHasArrived(of: name, state: state) { return (state, ContinuousClock.now - started) }
            try await Task.sleep(for: .milliseconds(200))
        }
        throw Failure(.timedOut, "\(name): no verification event with state \(state) arrived within \(wait.components.seconds) s")
    }

    /// Asks for a verification event carrying `state`, which the caller has recorded as asked for.
    func verifyRecorded(state: String) async throws {
        let streamID = try streamID
        do throws(StreamManagement.Failure) {
            try await management.verify(streamID: streamID, state: state)
        } catch {
            throw failure(error)
        }
    }

    /// Asks the transmitter to send events about `subject` too, or to stop.
    public func subject(_ subject: Subject, add: Bool) async throws {
        let streamID = try streamID
        do throws(StreamManagement.Failure) {
            try await management.subject(streamID: streamID, subject, add: add)
        } catch {
            throw failure(error)
        }
    }
}

/// The access tokens of each transmitter's stream, kept across requests: a token is reused until shortly before it
/// expires. Kept only while the transmitter's issuer and credential stay the same (removed and added again, it starts
/// afresh).
public final class StreamTokenCache: Sendable {
    private let entries = Mutex<[TransmitterName: (issuer: String, authorization: StreamAuthorization, tokens: StreamAccessTokens)]>([:])

    public init() {}

    func tokens(for name: TransmitterName, issuer: String, authorization: StreamAuthorization) -> StreamAccessTokens {
        entries.withLock { entries in
            if let entry = entries[name], entry.issuer == issuer, entry.authorization == authorization { return entry.tokens }
            let tokens = StreamAccessTokens(issuer: issuer, authorization: authorization)
            entries[name] = (issuer, authorization, tokens)
            return tokens
        }
    }
}
