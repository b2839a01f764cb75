import Foundation

/// What the service asks a Shared Signals transmitter for when it creates, updates or replaces its stream. Only the
/// fields a receiver may set: the transmitter sets `stream_id`, `iss`, `aud`, `events_supported`,
/// `events_delivered`, `min_verification_interval` and `inactivity_timeout`, and a request carrying them may be
/// refused.
public struct StreamRequest: Sendable, Equatable {
    public enum Delivery: Sendable, Equatable {
        /// Pushed to `endpointURL`, each push carrying `authorizationHeader` exactly.
        case push(endpointURL: String, authorizationHeader: String)
        /// Polled by us at the URL the transmitter gives.
        case poll
    }

    public var delivery: Delivery
    public var eventsRequested: [String]
    public var description: String

    public init(delivery: Delivery, eventsRequested: [String], description: String = "risc-receiver") {
        self.delivery = delivery
        self.eventsRequested = eventsRequested
        self.description = description
    }

    /// The event types asked for when the operator names none: every RISC and CAEP type the service acts on.
    public static let defaultEventTypes: [String] =
        EventType.actedOn.map(\.rawValue)

    /// The body of `POST configuration_endpoint`, or with `streamID` that of `PATCH` and `PUT`.
    public func json(streamID: String? = nil) -> JSONValue {
        var delivery: [String: JSONValue]
        switch self.delivery {
        case .push(let endpointURL, let authorizationHeader):
            delivery = [
                "method": .string(DeliveryMethod.push.urn), "endpoint_url": .string(endpointURL),
                "authorization_header": .string(authorizationHeader),
            ]
        case .poll:
            delivery = ["method": .string(DeliveryMethod.poll.urn)]
        }
        var body: [String: JSONValue] = [
            "delivery": .object(delivery), "events_requested": .array(eventsRequested.map(JSONValue.string)),
            "description": .string(description),
        ]
        if let streamID { body["stream_id"] = .string(streamID) }
        return .object(body)
    }
}

/// A stream's configuration as its transmitter answers it (create, read, update, replace).
public struct StreamConfiguration: Sendable, Equatable {
    public var streamID: String
    public var issuer: String
    /// `aud` as a list, whether sent as a string or an array.
    public var audience: [String]
    public var eventsSupported: [String]
    public var eventsRequested: [String]
    public var eventsDelivered: [String]
    public var deliveryMethod: DeliveryMethod?
    /// For push, the URL we gave; for poll, the URL we poll.
    public var endpointURL: String?
    public var minVerificationInterval: Int?
    public var description: String?

    public enum Problem: Error, Sendable, Equatable, CustomStringConvertible {
        case notAConfiguration(String)
        /// The answer's `iss` is not the transmitter's issuer: the stream is never used, only deleted (by its id).
        case wrongIssuer(streamID: String)

        public var description: String {
            switch self {
            case .notAConfiguration(let problem): "the transmitter's answer is not a stream configuration: \(problem)"
            case .wrongIssuer: "the stream's iss is not the transmitter's issuer"
            }
        }
    }

    /// Reads one configuration and checks that it is the transmitter's own.
    public init(json: JSONValue, expectedIssuer: String) throws(Problem) {
        guard let object = json.objectValue else { throw .notAConfiguration("not a JSON object") }
        guard let streamID = object["stream_id"]?.stringValue, !streamID.isEmpty else {
            throw .notAConfiguration("no stream_id")
        }
        guard let issuer = object["iss"]?.stringValue, issuer == expectedIssuer else { throw .wrongIssuer(streamID: streamID) }
        func strings(_ name: String) -> [String] {
            switch object[name] {
            case .string(let value): [value]
            case .array(let values): values.compactMap(\.stringValue)
            default: []
            }
        }
        self.streamID = streamID
        self.issuer = issuer
        audience = strings("aud")
        eventsSupported = strings("events_supported")
        eventsRequested = strings("events_requested")
        eventsDelivered = strings("events_delivered")
        let delivery = object["delivery"]?.objectValue
        deliveryMethod = delivery?["method"]?.stringValue.flatMap(DeliveryMethod.init(urn:))
        endpointURL = delivery?["endpoint_url"]?.stringValue
        if case .number(let seconds)? = object["min_verification_interval"], seconds.isFinite, seconds >= 0, seconds < 1e9 {
            minVerificationInterval = Int(seconds)
        }
        description = object["description"]?.stringValue
    }

    /// The streams in a `GET` without `stream_id`: a list, or a single configuration. Those of another issuer are left
    /// out (and reported by id, so the caller never uses them).
    public static func list(json: JSONValue, expectedIssuer: String) -> (streams: [StreamConfiguration], foreign: [String]) {
        let members = json.arrayValue ?? [json]
        var streams: [StreamConfiguration] = []
        var foreign: [String] = []
        for member in members {
            do {
                streams.append(try StreamConfiguration(json: member, expectedIssuer: expectedIssuer))
            } catch .wrongIssuer(let streamID) {
                foreign.append(streamID)
            } catch {
                continue
            }
        }
        return (streams, foreign)
    }
}

/// A stream's status at its transmitter (`enabled`, `paused`, `disabled`), with the reason given.
public struct StreamStatus: Sendable, Equatable {
    public enum State: String, Sendable, CaseIterable, Codable {
        case enabled, paused, disabled
    }

    public var state: State
    public var reason: String?

    public init(state: State, reason: String? = nil) {
        self.state = state
        self.reason = reason
    }

    /// Reads a status endpoint's answer, or a `stream-updated` event's body.
    public init?(json: JSONValue) {
        guard let text = json["status"]?.stringValue, let state = State(rawValue: text) else { return nil }
        self.init(state: state, reason: json["reason"]?.stringValue)
    }
}
