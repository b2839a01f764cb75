import Foundation

/// Whether Google's deliveries reach us, judged from what the probes recorded. No I/O: the prober
/// and `stream health` read the facts, this decides.
public struct DeliveryHealth: Sendable, Equatable {
    /// What the probes recorded.
    public struct Facts: Sendable, Equatable {
        public var lastVerifiedAt: Date?
        /// Of the last probe whose SET arrived.
        public var roundTripSeconds: Double?
        public var probesTimedOut = 0
        /// As the management API reported at the last probe; nil when it could not be read (see `managementError`).
        public var streamEnabled: Bool?
        public var reportedDeliveryURL: String?
        public var reportedEventTypes: [String]?
        public var managementError: String?
        /// A stream change (`stream update|enable|disable`) made at or after the latest probe read the stream: what
        /// that probe reported is out of date, and the next probe (at once, while a prober runs) reads it again.
        public var streamChangedAfterProbe: Date?
        public init() {}
    }

    public var facts: Facts
    public var healthy: Bool { problems.isEmpty }
    /// Nil when the stream configuration is not known.
    public var deliveryURLMatches: Bool?
    public var problems: [String]

    /// The event types the service acts on: each must be requested (verification is asked for by the probe itself).
    public static let actedOnTypes = EventType.googleRISCTypes.filter { $0 != .verification }

    public init(facts: Facts, now: Date, interval: Double, deliveryURL: String) {
        var problems: [String] = []
        if let last = facts.lastVerifiedAt {
            let age = now.timeIntervalSince(last)
            if age > 2 * interval {
                problems.append("no verification SET has arrived for \(Int(age)) s (more than 2 intervals of \(Self.seconds(interval)) s)")
            }
        } else {
            problems.append("no verification SET has arrived yet")
        }
        var facts = facts
        if let changed = facts.streamChangedAfterProbe {
            // What the last probe read predates the change: saying it again would be stale (a 404 from before
            // `stream update`, say). Unknown until the next probe reads the stream.
            (facts.streamEnabled, facts.reportedDeliveryURL, facts.reportedEventTypes, facts.managementError) = (nil, nil, nil, nil)
            problems.append(
                "the stream was changed at \(JSONValue.timestamp(changed).stringValue ?? ""), after the last probe read it; a running prober reads it again within seconds"
            )
        }
        self.facts = facts
        if facts.streamEnabled == false { problems.append("the stream is disabled") }
        if let reported = facts.reportedDeliveryURL {
            deliveryURLMatches = reported == deliveryURL
            if reported != deliveryURL { problems.append("the stream delivers to \(reported), not to RISC_DELIVERY_URL \(deliveryURL)") }
        }
        if let requested = facts.reportedEventTypes {
            let missing = Self.actedOnTypes.filter { !requested.contains($0.rawValue) }
            if !missing.isEmpty { problems.append("the stream does not request \(missing.map(\.shortName).joined(separator: ", "))") }
        }
        if let error = facts.managementError { problems.append("the stream could not be read: \(error)") }
        self.problems = problems
    }

    static func seconds(_ value: Double) -> String { value == value.rounded() ? String(Int(value)) : String(value) }

    /// What `stream health --json` prints.
    public var jsonValue: JSONValue {
        [
            "healthy": .bool(healthy), "last_verified_at": facts.lastVerifiedAt.map(JSONValue.timestamp) ?? .null,
            "round_trip_seconds": facts.roundTripSeconds.map(JSONValue.number) ?? .null,
            "probes_timed_out": .number(Double(facts.probesTimedOut)),
            "stream_enabled": facts.streamEnabled.map(JSONValue.bool) ?? .null,
            "delivery_url_matches": deliveryURLMatches.map(JSONValue.bool) ?? .null,
            "problems": .array(problems.map(JSONValue.string)),
        ]
    }
}
