import Foundation
import Logging
import PostgresNIO
import RISC

/// The Shared Signals transmitters besides Google's: what each is (issuer, metadata, delivery, events), how the service
/// authorises its calls to it (the credential sealed with RISC_VAULT_KEY), and the stream it manages there.
public struct TransmitterStore: SealingStore {
    let client: PostgresClient
    let logger: Logger
    let timeout: Duration
    /// Seals and opens the credentials; nil without RISC_VAULT_KEY: then none can be added or used.
    let cipher: VaultCipher?

    public init(client: PostgresClient, timeout: Duration = .seconds(5), cipher: VaultCipher? = nil, logger: Logger) {
        (self.client, self.timeout, self.cipher, self.logger) = (client, timeout, cipher, logger)
    }

    static let secrets = "transmitters' credentials"

    /// A transmitter of that name, or with that issuer, is already registered.
    public struct AlreadyRegistered: Error, CustomStringConvertible {
        public let name: String
        public var description: String { "a transmitter named \(name), or with that issuer, is already registered" }
    }

    /// Registers a transmitter whose metadata was read from `configURL` and checked. Its stream is created apart.
    public func add(_ transmitter: NewTransmitter, configURL: String, metadata: TransmitterMetadata, configured: Bool = false) async throws {
        let cipher = try requireCipher()
        let sealed = try cipher.seal(transmitter.authorization.secret, transmitter: transmitter.name)
        let (clientID, scope, tokenEndpoint) = Self.clientFields(transmitter.authorization)
        _ = try await bounded { connection in
            let rows = try await connection.query(
                """
                INSERT INTO risc_transmitters (name, issuer, config_url, metadata, delivery, events_requested, auth_method, client_id,
                                               scope, token_endpoint, secret_sealed, secret_key_id, configured)
                VALUES (\(transmitter.name.value), \(transmitter.issuer), \(configURL), \(metadata.document.serialized)::jsonb,
                        \(transmitter.delivery.rawValue), \(transmitter.eventsRequested), \(transmitter.authorization.methodName),
                        \(clientID), \(scope), \(tokenEndpoint), \(sealed), \(cipher.currentKeyID), \(configured))
                ON CONFLICT DO NOTHING
                RETURNING name
                """, logger: logger)
            var inserted = false
            for try await _ in rows.decode(String.self) { inserted = true }
            if !inserted { throw AlreadyRegistered(name: transmitter.name.value) }
        }
    }

    /// Registers a transmitter from RISC_TRANSMITTERS, or changes the configured one of that name to what the
    /// configuration says now. Its stream is kept, unless the issuer changed (the stream is then another
    /// transmitter's). One an operator added is never touched: false then.
    public func upsertConfigured(_ transmitter: NewTransmitter, configURL: String, metadata: TransmitterMetadata) async throws -> Bool {
        let cipher = try requireCipher()
        let sealed = try cipher.seal(transmitter.authorization.secret, transmitter: transmitter.name)
        let (clientID, scope, tokenEndpoint) = Self.clientFields(transmitter.authorization)
        return try await client.transaction(timeout: timeout, logger: logger) { connection in
            // Another issuer: the stream, its health, its verifications and what its poller owed were another
            // transmitter's.
            try await connection.query(
                """
                DELETE FROM risc_poll_acks a USING risc_transmitters t
                 WHERE a.transmitter = t.name AND t.name = \(transmitter.name.value) AND t.configured AND t.issuer <> \(transmitter.issuer)
                """, logger: logger)
            try await connection.query(
                """
                DELETE FROM risc_stream_verifications v USING risc_transmitters t
                 WHERE v.transmitter = t.name AND t.name = \(transmitter.name.value) AND t.configured AND t.issuer <> \(transmitter.issuer)
                """, logger: logger)
            try await connection.query(
                """
                UPDATE risc_transmitters
                   SET stream_id = NULL, stream_audience = NULL, events_delivered = NULL, poll_url = NULL, push_secret_hash = NULL,
                       stream_status = NULL, stream_status_reason = NULL, stream_status_at = NULL, health_probed_at = NULL,
                       health_endpoint_url = NULL, health_error = NULL, poll_last_at = NULL, poll_last_outcome = NULL
                 WHERE name = \(transmitter.name.value) AND configured AND issuer <> \(transmitter.issuer)
                """, logger: logger)
            let rows = try await connection.query(
                """
                INSERT INTO risc_transmitters AS t (name, issuer, config_url, metadata, delivery, events_requested, auth_method, client_id,
                                                    scope, token_endpoint, secret_sealed, secret_key_id, configured)
                VALUES (\(transmitter.name.value), \(transmitter.issuer), \(configURL), \(metadata.document.serialized)::jsonb,
                        \(transmitter.delivery.rawValue), \(transmitter.eventsRequested), \(transmitter.authorization.methodName),
                        \(clientID), \(scope), \(tokenEndpoint), \(sealed), \(cipher.currentKeyID), true)
                ON CONFLICT (name) DO UPDATE
                   SET issuer = EXCLUDED.issuer, config_url = EXCLUDED.config_url, metadata = EXCLUDED.metadata,
                       delivery = EXCLUDED.delivery, events_requested = EXCLUDED.events_requested, auth_method = EXCLUDED.auth_method,
                       client_id = EXCLUDED.client_id, scope = EXCLUDED.scope, token_endpoint = EXCLUDED.token_endpoint,
                       secret_sealed = EXCLUDED.secret_sealed, secret_key_id = EXCLUDED.secret_key_id
                 WHERE t.configured
                RETURNING name
                """, logger: logger)
            var written = false
            for try await _ in rows.decode(String.self) { written = true }
            return written
        }
    }

    /// Removes the configured transmitters not in `names` (RISC_TRANSMITTERS no longer lists them); returns their names.
    public func removeConfigured(keeping names: [TransmitterName]) async throws -> [String] {
        try await bounded { connection in
            try await connection.values(
                "DELETE FROM risc_transmitters WHERE configured AND name <> ALL(\(names.map(\.value))) RETURNING name", as: String.self,
                logger: logger)
        }
    }

    private static func clientFields(_ authorization: StreamAuthorization) -> (String?, String?, String?) {
        switch authorization {
        case .clientCredentials(let clientID, _, _, let scope, let tokenEndpoint): (clientID, scope, tokenEndpoint)
        case .bearer: (nil, nil, nil)
        }
    }

    static let columns = """
        name, issuer, config_url, metadata::text, delivery, events_requested, auth_method, client_id, scope, token_endpoint,
        configured, created_at, stream_id, stream_audience, events_delivered, poll_url, stream_status, stream_status_reason,
        stream_status_at, poll_last_at, poll_last_outcome
        """
    typealias Row = (
        String, String, String, String, String, [String], String, String?, String?, String?, Bool, Date, String?, [String]?, [String]?,
        String?, String?, String?, Date?, Date?, String?
    )

    public func transmitters() async throws -> [TransmitterRecord] {
        try await bounded { connection in
            var found: [TransmitterRecord] = []
            for try await row in try await connection.query(
                "SELECT \(unescaped: Self.columns) FROM risc_transmitters ORDER BY name", logger: logger
            ).decode(Row.self) {
                found.append(TransmitterRecord(row: row))
            }
            return found
        }
    }

    public func transmitter(named name: TransmitterName) async throws -> TransmitterRecord? {
        try await bounded { connection in
            var found: TransmitterRecord?
            for try await row in try await connection.query(
                "SELECT \(unescaped: Self.columns) FROM risc_transmitters WHERE name = \(name.value)", logger: logger
            ).decode(Row.self) {
                found = TransmitterRecord(row: row)
            }
            return found
        }
    }

    /// Forgets a transmitter, its credential and its stream's record (the stream at the transmitter is deleted apart).
    /// The events it delivered stay. False if there was none.
    public func remove(named name: TransmitterName) async throws -> Bool {
        try await bounded { connection in
            let removed = try await connection.values(
                "DELETE FROM risc_transmitters WHERE name = \(name.value) RETURNING name", as: String.self, logger: logger)
            return !removed.isEmpty
        }
    }

    /// The authorization for a transmitter's stream endpoints, its credential opened; nil if there is no such
    /// transmitter.
    public func authorization(named name: TransmitterName) async throws -> StreamAuthorization? {
        let cipher = try requireCipher()
        return try await bounded { connection in
            var found: StreamAuthorization?
            for try await (method, clientID, scope, tokenEndpoint, sealed, keyID) in try await connection.query(
                """
                SELECT auth_method, client_id, scope, token_endpoint, secret_sealed, secret_key_id
                  FROM risc_transmitters WHERE name = \(name.value)
                """, logger: logger
            ).decode((String, String?, String?, String?, Data, String).self) {
                let secret = try cipher.open(sealed, keyID: keyID, transmitter: name)
                if let clientID, let clientMethod = StreamAuthorization.ClientAuthentication(rawValue: method) {
                    found = .clientCredentials(
                        clientID: clientID, method: clientMethod, secret: secret, scope: scope ?? StreamAuthorization.defaultScope,
                        tokenEndpoint: tokenEndpoint)
                } else {
                    found = .bearer(token: secret)
                }
            }
            return found
        }
    }
}

extension TransmitterStore {
    /// What calling a transmitter's stream endpoints needs: its metadata as stored (checked again), and its
    /// authorization with the credential opened.
    public struct Connection: Sendable {
        public let record: TransmitterRecord
        public let metadata: TransmitterMetadata
        public let authorization: StreamAuthorization
    }

    /// Nil if there is no such transmitter.
    public func connection(named name: TransmitterName) async throws -> Connection? {
        guard let record = try await transmitter(named: name), let authorization = try await authorization(named: name),
            let issuer = record.issuer
        else { return nil }
        let metadata = try TransmitterMetadata(json: Array((record.metadata ?? .null).serialized.utf8), expectedIssuer: issuer)
        return Connection(record: record, metadata: metadata, authorization: authorization)
    }

    /// Records the stream the transmitter made (or the one taken over): its id, audience, what it delivers, the URL to
    /// poll, and for push the SHA-256 of the secret each push must carry.
    public func recordStream(_ stream: StreamConfiguration, of name: TransmitterName, pushSecretHash: Data?) async throws {
        _ = try await bounded { connection in
            // What a poller owed another stream is not this one's to send.
            try await connection.query(
                """
                DELETE FROM risc_poll_acks WHERE transmitter = \(name.value)
                   AND (SELECT stream_id FROM risc_transmitters WHERE name = \(name.value)) IS DISTINCT FROM \(stream.streamID)
                """, logger: logger)
            try await connection.query(
                """
                UPDATE risc_transmitters
                   SET stream_id = \(stream.streamID), stream_audience = \(stream.audience), events_delivered = \(stream.eventsDelivered),
                       poll_url = \(stream.deliveryMethod == .poll ? stream.endpointURL : nil),
                       push_secret_hash = coalesce(\(pushSecretHash), push_secret_hash),
                       -- Another stream's status is not this one's.
                       stream_status = CASE WHEN stream_id IS DISTINCT FROM \(stream.streamID) THEN NULL ELSE stream_status END,
                       stream_status_reason = CASE WHEN stream_id IS DISTINCT FROM \(stream.streamID) THEN NULL ELSE stream_status_reason END,
                       stream_status_at = CASE WHEN stream_id IS DISTINCT FROM \(stream.streamID) THEN NULL ELSE stream_status_at END
                 WHERE name = \(name.value)
                """, logger: logger)
        }
    }

    /// The stream is gone at the transmitter: forget it here too.
    public func forgetStream(of name: TransmitterName) async throws {
        _ = try await bounded { connection in
            try await connection.query("DELETE FROM risc_poll_acks WHERE transmitter = \(name.value)", logger: logger)
            try await connection.query(
                """
                UPDATE risc_transmitters
                   SET stream_id = NULL, stream_audience = NULL, events_delivered = NULL, poll_url = NULL, push_secret_hash = NULL,
                       stream_status = NULL, stream_status_reason = NULL, stream_status_at = NULL
                 WHERE name = \(name.value)
                """, logger: logger)
        }
    }

    /// The status the transmitter reported for stream `streamID` (its status endpoint, or a stream-updated event), as
    /// of `asOf`: when the request that read it was sent, or when the event was issued. A status known as of an earlier
    /// time than the one recorded is dropped: a probe's slow read must not undo a pause set while it waited. So is one
    /// of a stream that is no longer the transmitter's (deleted or replaced meanwhile). Returns whether it was kept.
    @discardableResult
    public func recordStatus(_ status: StreamStatus, of name: TransmitterName, streamID: String, asOf: Date) async throws -> Bool {
        let updated = try await bounded { connection in
            try await connection.query(
                """
                UPDATE risc_transmitters
                   SET stream_status = \(status.state.rawValue), stream_status_reason = \(status.reason), stream_status_at = \(asOf)
                 WHERE name = \(name.value) AND stream_id = \(streamID)
                   AND (stream_status_at IS NULL OR stream_status_at <= \(asOf))
                RETURNING 1
                """, logger: logger
            ).collect().count
        }
        return updated > 0
    }
}

extension TransmitterStore {
    /// What receiving on a transmitter's stream needs, by push or by poll.
    public struct ReceivingStream: Sendable {
        public let name: TransmitterName
        public let issuer: String
        public let configURL: String
        public let streamID: String
        public let audience: [String]
        public let delivery: DeliveryMethod
        /// Push: the SHA-256 of the authorization header's secret each push must carry.
        public let secretHash: Data?
        /// Poll: the transmitter's URL to poll.
        public let pollURL: String?
        public let criticalSubjectMembers: [String]
    }

    /// Every stream that can receive (a push stream with its secret, a poll stream with its URL), by transmitter name:
    /// a small table, read whole so that a push to a name that has none is answered without a query.
    public func receivingStreams() async throws -> [TransmitterName: ReceivingStream] {
        try await bounded { connection in
            var found: [TransmitterName: ReceivingStream] = [:]
            for try await (text, issuer, configURL, streamID, audience, delivery, hash, pollURL, critical) in try await connection.query(
                """
                SELECT name, issuer, config_url, stream_id, stream_audience, delivery, push_secret_hash, poll_url,
                       coalesce(ARRAY(SELECT jsonb_array_elements_text(metadata -> 'critical_subject_members')), '{}')
                  FROM risc_transmitters
                 WHERE stream_id IS NOT NULL
                   AND ((delivery = 'push' AND push_secret_hash IS NOT NULL) OR (delivery = 'poll' AND poll_url IS NOT NULL))
                """, logger: logger
            ).decode((String, String, String, String, [String]?, String, Data?, String?, [String]).self) {
                guard let name = try? TransmitterName(naming: text), let delivery = DeliveryMethod(rawValue: delivery) else { continue }
                found[name] = ReceivingStream(
                    name: name, issuer: issuer, configURL: configURL, streamID: streamID, audience: audience ?? [], delivery: delivery,
                    secretHash: hash, pollURL: pollURL, criticalSubjectMembers: critical)
            }
            return found
        }
    }

    /// A verification state the service asks the transmitter to echo.
    public func requestVerification(of name: TransmitterName, state: String) async throws {
        _ = try await bounded { connection in
            try await connection.query(
                "INSERT INTO risc_stream_verifications (transmitter, state) VALUES (\(name.value), \(state))", logger: logger)
        }
    }

    /// Marks `state` as arrived in the SET `jti`. False when the service never asked for it, or another SET already
    /// brought it (a redelivery of the same SET is accepted again).
    public func verificationArrived(of name: TransmitterName, state: String, jti: String) async throws -> Bool {
        try await bounded { connection in
            let rows = try await connection.values(
                """
                UPDATE risc_stream_verifications SET arrived_at = coalesce(arrived_at, now()), arrived_jti = \(jti)
                 WHERE transmitter = \(name.value) AND state = \(state) AND (arrived_jti IS NULL OR arrived_jti = \(jti))
                RETURNING state
                """, as: String.self, logger: logger)
            return !rows.isEmpty
        }
    }

    /// Whether a SET `jti` may bring `state`: the service asked for it, and no other SET brought it (a redelivery of
    /// the same SET may).
    public func verificationExpected(of name: TransmitterName, state: String, jti: String) async throws -> Bool {
        try await bounded { connection in
            let rows = try await connection.values(
                """
                SELECT state FROM risc_stream_verifications
                 WHERE transmitter = \(name.value) AND state = \(state) AND (arrived_jti IS NULL OR arrived_jti = \(jti))
                """, as: String.self, logger: logger)
            return !rows.isEmpty
        }
    }

    /// Whether the verification asked for with `state` has arrived.
    public func verificationHasArrived(of name: TransmitterName, state: String) async throws -> Bool {
        try await bounded { connection in
            let rows = try await connection.values(
                """
                SELECT state FROM risc_stream_verifications
                 WHERE transmitter = \(name.value) AND state = \(state) AND arrived_at IS NOT NULL
                """, as: String.self, logger: logger)
            return !rows.isEmpty
        }
    }
}

/// One transmitter as the admin API and `transmitters list|show --json` show it: never its credential.
public struct TransmitterRecord: Sendable, Equatable, Encodable {
    public struct Stream: Sendable, Equatable, Encodable {
        public var streamID: String
        public var audience: [String]
        public var eventsDelivered: [String]
        /// Poll: the transmitter's URL polled.
        public var pollURL: String?
        /// What the transmitter last reported, and when.
        public var status: String?
        public var statusReason: String?
        public var statusAt: Date?
        /// Poll: the last poll's time and outcome.
        public var lastPollAt: Date?
        public var lastPollOutcome: String?
    }

    public var name: String
    /// Nil for google with a RISC_CONFIGURATION_URL of its own: its issuer is what that document says.
    public var issuer: String?
    public var builtIn: Bool
    public var configURL: String
    public var delivery: DeliveryMethod
    public var eventsRequested: [String]
    /// `client_secret_basic`, `client_secret_post`, `private_key_jwt` or `bearer`.
    public var authMethod: String?
    public var clientID: String?
    public var scope: String?
    public var tokenEndpoint: String?
    /// Always `redacted` when there is one: the credential is shown to no one once given.
    public var credential: String?
    public var configured: Bool
    public var createdAt: Date?
    public var metadata: JSONValue?
    public var stream: Stream?

    init(row: TransmitterStore.Row) {
        let (
            name, issuer, configURL, metadata, delivery, eventsRequested, authMethod, clientID, scope, tokenEndpoint, configured,
            createdAt, streamID, audience, eventsDelivered, pollURL, status, statusReason, statusAt, lastPollAt, lastPollOutcome
        ) = row
        (self.name, self.issuer, self.configURL, builtIn) = (name, issuer, configURL, false)
        self.metadata = .verbatim(metadata)
        self.delivery = DeliveryMethod(rawValue: delivery) ?? .push
        self.eventsRequested = eventsRequested
        (self.authMethod, self.clientID, self.scope, self.tokenEndpoint) = (authMethod, clientID, scope, tokenEndpoint)
        credential = "redacted"
        (self.configured, self.createdAt) = (configured, createdAt)
        stream = streamID.map {
            Stream(
                streamID: $0, audience: audience ?? [], eventsDelivered: eventsDelivered ?? [], pollURL: pollURL, status: status,
                statusReason: statusReason, statusAt: statusAt, lastPollAt: lastPollAt, lastPollOutcome: lastPollOutcome)
        }
    }

    /// Google's transmitter, configured by RISC_CONFIGURATION_URL and managed by `stream` commands.
    public init(google configURL: String) {
        let defaultURL = "https://accounts.google.com/.well-known/risc-configuration"
        issuer = configURL == defaultURL ? "https://accounts.google.com/" : nil
        (name, builtIn, self.configURL, delivery) = (TransmitterName.google.value, true, configURL, .push)
        eventsRequested = EventType.googleRISCTypes.map(\.rawValue)
        configured = true
    }
}
