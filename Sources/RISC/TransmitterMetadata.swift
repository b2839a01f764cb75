import Foundation

/// A transmitter's name as operators type it: 1–40 of `a-z 0-9 -`. `google` is the built-in transmitter's.
public struct TransmitterName: Sendable, Hashable, CustomStringConvertible {
    public static let google = TransmitterName(unchecked: "google")

    public let value: String

    private init(unchecked value: String) { self.value = value }

    /// A name for a transmitter an operator adds: never `google`.
    public init(_ text: String) throws(InvalidParameter) {
        try self.init(naming: text)
        guard value != Self.google.value else {
            throw InvalidParameter(name: "name", problem: "google is the built-in transmitter's name")
        }
    }

    /// Any transmitter's name, `google` included (for lookups).
    public init(naming text: String) throws(InvalidParameter) {
        guard (1...40).contains(text.utf8.count),
            text.utf8.allSatisfy({
                (UInt8(ascii: "a")...UInt8(ascii: "z")).contains($0) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0)
                    || $0 == UInt8(ascii: "-")
            })
        else {
            throw InvalidParameter(name: "name", problem: "must be 1-40 of a-z, 0-9 and -")
        }
        value = text
    }

    public var description: String { value }
}

/// Well-known URLs whose name goes between the host and the issuer's path (RFC 8414 §3, and Shared Signals' own
/// metadata): `https://h/.well-known/ssf-configuration/t/a` for the issuer `https://h/t/a`.
public enum WellKnownURL {
    public static let sharedSignals = "ssf-configuration"
    public static let riscConfiguration = "risc-configuration"
    public static let oauthAuthorizationServer = "oauth-authorization-server"

    /// The URL of `name` for `issuer`; nil when the issuer is not an absolute URL with a host, or carries a query or
    /// fragment (an issuer identifier never does).
    public static func inserting(_ name: String, into issuer: String) -> String? {
        guard var components = URLComponents(string: issuer), components.scheme != nil, components.host?.isEmpty == false,
            components.query == nil, components.fragment == nil
        else { return nil }
        var path = components.percentEncodedPath
        // A terminating "/" goes before the insertion (RFC 8414 §3.1).
        while path.hasSuffix("/") { path.removeLast() }
        components.percentEncodedPath = "/.well-known/\(name)\(path)"
        return components.string
    }

    /// The OpenID configuration, appended to the issuer's path as OpenID Connect Discovery does.
    public static func openIDConfiguration(of issuer: String) -> String? {
        guard var components = URLComponents(string: issuer), components.scheme != nil, components.host?.isEmpty == false,
            components.query == nil, components.fragment == nil
        else { return nil }
        var path = components.percentEncodedPath
        while path.hasSuffix("/") { path.removeLast() }
        components.percentEncodedPath = path + "/.well-known/openid-configuration"
        return components.string
    }
}

/// How a stream delivers its SETs: pushed to us (RFC 8935) or polled by us (RFC 8936).
public enum DeliveryMethod: String, Sendable, CaseIterable, Codable {
    case push
    case poll

    public var urn: String {
        switch self {
        case .push: "urn:ietf:rfc:8935"
        case .poll: "urn:ietf:rfc:8936"
        }
    }

    public init?(urn: String) {
        guard let method = Self.allCases.first(where: { $0.urn == urn }) else { return nil }
        self = method
    }
}

/// A Shared Signals transmitter's configuration metadata (its `ssf-configuration`, or a RISC transmitter's
/// `risc-configuration`), checked: the issuer is the one the operator named, and every endpoint we call or fetch keys
/// from is https (http only to this machine).
public struct TransmitterMetadata: Sendable, Equatable {
    public var issuer: String
    public var jwksURI: String
    public var deliveryMethods: [DeliveryMethod]
    public var configurationEndpoint: String?
    public var statusEndpoint: String?
    public var verificationEndpoint: String?
    public var addSubjectEndpoint: String?
    public var removeSubjectEndpoint: String?
    /// Members of a complex subject that an event's receiver must understand to act on it.
    public var criticalSubjectMembers: [String]
    public var specVersion: String?
    /// The metadata as fetched, kept so `transmitters show` can print what the transmitter said.
    public var document: JSONValue

    /// Reads and checks a metadata document fetched for `expectedIssuer`.
    public init(json data: some Collection<UInt8>, expectedIssuer: String) throws(InvalidParameter) {
        guard let document = try? JSONValue.parse(data), let object = document.objectValue else {
            throw InvalidParameter(name: "metadata", problem: "is not a JSON object")
        }
        guard let issuer = object["issuer"]?.stringValue else {
            throw InvalidParameter(name: "metadata", problem: "names no issuer")
        }
        // Exact, as for a SET's iss: anything else could let one transmitter speak for another.
        guard issuer == expectedIssuer else {
            throw InvalidParameter(name: "metadata", problem: "its issuer is not the one given with --issuer")
        }
        // A transmitter elsewhere must not point the service at this machine (its jwks_uri fetched, its stream
        // endpoints sent a bearer token): loopback only for a transmitter that is itself on loopback.
        func endpoint(_ name: String) throws(InvalidParameter) -> String? {
            guard let value = object[name] else { return nil }
            guard let url = value.stringValue else { throw InvalidParameter(name: "metadata", problem: "its \(name) is not a URL") }
            if let problem = Self.endpointProblem(url, issuer: issuer) {
                throw InvalidParameter(name: "metadata", problem: "its \(name) \(problem)")
            }
            return url
        }
        guard let jwksURI = try endpoint("jwks_uri") else {
            throw InvalidParameter(name: "metadata", problem: "names no jwks_uri")
        }
        self.issuer = issuer
        self.jwksURI = jwksURI
        configurationEndpoint = try endpoint("configuration_endpoint")
        statusEndpoint = try endpoint("status_endpoint")
        verificationEndpoint = try endpoint("verification_endpoint")
        addSubjectEndpoint = try endpoint("add_subject_endpoint")
        removeSubjectEndpoint = try endpoint("remove_subject_endpoint")
        // A RISC transmitter's metadata may list no methods: push is the one RISC defines.
        let methods = (object["delivery_methods_supported"]?.arrayValue ?? []).compactMap { $0.stringValue.flatMap(DeliveryMethod.init(urn:)) }
        deliveryMethods = object["delivery_methods_supported"] == nil ? [.push] : methods
        criticalSubjectMembers = (object["critical_subject_members"]?.arrayValue ?? []).compactMap(\.stringValue)
        specVersion = object["spec_version"]?.stringValue
        self.document = document
    }

    /// Why the service must not call `url` for the transmitter `issuer` names (its metadata's endpoints, a poll
    /// stream's URL), or nil: https (http on loopback), and loopback only for a transmitter that is itself on loopback,
    /// so that a transmitter elsewhere cannot point the service at this machine (its jwks_uri fetched, its endpoints
    /// sent a bearer token); never a link-local or metadata address.
    public static func endpointProblem(_ url: String, issuer: String) -> String? {
        guard URLPolicy.isHTTPSOrLoopback(url), isLoopback(issuer) || !isLoopback(url) else {
            return "is not an https URL (loopback only for a transmitter on loopback)"
        }
        return URLPolicy.subscriberURLProblem(url)
    }

    /// Whether a URL's host is this machine.
    static func isLoopback(_ url: String) -> Bool {
        guard let host = URL(string: url)?.host else { return false }
        return URLPolicy.isLoopback(host: host)
    }
}
