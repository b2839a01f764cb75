import Foundation

/// Whether a Shared Signals stream delivers to us, judged from what its probes recorded, as `DeliveryHealth` judges
/// Google's. No I/O: `streams health` and the prober read the facts, this decides.
public struct SharedStreamHealth: Sendable, Equatable {
    public struct Facts: Sendable, Equatable {
        public var hasStream = false
        /// The status the transmitter last reported (status endpoint, or stream-updated).
        public var status: StreamStatus.State?
        public var statusReason: String?
        /// The latest verification of the stream that arrived (a probe's, or one asked for with `streams verify`).
        public var lastVerifiedAt: Date?
        public var roundTripSeconds: Double?
        public var probesTimedOut = 0
        /// What the latest probe read: the stream's push endpoint, or why the stream could not be read.
        public var lastProbedAt: Date?
        public var reportedEndpointURL: String?
        public var readError: String?
        public init() {}
    }

    public var facts: Facts
    public var healthy: Bool { problems.isEmpty }
    /// Nil when not known: a poll stream, no probe yet, or no RISC_PUBLIC_URL to compare with.
    public var deliveryURLMatches: Bool?
    public var problems: [String]

    /// `interval`: RISC_VERIFY_INTERVAL (0: probes are off); `expectedEndpointURL`: RISC_PUBLIC_URL/ssf/NAME/events for
    /// a push stream.
    public init(facts: Facts, now: Date, interval: Double, expectedEndpointURL: String?) {
        self.facts = facts
        var problems: [String] = []
        if !facts.hasStream { problems.append("the transmitter has no stream (streams create)") }
        if interval <= 0 { problems.append("delivery probes are off (RISC_VERIFY_INTERVAL is 0)") }
        if let last = facts.lastVerifiedAt {
            let age = now.timeIntervalSince(last)
            if interval > 0, age > 2 * interval {
                problems.append(
                    "no verification event has arrived for \(Int(age)) s (more than 2 intervals of \(DeliveryHealth.seconds(interval)) s)")
            }
        } else if facts.hasStream {
            problems.append("no verification event has arrived yet")
        }
        switch facts.status {
        case .disabled?: problems.append("the stream is disabled" + (facts.statusReason.map { " (\($0))" } ?? ""))
        case .paused?: problems.append("the stream is paused" + (facts.statusReason.map { " (\($0))" } ?? "") + ": the transmitter holds its events")
        case .enabled?, nil: break
        }
        if let reported = facts.reportedEndpointURL, let expectedEndpointURL {
            deliveryURLMatches = reported == expectedEndpointURL
            if reported != expectedEndpointURL { problems.append("the stream delivers to \(reported), not to \(expectedEndpointURL)") }
        }
        if let error = facts.readError { problems.append("the stream could not be read: \(error)") }
        self.problems = problems
    }

    /// What `streams health --json` prints: `stream health`'s fields, and the status the transmitter reported.
    public var jsonValue: JSONValue {
        [
            "healthy": .bool(healthy), "last_verified_at": facts.lastVerifiedAt.map(JSONValue.timestamp) ?? .null,
            "round_trip_seconds": facts.roundTripSeconds.map(JSONValue.number) ?? .null,
            "probes_timed_out": .number(Double(facts.probesTimedOut)),
            "stream_enabled": facts.status.map { .bool($0 == .enabled) } ?? .null,
            "stream_status": facts.status.map { .string($0.rawValue) } ?? .null,
            "delivery_url_matches": deliveryURLMatches.map(JSONValue.bool) ?? .null,
            "problems": .array(problems.map(JSONValue.string)),
        ]
    }
}
