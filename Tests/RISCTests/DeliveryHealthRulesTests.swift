import Foundation
import RISC
import Testing

@Suite("Delivery health rules, decided without I/O")
struct DeliveryHealthRulesTests {
    static let url = "https://receiver.example.com/risc/events"
    static let now = Date(timeIntervalSince1970: 1_800_000_000)

    /// What a probe records when all is well: a SET 10 s ago, the stream enabled, our URL, every type requested.
    static var healthyFacts: DeliveryHealth.Facts {
        var facts = DeliveryHealth.Facts()
        facts.lastVerifiedAt = now.addingTimeInterval(-10)
        facts.roundTripSeconds = 0.25
        facts.streamEnabled = true
        facts.reportedDeliveryURL = url
        facts.reportedEventTypes = EventType.googleRISCTypes.map(\.rawValue)
        return facts
    }

    static func health(_ change: (inout DeliveryHealth.Facts) -> Void = { _ in }, interval: Double = 60) -> DeliveryHealth {
        var facts = healthyFacts
        change(&facts)
        return DeliveryHealth(facts: facts, now: now, interval: interval, deliveryURL: url)
    }

    @Test("All well: healthy, no problems, and the documented JSON")
    func healthy() {
        let health = Self.health()
        #expect(health.healthy && health.problems.isEmpty && health.deliveryURLMatches == true)
        #expect(health.jsonValue["round_trip_seconds"] == .number(0.25))
        #expect(health.jsonValue["problems"] == [])
        #expect(health.jsonValue["last_verified_at"] == "2027-01-15T07:59:50Z")
    }

    @Test("No verification within 2 intervals is unhealthy; exactly 2 intervals is not yet")
    func staleness() {
        #expect(Self.health({ $0.lastVerifiedAt = Self.now.addingTimeInterval(-120) }).healthy)
        let stale = Self.health { $0.lastVerifiedAt = Self.now.addingTimeInterval(-121) }
        #expect(stale.problems == ["no verification SET has arrived for 121 s (more than 2 intervals of 60 s)"])
        let fractional = Self.health({ $0.lastVerifiedAt = Self.now.addingTimeInterval(-4) }, interval: 1.5)
        #expect(fractional.problems == ["no verification SET has arrived for 4 s (more than 2 intervals of 1.5 s)"])
        let never = Self.health {
            $0.lastVerifiedAt = nil
            $0.roundTripSeconds = nil
        }
        #expect(never.problems == ["no verification SET has arrived yet"])
        #expect(never.jsonValue["last_verified_at"] == .null && never.jsonValue["round_trip_seconds"] == .null)
    }

    @Test("A disabled stream, another URL, a missing type and an unreadable stream are each a problem")
    func streamProblems() {
        #expect(Self.health { $0.streamEnabled = false }.problems == ["the stream is disabled"])
        let elsewhere = Self.health { $0.reportedDeliveryURL = "https://old.example.com/risc" }
        #expect(elsewhere.deliveryURLMatches == false)
        #expect(elsewhere.problems == ["the stream delivers to https://old.example.com/risc, not to RISC_DELIVERY_URL \(Self.url)"])
        // Verification is asked for by the probe itself: not requesting it is no problem.
        #expect(Self.health { $0.reportedEventTypes = DeliveryHealth.actedOnTypes.map(\.rawValue) }.healthy)
        let narrowed = Self.health {
            $0.reportedEventTypes = DeliveryHealth.actedOnTypes.filter { $0 != .accountDisabled && $0 != .tokenRevoked }.map(\.rawValue)
        }
        #expect(narrowed.problems == ["the stream does not request token-revoked, account-disabled"], "\(narrowed.problems)")
        let unreadable = Self.health {
            $0.streamEnabled = nil
            $0.reportedDeliveryURL = nil
            $0.reportedEventTypes = nil
            $0.managementError = "HTTP 403"
        }
        #expect(unreadable.problems == ["the stream could not be read: HTTP 403"])
        #expect(unreadable.deliveryURLMatches == nil)
        #expect(unreadable.jsonValue["stream_enabled"] == .null && unreadable.jsonValue["delivery_url_matches"] == .null)
    }

    @Test("Problems add up, in a fixed order")
    func several() {
        let health = Self.health {
            $0.lastVerifiedAt = nil
            $0.streamEnabled = false
            $0.reportedDeliveryURL = "https://old.example.com/risc"
        }
        #expect(!health.healthy)
        #expect(health.problems.count == 3)
        #expect(health.problems.first == "no verification SET has arrived yet")
        #expect(health.problems.dropFirst().first == "the stream is disabled")
    }
}
