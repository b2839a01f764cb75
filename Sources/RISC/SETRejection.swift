/// A push-delivery rejection (RFC 8935 §2.3): the error code a receiver answers with,
/// and a human-readable description that never echoes expected values.
public struct SETRejection: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Code: String, Sendable, Codable, CaseIterable {
        case invalidRequest = "invalid_request"
        case invalidKey = "invalid_key"
        case invalidIssuer = "invalid_issuer"
        case invalidAudience = "invalid_audience"
        case authenticationFailed = "authentication_failed"
        case accessDenied = "access_denied"
        /// Shared Signals: a verification event whose state the receiver never asked for, or has already seen.
        case invalidState = "invalid_state"
    }

    public var code: Code
    public var text: String

    public init(_ code: Code, _ text: String) {
        self.code = code
        self.text = text
    }

    public var description: String { "\(code.rawValue): \(text)" }

    public static func invalidRequest(_ text: String) -> Self { .init(.invalidRequest, text) }
    public static func invalidKey(_ text: String) -> Self { .init(.invalidKey, text) }

    /// The JSON body RFC 8935 prescribes: `{"err": CODE, "description": TEXT}`.
    public struct Body: Sendable, Equatable {
        public var err: String
        public var description: String

        public init(err: String, description: String) {
            self.err = err
            self.description = description
        }

        public var jsonValue: JSONValue { ["err": .string(err), "description": .string(description)] }
    }

    public var body: Body { Body(err: code.rawValue, description: text) }
}
