/// The event types this receiver understands, by their URIs (RISC, OAuth, CAEP, SSF).
public enum EventType: String, Sendable, CaseIterable, Codable {
    case sessionsRevoked = "https://schemas.openid.net/secevent/risc/event-type/sessions-revoked"
    case tokensRevoked = "https://schemas.openid.net/secevent/oauth/event-type/tokens-revoked"
    case tokenRevoked = "https://schemas.openid.net/secevent/oauth/event-type/token-revoked"
    case accountDisabled = "https://schemas.openid.net/secevent/risc/event-type/account-disabled"
    case accountEnabled = "https://schemas.openid.net/secevent/risc/event-type/account-enabled"
    case accountCredentialChangeRequired =
        "https://schemas.openid.net/secevent/risc/event-type/account-credential-change-required"
    case verification = "https://schemas.openid.net/secevent/risc/event-type/verification"
    case caepSessionRevoked = "https://schemas.openid.net/secevent/caep/event-type/session-revoked"
    case caepCredentialChange = "https://schemas.openid.net/secevent/caep/event-type/credential-change"
    case ssfVerification = "https://schemas.openid.net/secevent/ssf/event-type/verification"
    /// A Shared Signals transmitter's word that it changed the stream's status (`status`, `reason`).
    case ssfStreamUpdated = "https://schemas.openid.net/secevent/ssf/event-type/stream-updated"

    /// The short name operators type (`sessions-revoked`); unique across the known types.
    /// Looked up, not split out of the URI: every SET received is counted under its short name.
    public var shortName: String { Self.shortNames[self]! }

    private static let shortNames = Dictionary(
        uniqueKeysWithValues: allCases.map { type in
            (type, type == .ssfVerification ? "ssf-verification" : String(type.rawValue.split(separator: "/").last!))
        })

    /// Accepts a full URI or a short name.
    public init?(uriOrShortName value: String) {
        if let type = EventType(rawValue: value) {
            self = type
        } else if let type = EventType.allCases.first(where: { $0.shortName == value }) {
            self = type
        } else {
            return nil
        }
    }

    /// The types Google's RISC stream can be asked to deliver (every type acted on, plus verification).
    public static let googleRISCTypes: [EventType] = [
        .sessionsRevoked, .tokensRevoked, .tokenRevoked, .accountDisabled, .accountEnabled,
        .accountCredentialChangeRequired, .verification,
    ]

    /// Every type that changes a user's state (RISC and CAEP): what a Shared Signals stream asks for by default.
    public static let actedOn: [EventType] = [
        .sessionsRevoked, .tokensRevoked, .tokenRevoked, .accountDisabled, .accountEnabled,
        .accountCredentialChangeRequired, .caepSessionRevoked, .caepCredentialChange,
    ]
}
