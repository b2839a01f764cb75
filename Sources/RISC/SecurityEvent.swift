/// One event of a SET, decoded into what the receiver acts on.
public struct SecurityEvent: Sendable, Equatable {
    /// The event-type URI exactly as sent.
    public var typeURI: String
    /// The recognised type, or nil for a type this receiver does not know (stored, marked ignored).
    public var type: EventType?
    public var subject: Subject?
    /// `account-disabled`: `hijacking`, `bulk-account`, or absent.
    public var reason: String?
    /// `verification`: the state the stream verification asked for.
    public var state: String?
    /// `stream-updated`: the stream's new status (`enabled`, `paused`, `disabled`); `reason` holds the reason given.
    public var status: String?
    /// Members of the subject that its transmitter marks critical and this receiver does not understand: the event is
    /// stored and not acted on (Shared Signals' receiver subject processing).
    public var unprocessedCriticalMembers: [String] = []
    /// How the subject names a user: Google's rules (a Google `sub` only, anything else a recorded skip), or those
    /// of a Shared Signals transmitter's stream (an `email` may name a user too, and every event is acted on).
    public var subjectRules: SubjectRules = .google

    public enum SubjectRules: String, Sendable, Equatable {
        case google
        case sharedSignals = "shared_signals"
    }

    public init(typeURI: String, type: EventType?, subject: Subject?, reason: String? = nil, state: String? = nil, status: String? = nil) {
        self.typeURI = typeURI
        self.type = type
        self.subject = subject
        self.reason = reason
        self.state = state
        self.status = status
    }

    /// What a `stream-updated` event reports.
    public var streamStatus: StreamStatus? {
        guard type == .ssfStreamUpdated, let status, let state = StreamStatus.State(rawValue: status) else { return nil }
        return StreamStatus(state: state, reason: reason)
    }

    /// The stored form (`risc_events.events`, and the admin API's `decoded_events`): written at ingest and
    /// read back by the worker through `init(stored:)`, its exact inverse.
    public var jsonValue: JSONValue {
        var object: [String: JSONValue] = ["type": .string(typeURI), "name": .string(shortName)]
        if let subject { object["subject"] = subject.jsonValue }
        if let reason { object["reason"] = .string(reason) }
        if let state { object["state"] = .string(state) }
        if let status { object["status"] = .string(status) }
        if !unprocessedCriticalMembers.isEmpty {
            object["unprocessed_critical_members"] = .array(unprocessedCriticalMembers.map(JSONValue.string))
        }
        if subjectRules != .google { object["subject_rules"] = .string(subjectRules.rawValue) }
        return .object(object)
    }

    /// Reads the stored form back; nil when it is not one.
    public init?(stored json: JSONValue) {
        guard let typeURI = json["type"]?.stringValue else { return nil }
        self.init(
            typeURI: typeURI, type: EventType(rawValue: typeURI), subject: json["subject"].flatMap(Subject.init(json:)),
            reason: json["reason"]?.stringValue, state: json["state"]?.stringValue, status: json["status"]?.stringValue)
        unprocessedCriticalMembers = json["unprocessed_critical_members"]?.arrayValue?.compactMap(\.stringValue) ?? []
        guard let rules = json["subject_rules"] else { return }
        // A stored form this version cannot read must not fall back to rules that read the subject differently.
        guard let name = rules.stringValue, let known = SubjectRules(rawValue: name) else { return nil }
        subjectRules = known
    }

    /// Reads a stored `events` array; nil unless every member is a stored event.
    public static func stored(_ text: some Collection<UInt8>) -> [SecurityEvent]? {
        guard let members = (try? JSONValue.parse(text))?.arrayValue else { return nil }
        let events = members.compactMap(SecurityEvent.init(stored:))
        return events.count == members.count ? events : nil
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
            reason: (type == .accountDisabled || type == .ssfStreamUpdated) ? body["reason"]?.stringValue : nil,
            state: (type == .verification || type == .ssfVerification) ? body["state"]?.stringValue : nil,
            status: type == .ssfStreamUpdated ? body["status"]?.stringValue : nil
        )
    }
}
