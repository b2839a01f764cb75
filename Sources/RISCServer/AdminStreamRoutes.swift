import Foundation
import Hummingbird
import RISC
import RISCStore

/// `/admin/v1/transmitters/{name}/stream`: the stream at a Shared Signals transmitter, as `risc-receiver streams` manages
/// it. Every call goes to the transmitter; what it answers is recorded and returned.
struct AdminStreamRoutes<Context: RequestContext, Store: TransmitterStoring>: Sendable {
    let store: Store
    /// The longest a request may wait for a verification event: an HTTP client should not hold a request for longer.
    static var maxVerifyWait: Int { 60 }

    func addRoutes(to group: RouterGroup<Context>) {
        group.post("transmitters/:name/stream") { _, context in
            let created = try await self.stream(context) { try await $0.create() }
            return JSONResponse.make(status: .created, json: created.json)
        }
        group.get("transmitters/:name/stream") { _, context in
            let fields = try await self.stream(context) { try await $0.show() }
            return JSONResponse.make(status: .ok, json: .object(Dictionary(uniqueKeysWithValues: fields)))
        }
        group.patch("transmitters/:name/stream") { request, context in
            let body = try await request.decode(as: JSONValue.self, context: context)
            guard let list = body["events"]?.arrayValue, case let events = list.compactMap(\.stringValue), events.count == list.count
            else { throw AdminAPI.invalid(InvalidParameter(name: "events", problem: "must be a list of event types")) }
            let delivered = try await self.stream(context) { try await $0.update(events: events) }
            return JSONResponse.make(status: .ok, json: ["events_delivered": .array(delivered.map(JSONValue.string))])
        }
        group.put("transmitters/:name/stream") { _, context in
            try await self.stream(context) { try await $0.replace() }
            return Response(status: .noContent)
        }
        group.delete("transmitters/:name/stream") { _, context in
            _ = try await self.stream(context) { try await $0.delete() }
            return Response(status: .noContent)
        }
        group.get("transmitters/:name/stream/status") { _, context in
            Self.status(try await self.stream(context) { try await $0.status(setting: nil) })
        }
        group.post("transmitters/:name/stream/status") { request, context in
            let wanted = try Self.wantedStatus(try await request.decode(as: JSONValue.self, context: context))
            return Self.status(try await self.stream(context) { try await $0.status(setting: wanted) })
        }
        group.post("transmitters/:name/stream/verify") { request, context in
            let wait = try Self.verifyWait(try await Self.optionalBody(request, context: context))
            let (state, waited) = try await self.stream(context) { try await $0.verify(wait: wait) }
            var answer: [String: JSONValue] = ["state": .string(state)]
            if let waited {
                answer["arrived_after_ms"] = .number(Double(waited.components.seconds * 1000 + waited.components.attoseconds / 1_000_000_000_000_000))
            }
            return JSONResponse.make(status: .ok, json: .object(answer))
        }
        for (path, add) in [("add", true), ("remove", false)] {
            group.post("transmitters/:name/stream/subjects/\(path)") { request, context in
                let subject = try Self.subject(try await request.decode(as: JSONValue.self, context: context))
                try await self.stream(context) { try await $0.subject(subject, add: add) }
                return Response(status: .noContent)
            }
        }
    }

    /// Runs `body` on the transmitter's stream; its failures as the API's errors.
    func stream<T: Sendable>(_ context: Context, _ body: (ManagedStream) async throws -> T) async throws -> T {
        let name = try AdminTransmitterRoutes<Context, Store>.name(context)
        do {
            return try await body(try await store.stream(of: name))
        } catch let failure as ManagedStream.Failure {
            switch failure.kind {
            case .unknownTransmitter: throw APIError(.notFound, "not_found", description: failure.description)
            case .noStream: throw APIError(.conflict, "no_stream", description: failure.description)
            case .invalid(let parameter): throw APIError(.badRequest, "invalid_parameter", description: failure.description, parameter: parameter)
            case .notConfigured: throw APIError(.conflict, "not_configured", description: failure.description)
            case .transmitter: throw APIError(.badGateway, "transmitter_error", description: failure.description)
            case .timedOut: throw APIError(.gatewayTimeout, "verification_timed_out", description: failure.description)
            }
        }
    }

    static func status(_ status: StreamStatus) -> Response {
        JSONResponse.make(status: .ok, json: ["status": .string(status.state.rawValue), "reason": status.reason.map(JSONValue.string) ?? .null])
    }

    /// `{"status": "enabled" | "paused" | "disabled", "reason"?}`.
    static func wantedStatus(_ body: JSONValue) throws -> StreamStatus {
        guard let text = body["status"]?.stringValue, let state = StreamStatus.State(rawValue: text) else {
            throw AdminAPI.invalid(InvalidParameter(name: "status", problem: "must be enabled, paused or disabled"))
        }
        let reason = body["reason"]
        guard reason == nil || reason == .null || reason?.stringValue != nil else {
            throw AdminAPI.invalid(InvalidParameter(name: "reason", problem: "must be a string"))
        }
        return StreamStatus(state: state, reason: reason?.stringValue)
    }

    /// `{"wait": seconds}` (1 to 60), or no body: ask without waiting.
    static func verifyWait(_ body: JSONValue?) throws -> Duration? {
        guard let value = body?["wait"], value != .null else { return nil }
        guard case .number(let seconds) = value, seconds == seconds.rounded(), (1...Double(maxVerifyWait)).contains(seconds) else {
            throw AdminAPI.invalid(InvalidParameter(name: "wait", problem: "must be 1 to \(maxVerifyWait) seconds"))
        }
        return .seconds(Int(seconds))
    }

    /// `{"subject": {"format": "email" | "iss_sub" | "opaque", ...}}`, as the transmitter's subject endpoints take it.
    static func subject(_ body: JSONValue) throws -> Subject {
        let invalid = AdminAPI.invalid(
            InvalidParameter(
                name: "subject", problem: "must be an email, iss_sub or opaque subject, each identifier 1 to \(ClaimBounds.maxIdentifierBytes) bytes")
        )
        guard let json = body["subject"], let subject = Subject(json: json) else { throw invalid }
        let identifiers: [String]
        switch subject {
        case .email(let email): identifiers = [email]
        case .issuerAndSubject(let iss, let sub): identifiers = [iss, sub]
        case .opaque(let id): identifiers = [id]
        default: throw invalid
        }
        guard identifiers.allSatisfy({ !$0.isEmpty && ClaimBounds.fits($0) }) else { throw invalid }
        return subject
    }

    /// The body as JSON, or nil when there is none.
    static func optionalBody(_ request: Request, context: Context) async throws -> JSONValue? {
        var request = request
        let buffer = try await request.collectBody(upTo: context.maxUploadSize)
        guard buffer.readableBytes > 0 else { return nil }
        do {
            return try JSONValue.parse(Array(buffer.readableBytesView))
        } catch {
            throw AdminAPI.invalid(InvalidParameter(name: "body", problem: "must be JSON"))
        }
    }
}
