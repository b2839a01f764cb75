import Foundation
import RISC
import Testing

@Suite("Typed answers encode to the API's JSON")
struct JSONValueEncoderTests {
    struct Inner: Encodable {
        var count: Int
        var note: String?
    }

    struct Answer: Encodable {
        var id: Int64
        var missing: String?
        var when: Date
        var never: Date?
        var claims: JSONValue
        var items: [Inner]
        var flags: [String]?

        enum CodingKeys: String, CodingKey { case id, missing, when, never, claims, items, flags }
    }

    @Test("A nil is null, a date RFC 3339, a verbatim value untouched")
    func fields() throws {
        let when = Date(timeIntervalSince1970: 1_700_000_000.25)
        let answer = Answer(
            id: 42, missing: nil, when: when, never: nil, claims: .verbatim(#"{"n":123456789012345678901234567890}"#),
            items: [Inner(count: 1, note: nil), Inner(count: 2, note: "x")], flags: nil)
        let json = try JSONValueEncoder().encode(answer)
        #expect(json["id"] == .number(42))
        #expect(json["missing"] == .null && json["never"] == .null && json["flags"] == .null)
        #expect(json["when"] == .timestamp(when))
        #expect(json["items"] == .array([["count": .number(1), "note": .null], ["count": .number(2), "note": .string("x")]]))
        // The 30-digit number survives only because the claims are written out as received.
        #expect(json.serialized.contains(#""claims":{"n":123456789012345678901234567890}"#))
    }

    struct Extended: Encodable {
        var base: Inner
        var extra: Bool

        enum Keys: String, CodingKey { case extra, nested }
        enum NestedKeys: String, CodingKey { case added }

        // A hand-written encoder that adds fields to an object another type wrote: the encoder must merge them.
        func encode(to encoder: any Encoder) throws {
            try base.encode(to: encoder)
            var container = encoder.container(keyedBy: Keys.self)
            try container.encode(extra, forKey: .extra)
            try base.encode(to: container.superEncoder(forKey: .nested))
            var nested = container.nestedContainer(keyedBy: NestedKeys.self, forKey: .nested)
            try nested.encode(true, forKey: .added)
        }
    }

    @Test("Fields added to an object written earlier join it")
    func merging() throws {
        let json = try JSONValueEncoder().encode(Extended(base: Inner(count: 3, note: nil), extra: true))
        #expect(
            json == [
                "count": .number(3), "note": .null, "extra": .bool(true),
                "nested": ["count": .number(3), "note": .null, "added": .bool(true)],
            ])
    }

    struct Names: Encodable {
        var nextCursor = 1
        var webhookID = 2
        var urlPolicy = 3
        var sha256Digest = 4
        var already_snake = 5
        var byType = ["sessions-revoked": 6, "camelCaseKey": 7]
    }

    @Test("Property names are written in snake_case; a dictionary's keys as they are")
    func names() throws {
        let json = try JSONValueEncoder().encode(Names())
        #expect(
            json == [
                "next_cursor": 1, "webhook_id": 2, "url_policy": 3, "sha256_digest": 4, "already_snake": 5,
                "by_type": ["sessions-revoked": 6, "camelCaseKey": 7],
            ])
    }
}
