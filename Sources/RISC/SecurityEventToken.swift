import Foundation

/// What the receiver's configuration says a SET must satisfy.
public struct SETPolicy: Sendable {
    /// Algorithms accepted in the JWS header. `none` and every `HS*` are removed whatever is configured:
    /// a transmitter's SETs are only ever verified with its public keys.
    public let allowedAlgorithms: Set<String>
    /// OAuth client IDs; `aud` must name at least one.
    public let audiences: Set<String>
    /// How far in the future `iat` may lie (clock skew).
    public let maxFutureIssuedAt: TimeInterval

    public init(allowedAlgorithms: Set<String> = ["RS256"], audiences: Set<String>, maxFutureIssuedAt: TimeInterval = 300) {
        self.allowedAlgorithms = allowedAlgorithms.filter { !Self.isAlwaysRefused($0) }
        self.audiences = audiences
        self.maxFutureIssuedAt = maxFutureIssuedAt
    }

    public static func isAlwaysRefused(_ alg: String) -> Bool {
        alg.lowercased() == "none" || alg.uppercased().hasPrefix("HS")
    }
}

/// A SET that is well-formed (RFC 8417) but whose signature, issuer and audience are not yet checked.
public struct SecurityEventToken: Sendable {
    public struct Header: Sendable {
        public var alg: String
        public var kid: String
        public var typ: String?
    }

    public let header: Header
    public let issuer: String
    public let issuedAt: Date
    public let jti: String
    public let audience: [String]
    public private(set) var events: [SecurityEvent]
    /// The payload JSON exactly as signed (no signature), kept as the stored record of the claims.
    public let payloadJSON: Data
    /// What the signature covers (`header.payload`, as sent) and the decoded signature.
    public let signingInput: Data
    public let signature: Data

    static let acceptedTypValues: Set<String> = ["secevent+jwt", "application/secevent+jwt", "jwt"]

    /// Parses a compact JWS and checks everything that does not need a key: structure, header, algorithm,
    /// required claims and their types, and `iat` not too far in the future.
    public static func parse(compact token: String, policy: SETPolicy, now: Date) throws(SETRejection) -> SecurityEventToken {
        let jws: CompactJWS
        do {
            jws = try CompactJWS(token)
        } catch .notThreeSegments {
            throw .invalidRequest("the body is not a compact JWS (three base64url segments)")
        } catch {
            throw .invalidRequest("a JWS segment is not valid base64url")
        }
        let headerData = jws.header
        let payloadData = jws.payload
        let header = try parseHeader(headerData, policy: policy)
        // After the header: an unsecured token (`alg: none`) has already been refused as a key failure.
        guard !jws.signature.isEmpty else { throw .invalidKey("the token carries no signature") }
        // The parser also refuses what PostgreSQL could not store (NUL, lone surrogates).
        guard let payload = try? JSONValue.parse(payloadData), let claims = payload.objectValue else {
            throw .invalidRequest("the payload is not a JSON object (or holds characters that cannot be stored)")
        }

        guard let iss = claims["iss"] else { throw .invalidRequest("the iss claim is missing") }
        guard let issuer = iss.stringValue else { throw .invalidRequest("the iss claim is not a string") }
        guard ClaimBounds.fits(issuer) else { throw .invalidRequest("the iss claim is too long") }
        guard let iat = claims["iat"] else { throw .invalidRequest("the iat claim is missing") }
        guard case .number(let iatSeconds) = iat, iatSeconds.isFinite else {
            throw .invalidRequest("the iat claim is not a NumericDate")
        }
        let issuedAt = Date(timeIntervalSince1970: iatSeconds)
        guard issuedAt.timeIntervalSince(now) <= policy.maxFutureIssuedAt else {
            throw .invalidRequest("the iat claim is too far in the future")
        }
        guard let jtiValue = claims["jti"] else { throw .invalidRequest("the jti claim is missing") }
        guard let jti = jtiValue.stringValue, !jti.isEmpty else {
            throw .invalidRequest("the jti claim is not a non-empty string")
        }
        guard ClaimBounds.fits(jti) else { throw .invalidRequest("the jti claim is too long") }

        // aud is not one of the required claims: a missing or malformed one names none of our client IDs,
        // which the audience check answers with invalid_audience.
        let audience: [String]
        switch claims["aud"] {
        case .string(let value): audience = [value]
        case .array(let values): audience = values.compactMap(\.stringValue)
        default: audience = []
        }

        guard let eventsValue = claims["events"] else { throw .invalidRequest("the events claim is missing") }
        guard let eventMembers = eventsValue.objectValue else { throw .invalidRequest("the events claim is not an object") }
        guard !eventMembers.isEmpty else { throw .invalidRequest("the events claim is empty") }
        try checkSubjectBounds(claims["sub_id"])
        let topLevelSubject = claims["sub_id"].flatMap(Subject.init(json:))
        var events: [SecurityEvent] = []
        // Sorted so a SET with several event types decodes the same way every time.
        for (uri, body) in eventMembers.sorted(by: { JSONValue.byteOrder($0.key, $1.key) }) {
            guard let bodyObject = body.objectValue else {
                throw .invalidRequest("a member of the events claim is not an object")
            }
            try checkSubjectBounds(bodyObject["subject"])
            events.append(SecurityEvent(typeURI: uri, body: bodyObject, topLevelSubject: topLevelSubject))
        }

        return SecurityEventToken(
            header: header, issuer: issuer, issuedAt: issuedAt, jti: jti, audience: audience, events: events,
            payloadJSON: payloadData, signingInput: jws.signingInput, signature: jws.signature)
    }

    /// Every string member of a subject identifier is stored, and `sub` is indexed: refuse oversized ones here, in a
    /// complex subject's members too.
    private static func checkSubjectBounds(_ subject: JSONValue?) throws(SETRejection) {
        guard let members = subject?.objectValue else { return }
        for value in members.values {
            if let string = value.stringValue, !ClaimBounds.fits(string) {
                throw .invalidRequest("a subject identifier is too long")
            }
            if value.objectValue != nil { try checkSubjectBounds(value) }
        }
    }

    private static func parseHeader(_ data: Data, policy: SETPolicy) throws(SETRejection) -> Header {
        guard let header = try? JSONValue.parse(data).objectValue else {
            throw .invalidRequest("the JWS header is not a JSON object")
        }
        if let typ = header["typ"] {
            guard let value = typ.stringValue, acceptedTypValues.contains(value.lowercased()) else {
                throw .invalidRequest("the typ header is not secevent+jwt")
            }
        }
        guard let alg = header["alg"]?.stringValue, policy.allowedAlgorithms.contains(alg) else {
            throw .invalidKey("the signing algorithm is not accepted")
        }
        if header["crit"] != nil {
            // No extension header is understood, so a critical one can never be honoured (RFC 7515 §4.1.11).
            throw .invalidRequest("the JWS header has a crit parameter this receiver does not understand")
        }
        guard let kid = header["kid"]?.stringValue, !kid.isEmpty else {
            throw .invalidKey("the kid header is missing")
        }
        return Header(alg: alg, kid: kid, typ: header["typ"]?.stringValue)
    }

    /// Checks the claims that only make sense once the signature is verified.
    public func checkIssuerAndAudience(expectedIssuer: String, policy: SETPolicy) throws(SETRejection) {
        guard issuer == expectedIssuer else {
            throw SETRejection(.invalidIssuer, "the issuer is not the configured transmitter")
        }
        guard !audience.isEmpty else {
            throw SETRejection(.invalidAudience, "the aud claim is missing or holds no string")
        }
        guard audience.contains(where: policy.audiences.contains) else {
            throw SETRejection(.invalidAudience, "the audience is not one of this receiver's client IDs")
        }
    }

    /// The same SET as received on a Shared Signals stream: each event's subject is read by that stream's rules, and
    /// marked with the members of its subject that `critical` names and this receiver does not understand (such an
    /// event is stored and not acted on).
    public func receivedOnSharedSignalsStream(criticalSubjectMembers critical: [String]) -> SecurityEventToken {
        var marked = self
        for index in marked.events.indices {
            marked.events[index].subjectRules = .sharedSignals
            marked.events[index].unprocessedCriticalMembers = marked.events[index].subject?.unprocessedCriticalMembers(critical) ?? []
        }
        return marked
    }

    /// The first recognised event, which decides what the SET does; nil when all are unknown.
    public var primaryEvent: SecurityEvent? {
        events.first { $0.type != nil }
    }

    /// True when no event is of a type this receiver acts on: such SETs are stored and marked ignored.
    public var isIgnored: Bool { primaryEvent == nil }
}
