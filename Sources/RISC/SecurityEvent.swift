/// One event of a SET, decoded into what the receiver acts on.
public struct SecurityEvent: Sendable, Equatable, Codable {
    /// The event-type URI exactly as sent.
    public var typeURI: String
    /// The recognised type, or nil for a type this receiver does not know (stored, marked ignored).
    public var type: EventType?
    public var subject: Subject?
    /// `account-disabled`: `hijacking`, `bulk-account`, or absent.
    public var reason: String?
    /// `verification`: the state the stream verification asked for.
    public var state: String?

    public init(typeURI: String, type: EventType?, subject: Subject?, reason: String? = nil, state: String? = nil) {
        self.typeURI = typeURI
        self.type = type
        self.subject = subject
        self.reason = reason
        self.state = state
    }

    private enum CodingKeys: String, CodingKey {
        case typeURI = "type", shortName = "name", subject, reason, state
    }

    /// The stored form of the decoded event.
    public var jsonValue: JSONValue {
        var object: [String: JSONValue] = ["type": .string(typeURI), "name": .string(shortName)]
        if let subject { object["subject"] = subject.jsonValue }
        if let reason { object["reason"] = .string(reason) }
        if let state { object["state"] = .string(state) }
        return .object(object)
    }

    public func encode(to encoder: any Encoder) throws {
        try jsonValue.encode(to: encoder)
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        typeURI = try container.decode(String.self, forKey: .typeURI)
        type = EventType(rawValue: typeURI)
        subject = try container.decodeIfPresent(Subject.self, forKey: .subject)
        reason = try container.decodeIfPresent(String.self, forKey: .reason)
        state = try container.decodeIfPresent(String.self, forKey: .state)
    }

    /// The name operators see: the type's short name, or `unknown`.
    public var shortName: String { type?.shortName ?? "unknown" }

    /// Decodes one member of the `events` claim. `topLevelSubject` is the SSF `sub_id`, used when the
    /// event carries no `subject` of its own.
    public init(typeURI: String, body: [String: JSONValue], topLevelSubject: Subject?) {
        let type = EventType(rawValue: typeURI)
        let subject = body["subject"].flatMap(Subject.init(json:)) ?? topLevelSubject
        self.init(
            typeURI: typeURI,
            type: type,
            subject: subject,
            reason: type == .accountDisabled ? body["reason"]?.stringValue : nil,
            state: (type == .verification || type == .ssfVerification) ? body["state"]?.stringValue : nil
        )
    }
}
