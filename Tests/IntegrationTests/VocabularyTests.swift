import Foundation
import PostgresNIO
import RISC
import RISCStore
import Testing

/// The statuses and action kinds are spelt once in Swift (`EventStatus`, `ActionKind`), and again where Swift
/// cannot reach: the migrations' CHECK constraints and index, the plpgsql functions, the OpenAPI document.
/// These tests hold every copy to the Swift list, so a typo anywhere fails here.
@Suite("One vocabulary: statuses and action kinds")
struct VocabularyTests {
    static let statuses = Set(EventStatus.allCases.map(\.rawValue))
    static let kinds = Set(ActionKind.allCases.map(\.rawValue))

    /// The single-quoted words of a SQL text.
    static func literals(_ sql: Substring) -> Set<String> {
        Set(sql.matches(of: /'([a-z_]+)'/).map { String($0.output.1) })
    }

    static func texts(_ query: PostgresQuery, on client: PostgresClient) async throws -> [String] {
        var texts: [String] = []
        for try await text in try await client.query(query).decode(String.self) { texts.append(text) }
        return texts
    }

    @Test("The CHECK constraints and the waiting-events index name exactly the Swift cases")
    func constraints() async throws {
        try await Harness.with { harness in
            let statusChecks = try await Self.texts(
                "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = 'risc_events'::regclass AND contype = 'c' AND pg_get_constraintdef(oid) LIKE '%status%'",
                on: harness.database)
            #expect(statusChecks.map { Self.literals($0[...]) } == [Self.statuses])
            let kindChecks = try await Self.texts(
                "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = 'risc_event_actions'::regclass AND contype = 'c' AND pg_get_constraintdef(oid) LIKE '%kind%'",
                on: harness.database)
            #expect(kindChecks.map { Self.literals($0[...]) } == [Self.kinds])
            let index = try await Self.texts("SELECT pg_get_indexdef('risc_events_runnable'::regclass)", on: harness.database)
            #expect(index.map { Self.literals($0.split(separator: "WHERE").last ?? "") } == [Set(EventStatus.waiting.map(\.rawValue))])
        }
    }

    @Test("The plpgsql functions pick and set only statuses and kinds of the Swift vocabulary")
    func functions() async throws {
        try await Harness.with { harness in
            let apply = try #require(
                try await Self.texts("SELECT prosrc FROM pg_proc WHERE proname = 'risc_apply_actions'", on: harness.database).first)
            // Each `WHEN 'kind'[, 'kind'] THEN` arm of the CASE: together, exactly the kinds the worker decides.
            let arms = apply.matches(of: /WHEN\s+('[a-z_]+'(?:\s*,\s*'[a-z_]+')*)\s+THEN/).map { Self.literals($0.output.1) }
            #expect(arms.reduce(into: Set<String>()) { $0.formUnion($1) } == Set(ActionKind.decided.map(\.rawValue)))
            #expect(arms.flatMap { $0 }.count == ActionKind.decided.count, "each kind has one arm")
            #expect(apply.contains("'\(ActionKind.ambiguousTokenIdentifier.rawValue)'"))
            // Every status the functions compare or assign.
            let store = try #require(
                try await Self.texts("SELECT prosrc FROM pg_proc WHERE proname = 'risc_insert_events'", on: harness.database).first)
            for source in [apply, store] {
                let used = source.matches(of: /status\s*(?:=|IN)\s*\(?\s*('[a-z_]+'(?:\s*,\s*'[a-z_]+')*)/).map { Self.literals($0.output.1) }
                #expect(!used.isEmpty)
                for statuses in used { #expect(statuses.isSubset(of: Self.statuses), "\(statuses)") }
            }
            #expect(apply.contains("status IN ('pending', 'retry')"), "the function finishes only waiting events")
            #expect(store.contains("THEN '\(EventStatus.done.rawValue)'"), "events applied on receipt are stored done")
            // Only events left waiting wake the workers.
            let trigger = try await Self.texts(
                "SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgname = 'risc_events_inserted'", on: harness.database)
            #expect(trigger.map { Self.literals($0.split(separator: "WHEN").last ?? "") } == [Set(EventStatus.waiting.map(\.rawValue))])
            // Notifications are written for exactly the notified kinds.
            let notify = try #require(
                try await Self.texts("SELECT prosrc FROM pg_proc WHERE proname = 'risc_notify_subscribers'", on: harness.database).first)
            let notified = notify.matches(of: /a\.kind IN \(([^)]*)\)/).map { Self.literals($0.output.1) }
            #expect(notified == [Set(ActionKind.notified.map(\.rawValue))])
            let notificationChecks = try await Self.texts(
                "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = 'risc_notifications'::regclass AND contype = 'c'",
                on: harness.database)
            #expect(notificationChecks.map { Self.literals($0[...]) } == [Set(NotificationStatus.allCases.map(\.rawValue))])
        }
    }

    @Test("Encodable for the API's JSON, the vocabulary still binds as text and text[] (not jsonb), and reads back only its own words")
    func binding() async throws {
        // The JSON: each word as itself, and statuses as an object's keys.
        #expect(try JSONValueEncoder().encode([EventStatus.dead: 1]) == ["dead": 1])
        #expect(try JSONValueEncoder().encode([ActionKind.revokeSessions]) == ["revoke_sessions"])
        #expect(try JSONValueEncoder().encode(NotificationStatus.delivered) == "delivered")
        try await Harness.with { harness in
            let filtered: EventStatus? = .retry
            let rows = try await harness.database.query(
                """
                SELECT pg_typeof(\(EventStatus.pending))::text, pg_typeof(\(filtered))::text, pg_typeof(\(EventStatus.waiting))::text,
                       pg_typeof(\(ActionKind.revokeSessions))::text, pg_typeof(\(ActionKind.notified))::text,
                       pg_typeof(\(NotificationStatus.dead))::text, pg_typeof(\(NotificationStatus.replayable))::text,
                       \(filtered) = 'retry'::text AND \(ActionKind.deleteGrantByHash) = 'delete_grant_by_hash'::text
                           AND \(EventStatus.waiting) = ARRAY['pending', 'retry']::text[]
                """)
            var types: [[String]] = []
            for try await (status, optional, statuses, kind, kinds, notification, notifications, equal) in rows.decode(
                (String, String, String, String, String, String, String, Bool).self)
            {
                types.append([status, optional, statuses, kind, kinds, notification, notifications])
                #expect(equal, "each binds as its raw value")
            }
            #expect(types == [["text", "text", "text[]", "text", "text[]", "text", "text[]"]])

            // Read back from text and text[]; a word not in the vocabulary is a decoding error, as any bad cell.
            for try await (status, statuses, kinds, notification) in try await harness.database.query(
                "SELECT 'ignored'::text, ARRAY['dead', 'done']::text[], \(ActionKind.allCases), 'delivered'::text"
            ).decode((EventStatus, [EventStatus], [ActionKind], NotificationStatus).self) {
                #expect(status == .ignored && statuses == [.dead, .done] && kinds == ActionKind.allCases && notification == .delivered)
            }
            await #expect {
                for try await _ in try await harness.database.query("SELECT 'finished'::text").decode(EventStatus.self) {}
            } throws: { ($0 as? PostgresDecodingError)?.code == .failure }
            await #expect {
                for try await _ in try await harness.database.query("SELECT ARRAY['revoke_sessions', 'revoke']::text[]").decode([ActionKind].self) {}
            } throws: { ($0 as? PostgresDecodingError)?.code == .failure }
        }
    }

    @Test("The OpenAPI document enumerates exactly the Swift cases")
    func openAPI() throws {
        let path = Harness.repositoryRoot.appendingPathComponent("Sources/RISCServer/Resources/admin-openapi.json").path
        let document = try JSONValue.parse(Array(try #require(FileManager.default.contents(atPath: path))))
        let schemas = try #require(document["components"]?["schemas"])
        func strings(_ value: JSONValue?) -> [String] { value?.arrayValue?.compactMap(\.stringValue) ?? [] }
        #expect(strings(schemas["Status"]?["enum"]) == EventStatus.allCases.map(\.rawValue))
        #expect(strings(schemas["Action"]?["properties"]?["kind"]?["enum"]) == ActionKind.allCases.map(\.rawValue))
        #expect(Set(strings(schemas["Stats"]?["properties"]?["by_status"]?["required"])) == Self.statuses)
        #expect(schemas["Replayed"]?["properties"]?["status"]?["const"] == .string(EventStatus.pending.rawValue))
        #expect(strings(schemas["NotifiedKind"]?["enum"]) == ActionKind.notified.map(\.rawValue))
        #expect(strings(schemas["NotificationStatus"]?["enum"]) == NotificationStatus.allCases.map(\.rawValue))
    }
}
