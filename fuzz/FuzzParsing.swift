// libFuzzer entry point for the parsing path of the RISC core module (SETs, Google ID tokens, JSON, base64).
//
// Not part of the package's build: `scripts/fuzz.sh` compiles it with `swiftc -sanitize=fuzzer,address`
// against the RISC module's sources. Every property below ends in `fatalError` when it fails, which libFuzzer
// reports as a crash and saves as an artifact.
//
// Input layout: the first byte picks the entry point (byte % 8); the rest is that entry point's input.
//   0     raw JSON          JSONValue.parse, then serialize/re-parse must give the same value and text
//   1     SET, JSON parts   header JSON 0x00 payload JSON (no 0x00: the payload only, under a valid header);
//                           the harness base64url-encodes them into `header.payload.c2ln`
//   2     ID token, parts   as 1, into GoogleIDToken.parse
//   3     SET, compact      the rest as the compact JWS text
//   4     ID token, compact the rest as the compact JWS text
//   5     base64            Base64URL.decode / decodeJWSSegment / CompactJWS / TokenIdentifier
//   6     SET, framing      a flags byte, then parts as in 1; the flags spoil the framing (padding, standard
//                           alphabet, empty or missing signature, extra segment, whitespace)
//   7     subscriber URL    URLPolicy.subscriberURLProblem and IPAddress(literal:): an address reads back as
//                           itself, and a forbidden one is refused in a URL, canonical or IPv4-mapped
//
// Environment: RISC_FUZZ_VERBOSE=1 prints what each input got (to check seeds);
// RISC_FUZZ_EXCLUDE=key-order skips the properties about ordering (serialization is canonical; events come in
// the order of their type URIs' bytes). They found that Swift's String `<` is not a total order ("\u{E9}5" and
// "e\u{301}" are unequal and neither is `<` the other), so keys and events are now ordered by UTF-8 bytes.

import Foundation
import RISC

private let now = Date(timeIntervalSince1970: 1_700_000_000)
private let setPolicy = SETPolicy(audiences: ["a"])
private let idPolicy = IDTokenPolicy(audiences: ["a"])
private let idPolicyHostedDomain = IDTokenPolicy(audiences: ["a"], hostedDomains: ["example.com"])
private let defaultHeader = Array(#"{"alg":"RS256","kid":"k","typ":"secevent+jwt"}"#.utf8)
private let signatureSegment = "c2ln"

/// `RISC_FUZZ_VERBOSE=1`: one line per input saying what the entry point answered (for checking seeds).
private let verbose = ProcessInfo.processInfo.environment["RISC_FUZZ_VERBOSE"] == "1"
/// `RISC_FUZZ_EXCLUDE=key-order`: see the file's header.
private let excluded = Set(
    (ProcessInfo.processInfo.environment["RISC_FUZZ_EXCLUDE"] ?? "").split(separator: ",").map(String.init))
private let checkKeyOrder = !excluded.contains("key-order")

private func note(_ line: @autoclosure () -> String) {
    if verbose { print(line()) }
}

@inline(never)
private func check(_ condition: Bool, _ message: @autoclosure () -> String) {
    if !condition { fatalError("fuzz property failed: \(message())") }
}

// MARK: - Strict comparisons (Swift's String == is canonical equivalence; stored bytes are what matter)

private func sameBytes(_ a: String, _ b: String) -> Bool { a.utf8.elementsEqual(b.utf8) }

/// Structural equality with strings compared byte for byte. Numbers compare with `==` (so -0 equals 0:
/// the serializer writes -0 as `0`, a documented loss; the raw claims are stored verbatim).
private func strictlyEqual(_ a: JSONValue, _ b: JSONValue) -> Bool {
    switch (a, b) {
    case (.string(let x), .string(let y)): return sameBytes(x, y)
    case (.number(let x), .number(let y)): return x == y
    case (.bool(let x), .bool(let y)): return x == y
    case (.null, .null): return true
    case (.array(let x), .array(let y)):
        return x.count == y.count && zip(x, y).allSatisfy { strictlyEqual($0, $1) }
    case (.object(let x), .object(let y)):
        guard x.count == y.count else { return false }
        var byBytes: [[UInt8]: JSONValue] = [:]
        for (key, value) in y { byBytes[Array(key.utf8)] = value }
        guard byBytes.count == y.count else { return false }
        for (key, value) in x {
            guard let other = byBytes[Array(key.utf8)], strictlyEqual(value, other) else { return false }
        }
        return true
    default:
        return a == b
    }
}

// MARK: - JSON

@inline(never)
private func checkJSONRoundTrip(_ value: JSONValue, context: String) {
    let text = value.serialized
    let reparsed: JSONValue
    do {
        reparsed = try JSONValue.parse(Array(text.utf8))
    } catch {
        fatalError("fuzz property failed: \(context): serialized JSON does not parse (offset \(error.offset)): \(text)")
    }
    check(reparsed == value, "\(context): re-parsed value differs (==): \(text)")
    check(strictlyEqual(reparsed, value), "\(context): re-parsed value differs (bytes): \(text)")
    if checkKeyOrder {
        let again = reparsed.serialized
        check(sameBytes(again, text), "\(context): serialization is not idempotent: \(text) vs \(again)")
    }
}

@inline(never)
private func fuzzJSON(_ bytes: ArraySlice<UInt8>) {
    let value: JSONValue
    do {
        value = try JSONValue.parse(bytes)
    } catch {
        note("json: refused at offset \(error.offset)")
        return
    }
    note("json: accepted \(value.serialized.prefix(120))")
    // What the parser promises beyond RFC 8259: no NUL, no lone surrogate (a Swift String cannot hold one),
    // valid UTF-8, bounded depth.
    check(depth(of: value) <= JSONValue.maxNestingDepth, "nesting deeper than the bound was accepted")
    check(!containsNUL(value), "a NUL was accepted")
    checkJSONRoundTrip(value, context: "raw JSON")
    // The parser accepts only valid UTF-8, so decoding the input must not repair anything.
    check(String(validating: bytes, as: UTF8.self) != nil, "invalid UTF-8 was accepted")

    // Any object is also an event body (and may carry an SSF `sub_id`), of a type picked by the input's length.
    if case .object(let body) = value {
        let types = EventType.allCases.map(\.rawValue) + ["urn:example:unknown"]
        let uri = types[bytes.count % types.count]
        let event = SecurityEvent(typeURI: uri, body: body, topLevelSubject: body["sub_id"].flatMap(Subject.init(json:)))
        let audience = body["aud"]?.arrayValue?.compactMap(\.stringValue) ?? ["a"]
        checkEvents([event], audience: audience, boundsChecked: false)
    }
}

private func depth(of value: JSONValue) -> Int {
    switch value {
    case .array(let values): 1 + (values.map(depth(of:)).max() ?? 0)
    case .object(let members): 1 + (members.values.map(depth(of:)).max() ?? 0)
    default: 1
    }
}

private func containsNUL(_ value: JSONValue) -> Bool {
    switch value {
    case .string(let text): text.utf8.contains(0)
    case .array(let values): values.contains(where: containsNUL)
    case .object(let members): members.contains { $0.key.utf8.contains(0) || containsNUL($0.value) }
    default: false
    }
}

// MARK: - JWS helpers

/// Splits `header 0x00 payload`; without a 0x00 the whole input is the payload under a valid header.
private func jsonParts(_ bytes: ArraySlice<UInt8>) -> (header: ArraySlice<UInt8>, payload: ArraySlice<UInt8>) {
    if let zero = bytes.firstIndex(of: 0) {
        return (bytes[bytes.startIndex..<zero], bytes[(zero + 1)...])
    }
    return (defaultHeader[...], bytes)
}

// MARK: - SETs

@inline(never)
private func fuzzSET(compact token: String, expectedSigningInput: String?) {
    let parsed: SecurityEventToken
    do {
        parsed = try SecurityEventToken.parse(compact: token, policy: setPolicy, now: now)
    } catch {
        note("set: \(error)")
        check(!error.text.isEmpty, "a rejection without a description")
        check(
            error.code == .invalidRequest || error.code == .invalidKey,
            "parse answered \(error.code), which needs a key or the configuration")
        return
    }
    note("set: accepted, events \(parsed.events.map(\.shortName))")
    checkSET(parsed, token: token, expectedSigningInput: expectedSigningInput)
}

@inline(never)
private func checkSET(_ token: SecurityEventToken, token text: String, expectedSigningInput: String?) {
    // Header.
    check(setPolicy.allowedAlgorithms.contains(token.header.alg), "alg \(token.header.alg) accepted")
    check(!SETPolicy.isAlwaysRefused(token.header.alg), "an always-refused alg accepted")
    check(!token.header.kid.isEmpty, "an empty kid accepted")
    if let typ = token.header.typ {
        check(
            ["secevent+jwt", "application/secevent+jwt", "jwt"].contains(typ.lowercased()),
            "typ \(typ) accepted")
    }
    check(!token.signature.isEmpty, "a token without a signature accepted")
    // Framing: what the signature covers is `header.payload` exactly as sent.
    let textBytes = Array(text.utf8)
    check(textBytes.starts(with: token.signingInput), "the signing input is not a prefix of the token")
    check(
        token.signingInput.filter { $0 == UInt8(ascii: ".") }.count == 1,
        "the signing input does not hold exactly one dot")
    if let expectedSigningInput {
        check(token.signingInput.elementsEqual(expectedSigningInput.utf8), "signing input differs from what was sent")
    }
    // Claims.
    check(!token.jti.isEmpty, "an empty jti accepted")
    check(ClaimBounds.fits(token.jti), "an oversized jti accepted")
    check(ClaimBounds.fits(token.issuer), "an oversized iss accepted")
    check(token.issuedAt.timeIntervalSince(now) <= setPolicy.maxFutureIssuedAt, "iat too far in the future accepted")
    check(token.issuedAt.timeIntervalSince1970.isFinite, "a non-finite iat accepted")
    check(!token.events.isEmpty, "a SET without events accepted")
    let uris = token.events.map(\.typeURI)
    check(Set(uris.map { Array($0.unicodeScalars) }).count == uris.count, "an event type twice")
    if checkKeyOrder {
        check(zip(uris, uris.dropFirst()).allSatisfy { JSONValue.byteOrder($0, $1) }, "events not in byte order")
    }
    // The stored claims are the payload exactly as sent, and parse as an object.
    guard case .object(let claims)? = try? JSONValue.parse(token.payloadJSON) else {
        fatalError("fuzz property failed: the kept payload is not a JSON object")
    }
    checkJSONRoundTrip(.object(claims), context: "SET payload")
    check(claims["jti"]?.stringValue.map { sameBytes($0, token.jti) } == true, "jti differs from the payload's")
    check(claims["iss"]?.stringValue.map { sameBytes($0, token.issuer) } == true, "iss differs from the payload's")
    for event in token.events {
        check(event.type == EventType(rawValue: event.typeURI), "event type does not match its URI")
        if event.reason != nil { check(event.type == .accountDisabled, "a reason on a non-account-disabled event") }
        if event.state != nil {
            check(event.type == .verification || event.type == .ssfVerification, "a state on a non-verification event")
        }
    }
    _ = token.primaryEvent
    _ = token.isIgnored
    // Issuer and audience: never crash, and an audience naming "a" passes with the right issuer.
    let audienceResult = Result { () throws(SETRejection) in
        try token.checkIssuerAndAudience(expectedIssuer: token.issuer, policy: setPolicy)
    }
    check(
        (try? audienceResult.get()) != nil || !token.audience.contains("a"),
        "aud names our client but the audience check refused it")

    checkEvents(token.events, audience: token.audience, boundsChecked: true)
}

/// What the worker would do with decoded events, and what it would do after they went through storage
/// (`SecurityEvent.jsonValue`, read back with `SecurityEvent.stored` as the worker does): the same.
@inline(never)
private func checkEvents(_ events: [SecurityEvent], audience: [String], boundsChecked: Bool) {
    let actions = AccountAction.actions(for: events, audience: audience)
    for (position, action) in actions {
        check(position >= 0 && position < events.count, "action position out of range")
        check(!action.kind.rawValue.isEmpty, "an action without a kind")
        if let sub = action.sub {
            check(!sub.isEmpty, "an action on an empty sub")
            if boundsChecked { check(ClaimBounds.fits(sub), "an action on an oversized sub") }
        }
        if case .deleteGrant(_, let clientIDs) = action {
            check(clientIDs == audience, "a grant deletion not confined to the SET's audience")
        }
        _ = action.argument
        _ = action.clientIDs
    }

    let stored = JSONValue.array(events.map(\.jsonValue))
    checkJSONRoundTrip(stored, context: "stored events")
    let eventsJSON = stored.serialized
    guard let decoded = SecurityEvent.stored(Array(eventsJSON.utf8)) else {
        fatalError("fuzz property failed: the stored events cannot be read back: \(eventsJSON)")
    }
    check(decoded.count == events.count, "stored events decode to a different count")
    let reactions = AccountAction.actions(for: decoded, audience: audience)
    check(
        "\(reactions)".utf8.elementsEqual("\(actions)".utf8),
        "the worker would act differently on the stored events: \(actions) vs \(reactions); stored \(eventsJSON)")
    for (original, reloaded) in zip(events, decoded) {
        check(sameBytes(original.typeURI, reloaded.typeURI), "an event URI changed in storage")
        check(original.subject?.googleSubject == reloaded.subject?.googleSubject, "a subject's sub changed in storage")
    }
}

// MARK: - ID tokens

@inline(never)
private func fuzzIDToken(compact token: String, expectedSigningInput: String?) {
    for policy in [idPolicy, idPolicyHostedDomain] {
        let parsed: GoogleIDToken
        do {
            parsed = try GoogleIDToken.parse(token, policy: policy, now: now)
        } catch {
            note("id token (hd: \(policy.hostedDomains.sorted())): \(error)")
            check(!error.description.isEmpty, "an ID token rejection without a description")
            continue
        }
        note("id token (hd: \(policy.hostedDomains.sorted())): accepted, sub \(parsed.profile.sub)")
        check(policy.allowedAlgorithms.contains(parsed.alg), "ID token alg \(parsed.alg) accepted")
        check(!parsed.kid.isEmpty, "ID token with an empty kid accepted")
        check(!parsed.signature.isEmpty, "ID token without a signature accepted")
        check(!parsed.profile.sub.isEmpty, "ID token with an empty sub accepted")
        check(ClaimBounds.fits(parsed.profile.sub), "ID token with an oversized sub accepted")
        check(now.timeIntervalSince(parsed.expiresAt) <= policy.leeway, "expired ID token accepted")
        if !policy.hostedDomains.isEmpty {
            check(
                parsed.profile.hostedDomain.map { policy.hostedDomains.contains($0.lowercased()) } == true,
                "ID token from another hosted domain accepted")
        }
        check(Array(token.utf8).starts(with: parsed.signingInput), "ID token signing input is not a prefix")
        if let expectedSigningInput {
            check(parsed.signingInput.elementsEqual(expectedSigningInput.utf8), "ID token signing input differs")
        }
        for issuer in ["https://accounts.google.com", "accounts.google.com"] {
            _ = try? parsed.checkIssuer(discoveryIssuer: issuer)
        }
    }
}

// MARK: - base64, JWS framing, token identifiers

@inline(never)
private func fuzzBase64(_ bytes: ArraySlice<UInt8>) {
    let text = String(decoding: bytes, as: UTF8.self)
    if let data = Base64URL.decode(text) {
        check(Base64URL.decode(Base64URL.encode(data)) == data, "lenient decode does not round-trip (url)")
        check(Base64URL.decode(data.base64EncodedString()) == data, "lenient decode does not round-trip (std)")
    }
    if let data = Base64URL.decodeJWSSegment(bytes) {
        check(Base64URL.decode(bytes: bytes) == data, "a JWS segment decodes differently when lenient")
        // One spelling per byte string: a segment is accepted only in its canonical form.
        check(Base64URL.encode(data).utf8.elementsEqual(bytes), "a non-canonical JWS segment accepted")
        check(!bytes.contains(UInt8(ascii: "=")), "a padded JWS segment accepted")
        check(!bytes.contains(UInt8(ascii: "+")) && !bytes.contains(UInt8(ascii: "/")), "standard alphabet accepted")
    }
    // Whatever the bytes, their url encoding is one valid JWS segment that decodes back to them.
    let encoded = Base64URL.encode(bytes)
    check(
        Base64URL.decodeJWSSegment(Array(encoded.utf8)) == Data(bytes), "urlEncoded output is not a valid segment")

    if let jws = try? CompactJWS(text) {
        let segments = text.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        check(segments.count == 3, "CompactJWS accepted \(segments.count) segments")
        check(Base64URL.decodeJWSSegment(segments[0]) == jws.header, "JWS header differs from its segment")
        check(Base64URL.decodeJWSSegment(segments[1]) == jws.payload, "JWS payload differs from its segment")
        check(
            jws.signingInput.elementsEqual(text.utf8[segments[0].startIndex..<segments[1].endIndex]),
            "JWS signing input differs")
    }

    for algorithm in ["prefix", "hash_base64_sha512_sha512"] {
        guard let identifier = TokenIdentifier(algorithm: algorithm, value: text) else { continue }
        check(identifier.algorithm == algorithm, "token identifier changed its algorithm")
        let again = TokenIdentifier(algorithm: algorithm, value: identifier.canonicalValue)
        check(again == identifier, "a token identifier's canonical value does not parse back to it")
        if case .prefix(let prefix) = identifier {
            check(prefix.utf8.count == TokenIdentifier.prefixLength, "a prefix of the wrong length accepted")
            check(identifier.matches(token: prefix + "rest"), "a prefix does not match a token it starts")
        }
    }
}

// MARK: - entry point

private func fuzzSETFromParts(_ bytes: ArraySlice<UInt8>, flags: UInt8?) {
    let (header, payload) = jsonParts(bytes)
    var headerSegment = Base64URL.encode(header)
    var payloadSegment = Base64URL.encode(payload)
    var signature = signatureSegment
    var suffix = ""
    if let flags {
        if flags & 0x01 != 0 { payloadSegment = Data(payload).base64EncodedString() }  // standard alphabet, padded
        if flags & 0x02 != 0 { headerSegment += "=" }
        if flags & 0x04 != 0 { signature = "" }  // unsecured JWS framing
        if flags & 0x08 != 0 { suffix = ".eHl6" }  // a fourth segment (JWE has five)
        if flags & 0x10 != 0 { signature = "c2lnbmF0dXJl+/" }
        if flags & 0x20 != 0 { headerSegment = " " + headerSegment }
        if flags & 0x40 != 0 { payloadSegment += "\n" }
    }
    let signingInput = headerSegment + "." + payloadSegment
    let token = signingInput + "." + signature + suffix
    fuzzSET(compact: token, expectedSigningInput: signingInput)
}

/// Entry 7: where a subscriber may point.
private func fuzzSubscriberURL(_ bytes: ArraySlice<UInt8>) {
    let text = String(decoding: bytes, as: UTF8.self)
    let problem = URLPolicy.subscriberURLProblem(text)
    note("url: \(problem ?? "allowed")")
    guard let address = IPAddress(literal: text) else { return }
    check(IPAddress(literal: address.description) == address, "\(text) reads back as \(address)")
    let host = address.description.contains(":") ? "[\(address.description)]" : address.description
    check((URLPolicy.subscriberURLProblem("https://\(host)/") != nil) == address.isForbiddenDestination, "\(address) in a URL")
    if case .v4 = address, let mapped = IPAddress(literal: "::ffff:\(address.description)") {
        check(mapped.isForbiddenDestination == address.isForbiddenDestination, "\(address) mapped into IPv6")
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func LLVMFuzzerTestOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size > 0 else { return 0 }
    let input = Array(UnsafeBufferPointer(start: data, count: size))
    let rest = input[1...]
    switch input[0] % 8 {
    case 1:
        fuzzSETFromParts(rest, flags: nil)
    case 2:
        let (header, payload) = jsonParts(rest)
        let signingInput = Base64URL.encode(header) + "." + Base64URL.encode(payload)
        fuzzIDToken(compact: signingInput + "." + signatureSegment, expectedSigningInput: signingInput)
    case 3:
        fuzzSET(compact: String(decoding: rest, as: UTF8.self), expectedSigningInput: nil)
    case 4:
        fuzzIDToken(compact: String(decoding: rest, as: UTF8.self), expectedSigningInput: nil)
    case 5:
        fuzzBase64(rest)
    case 6:
        guard let flags = rest.first else { return 0 }
        fuzzSETFromParts(rest.dropFirst(), flags: flags)
    case 7:
        fuzzSubscriberURL(rest)
    default:
        fuzzJSON(rest)
    }
    return 0
}
