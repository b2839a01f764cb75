import AsyncHTTPClient
import Crypto
import Foundation
import JWTKit
import NIOCore
import NIOHTTP1
import PostgresNIO
import RISC
import ServiceLifecycle
import TestSupport
import Testing

@testable import DevTransmitter

/// A corpus of forged and malformed inputs to `POST /risc/events` and `POST /tokensignin`, one test per class.
/// Every case checks the exact documented answer and that nothing was written; every class starts with
/// a well-formed control (so the "nothing stored" checks are shown able to see a row) and ends with `/healthz`.
@Suite("Hostile input: forged and malformed SETs and ID tokens", .timeLimit(.minutes(3)))
struct HostileInputTests {
    // MARK: - framing

    @Test("Framing: body shapes, sizes, encodings", .seeded)
    func framing() async throws {
        try await Harness.with { harness in
            let forge = try await Forge.make(harness)
            let (good, goodMarker) = try await forge.validSET()
            let (other, otherMarker) = try await forge.validSET()
            let parts = good.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
            var cases: [HostileCase] = []
            func add(_ name: String, _ body: String, _ expect: Expect, markers: [String] = [goodMarker]) {
                cases.append(HostileCase(name, Array(body.utf8), expect, markers: markers))
            }
            func addBytes(_ name: String, _ body: [UInt8], _ expect: Expect, markers: [String] = [goodMarker]) {
                cases.append(HostileCase(name, body, expect, markers: markers))
            }
            add("empty body", "", .rejected(.invalidRequest), markers: [])
            add("whitespace only", " \t \n  ", .rejected(.invalidRequest), markers: [])
            add("CRLF only", "\r\n\r\n", .rejected(.invalidRequest), markers: [])
            add("a word", "hello", .rejected(.invalidRequest), markers: [])
            add("header.payload only (signature and its dot dropped)", parts[0] + "." + parts[1], .rejected(.invalidRequest))
            add("trailing dot: four segments, the last empty", good + ".", .rejected(.invalidRequest))
            add("extra fourth segment", good + ".ZXh0cmE", .rejected(.invalidRequest))
            add("five segments, JWE-shaped", good + ".YWJj.ZGVm", .rejected(.invalidRequest))
            add("two tokens, newline-separated", good + "\n" + other, .rejected(.invalidRequest), markers: [goodMarker, otherMarker])
            add("two tokens, space-separated", good + " " + other, .rejected(.invalidRequest), markers: [goodMarker, otherMarker])
            add("two tokens, comma-separated", good + "," + other, .rejected(.invalidRequest), markers: [goodMarker, otherMarker])
            add("two tokens, run together", good + other, .rejected(.invalidRequest), markers: [goodMarker, otherMarker])
            add("JSON claims instead of a JWS", forge.claimsText(goodMarker), .rejected(.invalidRequest))
            add(
                "JWS flattened JSON serialization",
                #"{"protected":"\#(parts[0])","payload":"\#(parts[1])","signature":"\#(parts[2])"}"#, .rejected(.invalidRequest))
            add(
                "JWS general JSON serialization",
                #"{"payload":"\#(parts[1])","signatures":[{"protected":"\#(parts[0])","signature":"\#(parts[2])"}]}"#,
                .rejected(.invalidRequest))
            var generator = SeededGenerator()
            addBytes("binary garbage", (0..<512).map { _ in UInt8.random(in: 0...255, using: &generator) }, .rejected(.invalidRequest), markers: [])
            addBytes("NUL bytes", [UInt8](repeating: 0, count: 100), .rejected(.invalidRequest), markers: [])
            addBytes("valid token followed by a NUL byte", Array(good.utf8) + [0], .rejected(.invalidRequest))
            addBytes(
                "valid token with 0xFF bytes inside the payload",
                Array((parts[0] + "." + parts[1]).utf8) + [0xFF, 0xFE] + Array(("." + parts[2]).utf8), .rejected(.invalidRequest))
            addBytes("UTF-16LE with BOM", [0xFF, 0xFE] + good.utf16.flatMap { [UInt8($0 & 0xFF), UInt8($0 >> 8)] }, .rejected(.invalidRequest))
            addBytes("UTF-16BE without BOM", good.utf16.flatMap { [UInt8($0 >> 8), UInt8($0 & 0xFF)] }, .rejected(.invalidRequest))
            addBytes("UTF-8 BOM before the token", [0xEF, 0xBB, 0xBF] + Array(good.utf8), .rejected(.invalidRequest))
            add("percent-encoded dots", good.replacingOccurrences(of: ".", with: "%2E"), .rejected(.invalidRequest))
            add("form-encoded (set=...)", "set=" + good, .rejected(.invalidRequest))
            add("wrapped in JSON string quotes", "\"" + good + "\"", .rejected(.invalidRequest))
            add("with an Authorization-style prefix", "Bearer " + good, .rejected(.invalidRequest))
            add(
                "line-wrapped every 64 characters",
                stride(from: 0, to: good.count, by: 64).map { offset in
                    String(good.dropFirst(offset).prefix(64))
                }.joined(separator: "\r\n"), .rejected(.invalidRequest))
            add("the whole token base64-encoded again", Data(good.utf8).base64EncodedString(), .rejected(.invalidRequest))
            add(
                "exactly 64 KiB of garbage is parsed, not refused for size", String(repeating: "a", count: 64 * 1024), .rejected(.invalidRequest),
                markers: [])
            add("64 KiB + 1 byte", String(repeating: "a", count: 64 * 1024 + 1), .tooLarge, markers: [])
            add("a valid SET followed by 70 KB of whitespace", good + String(repeating: " ", count: 70_000), .tooLarge)
            let bigMarker = Forge.marker()
            let big = try await forge.harness.sign(forge.claims(bigMarker) { $0["padding"] = .string(String(repeating: "p", count: 80_000)) })
            add("a validly signed 100 KB SET", big, .tooLarge, markers: [bigMarker])
            add("1 MiB", String(repeating: "A", count: 1 << 20), .tooLarge, markers: [])
            var chunked = HostileCase(
                "80 KiB sent chunked (no Content-Length)", Array(String(repeating: "a", count: 80 * 1024).utf8), .tooLarge, markers: [])
            chunked.chunked = true
            cases.append(chunked)
            try await forge.run(cases, class: "framing")
        }
    }

    // MARK: - base64url

    @Test("base64url: padding, standard alphabet, illegal characters, non-canonical bits, empty segments")
    func base64url() async throws {
        try await Harness.with { harness in
            let forge = try await Forge.make(harness)
            var cases: [HostileCase] = []
            func add(_ name: String, _ token: String, _ marker: String, _ expect: Expect = .rejected(.invalidRequest)) {
                cases.append(HostileCase(name, Array(token.utf8), expect, markers: [marker]))
            }

            // Padding on a segment, the token signed over exactly what is sent (so only the encoding is wrong).
            do {
                let marker = Forge.marker()
                let (h, p) = forge.segments(headerWhere: { $0.count % 4 != 0 }, marker)
                add("padded header segment", try forge.signEncoded(h + String(repeating: "=", count: 4 - h.count % 4), p), marker)
            }
            do {
                let marker = Forge.marker()
                let (h, p) = forge.segments(payloadWhere: { $0.count % 4 != 0 }, marker)
                add("padded payload segment", try forge.signEncoded(h, p + String(repeating: "=", count: 4 - p.count % 4)), marker)
            }
            do {
                let marker = Forge.marker()
                let (h, p) = forge.segments(payloadWhere: { $0.count % 4 == 0 }, marker)
                add("payload segment with padding it does not need (==)", try forge.signEncoded(h, p + "=="), marker)
            }
            do {
                let (token, marker) = try await forge.validSET()
                let padding = String(repeating: "=", count: (4 - token.split(separator: ".")[2].count % 4) % 4)
                add("padded signature segment", token + (padding.isEmpty ? "==" : padding), marker)
            }
            // The standard alphabet (+ and /) where base64url has - and _.
            do {
                let marker = Forge.marker()
                let (h, p) = forge.segments(headerWhere: { $0.contains("-") || $0.contains("_") }, marker)
                add("header segment in the standard alphabet", try forge.signEncoded(Forge.standardAlphabet(h), p), marker)
            }
            do {
                let marker = Forge.marker()
                let (h, p) = forge.segments(payloadWhere: { $0.contains("-") || $0.contains("_") }, marker)
                add("payload segment in the standard alphabet", try forge.signEncoded(h, Forge.standardAlphabet(p)), marker)
            }
            do {
                var (token, marker) = try await forge.validSET()
                while !(token.split(separator: ".")[2].contains("-") || token.split(separator: ".")[2].contains("_")) {
                    (token, marker) = try await forge.validSET()
                }
                let parts = token.split(separator: ".").map(String.init)
                add("signature segment in the standard alphabet", parts[0] + "." + parts[1] + "." + Forge.standardAlphabet(parts[2]), marker)
            }
            // Characters outside any base64 alphabet.
            for (name, character, segment) in [
                ("'*' in the header", "*", 0), ("'!' in the payload", "!", 1), ("a space inside the signature", " ", 2),
                ("'~' in the signature", "~", 2), ("'%' in the payload", "%", 1), ("non-ASCII 'é' in the payload", "é", 1),
                ("'=' in the middle of the header", "=", 0),
            ] {
                let (token, marker) = try await forge.validSET()
                var parts = token.split(separator: ".").map(String.init)
                let middle = parts[segment].index(parts[segment].startIndex, offsetBy: parts[segment].count / 2)
                parts[segment].insert(contentsOf: character, at: middle)
                add(name, parts.joined(separator: "."), marker)
            }
            do {
                let marker = Forge.marker()
                let (h, p) = forge.segments(headerWhere: { $0.count % 4 == 0 }, marker)
                add("header segment of impossible length (4n+1)", try forge.signEncoded(h + "A", p), marker)
            }
            // Non-canonical encodings: the unused low bits of the last character set. Header and payload are signed as
            // sent; the signature's variant decodes to the very bytes of a valid signature.
            do {
                let marker = Forge.marker()
                let (h, p) = forge.segments(headerWhere: { $0.count % 4 == 2 }, marker)
                add("header with non-canonical trailing bits (4n+2)", try forge.signEncoded(Forge.nonCanonical(h), p), marker)
            }
            do {
                let marker = Forge.marker()
                let (h, p) = forge.segments(payloadWhere: { $0.count % 4 == 3 }, marker)
                add("payload with non-canonical trailing bits (4n+3)", try forge.signEncoded(h, Forge.nonCanonical(p)), marker)
            }
            do {
                let (token, marker) = try await forge.validSET()
                let parts = token.split(separator: ".").map(String.init)
                add("signature with non-canonical trailing bits", parts[0] + "." + parts[1] + "." + Forge.nonCanonical(parts[2]), marker)
            }
            // Empty segments.
            do {
                let (token, marker) = try await forge.validSET()
                let parts = token.split(separator: ".").map(String.init)
                add("empty header segment", "." + parts[1] + "." + parts[2], marker)
                add("empty payload segment", parts[0] + ".." + parts[2], marker)
                add("all three segments empty", "..", marker)
                add("four empty segments", "...", marker)
                // Framing-valid (an unsecured JWS has an empty signature), but RS256 needs one: the signature does not verify.
                add("RS256 with an empty signature segment", parts[0] + "." + parts[1] + ".", marker, .rejected(.invalidKey))
            }
            try await forge.run(cases, class: "base64url")
        }
    }

    // MARK: - JOSE header

    @Test("JOSE header attacks: alg, kid, jku/x5u/jwk/x5c, crit, typ, header shape")
    func joseHeader() async throws {
        try await Harness.with { harness in
            let forge = try await Forge.make(harness)
            let kid = forge.kid
            // An attacker's transmitter, serving its own JWKS on loopback.
            let impostor = try await DevTransmitter(settings: .init(port: 0, audience: Harness.audience), logger: Harness.logger)
            try await serving(impostor) {

                let impostorKey = impostor.keys.current
                let impostorRS256 = try await Forge.algorithm(rsa: impostorKey.privateKey, .sha256)
                let impostorJWK = try #require(impostor.keys.jwks()["keys"]?.arrayValue?.first).serialized
                let es256 = try await Forge.es256()

                var cases: [HostileCase] = []
                /// A token with this header text, the case's claims, and a signature made by `sign`.
                func add(_ name: String, header: String, _ expect: Expect, sign: (String) throws -> String) throws {
                    let marker = Forge.marker()
                    let input = Forge.b64(header) + "." + Forge.b64(forge.claimsText(marker))
                    cases.append(HostileCase(name, Array((input + "." + (try sign(input))).utf8), expect, markers: [marker]))
                }
                func add(_ name: String, header: String, _ expect: Expect, by algorithm: any JWTAlgorithm) throws {
                    try add(name, header: header, expect) { Forge.b64(try algorithm.sign(Array($0.utf8))) }
                }
                let typ = #""typ":"secevent+jwt""#
                let junk: (String) -> String = { _ in "c2lnbmF0dXJl" }
                let empty: (String) -> String = { _ in "" }
                let hmac: (String, [UInt8]) -> String = { input, key in
                    Forge.b64(Array(HMAC<SHA256>.authenticationCode(for: Array(input.utf8), using: SymmetricKey(data: key))))
                }
                let pem = Array(forge.publicKeyPEM.utf8)

                // alg
                try add("alg none, empty signature", header: #"{"alg":"none","kid":"\#(kid)",\#(typ)}"#, .rejected(.invalidKey), sign: empty)
                try add("alg none, no kid, empty signature", header: #"{"alg":"none",\#(typ)}"#, .rejected(.invalidKey), sign: empty)
                try add("alg none, with a signature", header: #"{"alg":"none","kid":"\#(kid)",\#(typ)}"#, .rejected(.invalidKey), sign: junk)
                try add("alg None", header: #"{"alg":"None","kid":"\#(kid)",\#(typ)}"#, .rejected(.invalidKey), sign: empty)
                try add("alg NONE", header: #"{"alg":"NONE","kid":"\#(kid)",\#(typ)}"#, .rejected(.invalidKey), sign: junk)
                try add("alg nOnE", header: #"{"alg":"nOnE","kid":"\#(kid)",\#(typ)}"#, .rejected(.invalidKey), sign: junk)
                try add("HS256 keyed with the public key (PEM)", header: #"{"alg":"HS256","kid":"\#(kid)",\#(typ)}"#, .rejected(.invalidKey)) {
                    hmac($0, pem)
                }
                try add("HS256 keyed with the public modulus", header: #"{"alg":"HS256","kid":"\#(kid)",\#(typ)}"#, .rejected(.invalidKey)) {
                    hmac($0, forge.modulus)
                }
                try add("HS512 keyed with the public key (PEM)", header: #"{"alg":"HS512","kid":"\#(kid)",\#(typ)}"#, .rejected(.invalidKey)) {
                    Forge.b64(Array(HMAC<SHA512>.authenticationCode(for: Array($0.utf8), using: SymmetricKey(data: pem))))
                }
                try add(
                    "RS384 signed with the transmitter's own key", header: #"{"alg":"RS384","kid":"\#(kid)",\#(typ)}"#, .rejected(.invalidKey),
                    by: forge.rs384)
                try add(
                    "PS256 signed with the transmitter's own key", header: #"{"alg":"PS256","kid":"\#(kid)",\#(typ)}"#, .rejected(.invalidKey),
                    by: forge.ps256)
                try add(
                    "ES256 signed with an attacker's EC key", header: #"{"alg":"ES256","kid":"\#(kid)",\#(typ)}"#, .rejected(.invalidKey), by: es256)
                try add("EdDSA with junk", header: #"{"alg":"EdDSA","kid":"\#(kid)",\#(typ)}"#, .rejected(.invalidKey), sign: junk)
                try add("alg missing", header: #"{"kid":"\#(kid)",\#(typ)}"#, .rejected(.invalidKey), by: forge.rs256)
                try add("alg null", header: #"{"alg":null,"kid":"\#(kid)",\#(typ)}"#, .rejected(.invalidKey), by: forge.rs256)
                try add("alg a number", header: #"{"alg":256,"kid":"\#(kid)",\#(typ)}"#, .rejected(.invalidKey), by: forge.rs256)
                try add("alg an array", header: #"{"alg":["RS256"],"kid":"\#(kid)",\#(typ)}"#, .rejected(.invalidKey), by: forge.rs256)
                try add("alg rs256 (lower case)", header: #"{"alg":"rs256","kid":"\#(kid)",\#(typ)}"#, .rejected(.invalidKey), by: forge.rs256)
                try add(
                    "alg 'RS256 ' (trailing space)", header: #"{"alg":"RS256 ","kid":"\#(kid)",\#(typ)}"#, .rejected(.invalidKey), by: forge.rs256)
                // kid
                try add("kid missing", header: #"{"alg":"RS256",\#(typ)}"#, .rejected(.invalidKey), by: forge.rs256)
                try add("kid empty", header: #"{"alg":"RS256","kid":"",\#(typ)}"#, .rejected(.invalidKey), by: forge.rs256)
                try add("kid null", header: #"{"alg":"RS256","kid":null,\#(typ)}"#, .rejected(.invalidKey), by: forge.rs256)
                try add("kid a number", header: #"{"alg":"RS256","kid":1,\#(typ)}"#, .rejected(.invalidKey), by: forge.rs256)
                try add(
                    "kid an array holding the real kid", header: #"{"alg":"RS256","kid":["\#(kid)"],\#(typ)}"#, .rejected(.invalidKey),
                    by: forge.rs256)
                try add("kid an object", header: #"{"alg":"RS256","kid":{"id":"\#(kid)"},\#(typ)}"#, .rejected(.invalidKey), by: forge.rs256)
                try add("kid unknown", header: #"{"alg":"RS256","kid":"no-such-kid",\#(typ)}"#, .rejected(.invalidKey), by: forge.rs256)
                try add(
                    "kid the real one upper-cased", header: #"{"alg":"RS256","kid":"\#(kid.uppercased())",\#(typ)}"#, .rejected(.invalidKey),
                    by: forge.rs256)
                try add(
                    "kid the real one plus a space", header: #"{"alg":"RS256","kid":"\#(kid) ",\#(typ)}"#, .rejected(.invalidKey), by: forge.rs256)
                try add(
                    "kid a path traversal", header: #"{"alg":"RS256","kid":"../../../../../etc/passwd",\#(typ)}"#, .rejected(.invalidKey),
                    by: forge.rs256)
                try add("kid an SQL injection", header: #"{"alg":"RS256","kid":"' OR '1'='1' --",\#(typ)}"#, .rejected(.invalidKey), by: forge.rs256)
                try add(
                    "kid a JNDI lookup", header: #"{"alg":"RS256","kid":"${jndi:ldap://127.0.0.1/a}",\#(typ)}"#, .rejected(.invalidKey),
                    by: forge.rs256)
                try add(
                    "kid of 8 KB", header: #"{"alg":"RS256","kid":"\#(String(repeating: "k", count: 8192))",\#(typ)}"#, .rejected(.invalidKey),
                    by: forge.rs256)
                // Key material named by the token itself is never used: these are signed by the attacker.
                let impostorKid = impostorKey.kid
                try add(
                    "jku at the attacker's JWKS, attacker's kid",
                    header: #"{"alg":"RS256","kid":"\#(impostorKid)","jku":"\#(impostor.baseURL)/jwks",\#(typ)}"#, .rejected(.invalidKey),
                    by: impostorRS256)
                try add(
                    "jku at the attacker's JWKS, the real kid", header: #"{"alg":"RS256","kid":"\#(kid)","jku":"\#(impostor.baseURL)/jwks",\#(typ)}"#,
                    .rejected(.invalidKey), by: impostorRS256)
                try add(
                    "x5u at the attacker, attacker's kid",
                    header: #"{"alg":"RS256","kid":"\#(impostorKid)","x5u":"\#(impostor.baseURL)/cert.pem",\#(typ)}"#, .rejected(.invalidKey),
                    by: impostorRS256)
                try add(
                    "jwk embedded (attacker's key), attacker's kid",
                    header: #"{"alg":"RS256","kid":"\#(impostorKid)","jwk":\#(impostorJWK),\#(typ)}"#, .rejected(.invalidKey), by: impostorRS256)
                try add(
                    "jwk embedded (attacker's key), the real kid", header: #"{"alg":"RS256","kid":"\#(kid)","jwk":\#(impostorJWK),\#(typ)}"#,
                    .rejected(.invalidKey), by: impostorRS256)
                try add(
                    "x5c with an attacker's certificate chain",
                    header: #"{"alg":"RS256","kid":"\#(impostorKid)","x5c":["MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA"],\#(typ)}"#,
                    .rejected(.invalidKey), by: impostorRS256)
                // crit: nothing is understood, so any critical extension is refused (signed with the real key).
                try add(
                    "crit naming exp", header: #"{"alg":"RS256","kid":"\#(kid)","crit":["exp"],"exp":1,\#(typ)}"#, .rejected(.invalidRequest),
                    by: forge.rs256)
                try add(
                    "crit b64 false", header: #"{"alg":"RS256","kid":"\#(kid)","crit":["b64"],"b64":false,\#(typ)}"#, .rejected(.invalidRequest),
                    by: forge.rs256)
                try add(
                    "crit empty array", header: #"{"alg":"RS256","kid":"\#(kid)","crit":[],\#(typ)}"#, .rejected(.invalidRequest), by: forge.rs256)
                try add(
                    "crit a string", header: #"{"alg":"RS256","kid":"\#(kid)","crit":"exp",\#(typ)}"#, .rejected(.invalidRequest), by: forge.rs256)
                // typ
                for (name, value) in [
                    ("typ at+jwt", #""at+jwt""#), ("typ empty", #""""#), ("typ a number", "1"), ("typ null", "null"),
                    ("typ with a trailing space", #""secevent+jwt ""#), ("typ application/jwt", #""application/jwt""#),
                    ("typ JOSE", #""JOSE""#), ("typ with a parameter", #""secevent+jwt;v=1""#), ("typ an array", #"["secevent+jwt"]"#),
                ] {
                    try add(name, header: #"{"alg":"RS256","kid":"\#(kid)","typ":\#(value)}"#, .rejected(.invalidRequest), by: forge.rs256)
                }
                // Header shape.
                try add("header a JSON string", header: #""RS256""#, .rejected(.invalidRequest), by: forge.rs256)
                try add("header an array", header: #"[{"alg":"RS256","kid":"\#(kid)",\#(typ)}]"#, .rejected(.invalidRequest), by: forge.rs256)
                try add("header null", header: "null", .rejected(.invalidRequest), by: forge.rs256)
                try add("header a number", header: "42", .rejected(.invalidRequest), by: forge.rs256)
                try add("header truncated JSON", header: #"{"alg":"RS256","kid":"\#(kid)""#, .rejected(.invalidRequest), by: forge.rs256)
                try add("header not JSON", header: "alg=RS256;kid=\(kid)", .rejected(.invalidRequest), by: forge.rs256)
                try add(
                    "header with alg twice (none, then RS256)", header: #"{"alg":"none","alg":"RS256","kid":"\#(kid)",\#(typ)}"#,
                    .rejected(.invalidRequest), by: forge.rs256)
                try add(
                    "header with kid twice", header: #"{"alg":"RS256","kid":"no-such-kid","kid":"\#(kid)",\#(typ)}"#, .rejected(.invalidRequest),
                    by: forge.rs256)
                try await forge.run(cases, class: "JOSE header")
            }
        }
    }

    // MARK: - payload JSON

    @Test("Payload JSON: duplicates, depth, invalid UTF-8, surrogates, NUL, huge numbers, non-objects")
    func payloadJSON() async throws {
        try await Harness.with { harness in
            let forge = try await Forge.make(harness)
            var cases: [HostileCase] = []
            /// The case's well-formed claims text, altered by `change`, then signed with the real key as sent.
            func add(_ name: String, _ change: (String) -> [UInt8]) throws {
                let expect = Expect.rejected(.invalidRequest)
                let marker = Forge.marker()
                let payload = change(forge.claimsText(marker))
                cases.append(HostileCase(name, Array(try forge.signRaw(header: forge.header(), payload: payload).utf8), expect, markers: [marker]))
            }
            /// Inserts `member` (raw bytes) as the first member of the claims object.
            func first(_ member: [UInt8]) -> (String) -> [UInt8] {
                { text in [UInt8(ascii: "{")] + member + [UInt8(ascii: ",")] + Array(text.utf8.dropFirst()) }
            }
            func first(_ member: String) -> (String) -> [UInt8] { first(Array(member.utf8)) }
            func replacing(_ target: String, with replacement: String) -> (String) -> [UInt8] {
                { text in
                    precondition(text.contains(target), "\(target) not in \(text)")
                    return Array(text.replacingOccurrences(of: target, with: replacement).utf8)
                }
            }
            let sub = #""sub":"u-1""#
            let eventKey = "\"\(EventType.sessionsRevoked.rawValue)\":"

            try add("duplicate top-level iss (an attacker's first)", first(#""iss":"https://evil.example/""#))
            try add("duplicate top-level aud", first(#""aud":"someone-else""#))
            try add("duplicate top-level events", first(#""events":{}"#))
            try add("duplicate member spelled with an escape (\\u0069ss)", first(#""\u0069ss":"https://evil.example/""#))
            try add("duplicate nested sub in the subject", replacing(sub, with: #""sub":"victim","# + sub))
            try add("duplicate event-type member in events", replacing(eventKey, with: eventKey + "{}," + eventKey))
            try add("nesting 65 deep", first(#""deep":"# + String(repeating: "[", count: 64) + String(repeating: "]", count: 64)))
            try add("nesting 1000 deep", first(#""deep":"# + String(repeating: "[", count: 999) + String(repeating: "]", count: 999)))
            try add(
                "nesting 100 objects deep inside the event",
                replacing(sub, with: sub + #","deep":"# + String(repeating: #"{"a":"#, count: 100) + "1" + String(repeating: "}", count: 100)))
            try add("nesting 1000 deep, unclosed", first(#""deep":"# + String(repeating: "[", count: 1000)))
            try add("invalid UTF-8 byte 0xFF in a string", first(Array(#""note":""#.utf8) + [0xFF, 0xFE] + [UInt8(ascii: "\"")]))
            try add("overlong UTF-8 encoding of '/'", first(Array(#""note":""#.utf8) + [0xC0, 0xAF] + [UInt8(ascii: "\"")]))
            try add("UTF-8-encoded surrogate (CESU)", first(Array(#""note":""#.utf8) + [0xED, 0xA0, 0x80] + [UInt8(ascii: "\"")]))
            try add("truncated UTF-8 sequence", first(Array(#""note":""#.utf8) + [0xE2, 0x82] + [UInt8(ascii: "\"")]))
            try add("invalid UTF-8 in a member name", first([UInt8(ascii: "\""), 0xFF, UInt8(ascii: "\"")] + Array(":1".utf8)))
            try add("lone high surrogate \\ud800", first(#""note":"\ud800""#))
            try add("lone low surrogate \\udc00", first(#""note":"\udc00""#))
            try add("surrogates in the wrong order", first(#""note":"\udc00\ud800""#))
            try add("high surrogate then a letter", first(#""note":"\ud800\u0041""#))
            try add("lone surrogate in the subject's sub", replacing(sub, with: #""sub":"u-1\ud800""#))
            try add("NUL escape \\u0000 in a value", first(#""note":"a\u0000b""#))
            try add("NUL escape in a member name", first(#""a\u0000b":1"#))
            try add("NUL escape in the jti-like subject sub", replacing(sub, with: #""sub":"u\u0000-1""#))
            try add("raw NUL byte inside a string", first(Array(#""note":"a"#.utf8) + [0] + Array(#"b""#.utf8)))
            try add("raw control character inside a string", first(Array(#""note":"a"#.utf8) + [0x01] + Array(#"b""#.utf8)))
            try add("invalid escape \\x41", first(#""note":"\x41""#))
            try add("short unicode escape \\u12", first(#""note":"\u12""#))
            let iatPattern = #/"iat":[0-9.eE+-]+/#
            func iat(_ value: String) -> (String) -> [UInt8] {
                { text in Array(text.replacing(iatPattern, with: "\"iat\":" + value, maxReplacements: 1).utf8) }
            }
            try add("iat 1e400 (overflows a double)", iat("1e400"))
            try add("iat -1e400", iat("-1e400"))
            try add("iat 1e308 (finite, far future)", iat("1e308"))
            try add("iat with 400 digits", iat(String(repeating: "9", count: 400)))
            try add("iat NaN", iat("NaN"))
            try add("iat Infinity", iat("Infinity"))
            try add("iat with a leading zero", iat("01700000000"))
            try add("iat with a leading plus", iat("+1700000000"))
            try add("iat hexadecimal", iat("0x6553F100"))
            try add("payload a JSON array") { text in Array(("[" + text + "]").utf8) }
            try add("payload a JSON string") { _ in Array(#""claims""#.utf8) }
            try add("payload null") { _ in Array("null".utf8) }
            try add("payload a number") { _ in Array("42".utf8) }
            try add("payload true") { _ in Array("true".utf8) }
            try add("payload an empty object") { _ in Array("{}".utf8) }
            try add("payload followed by garbage") { text in Array((text + "x").utf8) }
            try add("payload two objects") { text in Array((text + text).utf8) }
            try add("payload with a trailing comma") { text in Array((String(text.dropLast()) + ",}").utf8) }
            try add("payload with a comment") { text in Array(("/* c */" + text).utf8) }
            try add("payload with single-quoted strings") { text in Array(text.replacingOccurrences(of: "\"", with: "'").utf8) }
            try add("payload truncated") { text in Array(text.dropLast().utf8) }
            try add("payload with an unquoted member name", first("note:1"))
            try await forge.run(cases, class: "payload JSON")
        }
    }

    // MARK: - claim shapes

    @Test("Claim shapes and types: iss, iat, jti, events, aud")
    func claimShapes() async throws {
        try await Harness.with { harness in
            let forge = try await Forge.make(harness)
            var cases: [HostileCase] = []
            func add(_ name: String, _ expect: Expect, _ change: (inout [String: JSONValue]) -> Void) async throws {
                cases.append(try await forge.signedCase(name, expect, change))
            }
            let now = Date().timeIntervalSince1970.rounded(.down)
            let event = EventType.sessionsRevoked.rawValue
            let subject: JSONValue = ["subject": ["subject_type": "iss-sub", "iss": "https://accounts.google.com", "sub": "u-1"]]
            // iss
            try await add("iss missing", .rejected(.invalidRequest)) { $0["iss"] = nil }
            try await add("iss null", .rejected(.invalidRequest)) { $0["iss"] = .null }
            try await add("iss a number", .rejected(.invalidRequest)) { $0["iss"] = 1 }
            try await add("iss an array holding the issuer", .rejected(.invalidRequest)) { $0["iss"] = [.string(harness.transmitter.issuer)] }
            try await add("iss an object", .rejected(.invalidRequest)) { $0["iss"] = ["iss": .string(harness.transmitter.issuer)] }
            try await add("iss empty", .rejected(.invalidIssuer)) { $0["iss"] = "" }
            try await add("iss Google's (not this transmitter's)", .rejected(.invalidIssuer)) { $0["iss"] = "https://accounts.google.com/" }
            try await add("iss without its trailing slash", .rejected(.invalidIssuer)) {
                $0["iss"] = .string(String(harness.transmitter.issuer.dropLast()))
            }
            try await add("iss with a trailing space", .rejected(.invalidIssuer)) { $0["iss"] = .string(harness.transmitter.issuer + " ") }
            try await add("iss with an upper-case scheme", .rejected(.invalidIssuer)) {
                $0["iss"] = .string("HTTP" + harness.transmitter.issuer.dropFirst(4))
            }
            try await add("iss with a path appended", .rejected(.invalidIssuer)) { $0["iss"] = .string(harness.transmitter.issuer + "evil") }
            // iat
            try await add("iat missing", .rejected(.invalidRequest)) { $0["iat"] = nil }
            try await add("iat null", .rejected(.invalidRequest)) { $0["iat"] = .null }
            try await add("iat a word", .rejected(.invalidRequest)) { $0["iat"] = "now" }
            try await add("iat a numeric string", .rejected(.invalidRequest)) { $0["iat"] = .string(String(Int(now))) }
            try await add("iat a boolean", .rejected(.invalidRequest)) { $0["iat"] = true }
            try await add("iat an array", .rejected(.invalidRequest)) { $0["iat"] = [.number(now)] }
            try await add("iat an ISO date string", .rejected(.invalidRequest)) { $0["iat"] = "2024-01-01T00:00:00Z" }
            try await add("iat 6 minutes in the future", .rejected(.invalidRequest)) { $0["iat"] = .number(now + 360) }
            try await add("iat a century in the future", .rejected(.invalidRequest)) { $0["iat"] = .number(now + 100 * 365 * 86400) }
            // jti
            try await add("jti missing", .rejected(.invalidRequest)) { $0["jti"] = nil }
            try await add("jti null", .rejected(.invalidRequest)) { $0["jti"] = .null }
            try await add("jti a number", .rejected(.invalidRequest)) { $0["jti"] = 42 }
            try await add("jti empty", .rejected(.invalidRequest)) { $0["jti"] = "" }
            try await add("jti an array", .rejected(.invalidRequest)) { $0["jti"] = ["a"] }
            try await add("jti an object", .rejected(.invalidRequest)) { $0["jti"] = ["id": "a"] }
            // events
            try await add("events missing", .rejected(.invalidRequest)) { $0["events"] = nil }
            try await add("events null", .rejected(.invalidRequest)) { $0["events"] = .null }
            try await add("events a string", .rejected(.invalidRequest)) { $0["events"] = .string(event) }
            try await add("events an array of event objects", .rejected(.invalidRequest)) { $0["events"] = .array([.object([event: subject])]) }
            try await add("events empty", .rejected(.invalidRequest)) { $0["events"] = [:] }
            try await add("events member a string", .rejected(.invalidRequest)) { $0["events"] = .object([event: "revoke"]) }
            try await add("events member a number", .rejected(.invalidRequest)) { $0["events"] = .object([event: 1]) }
            try await add("events member an array", .rejected(.invalidRequest)) { $0["events"] = .object([event: [subject]]) }
            try await add("events member null", .rejected(.invalidRequest)) { $0["events"] = .object([event: .null]) }
            try await add("events with one good and one non-object member", .rejected(.invalidRequest)) {
                $0["events"] = .object([event: subject, EventType.accountDisabled.rawValue: true])
            }
            // aud
            try await add("aud missing", .rejected(.invalidAudience)) { $0["aud"] = nil }
            try await add("aud null", .rejected(.invalidAudience)) { $0["aud"] = .null }
            try await add("aud another client", .rejected(.invalidAudience)) { $0["aud"] = "someone-else.apps.googleusercontent.com" }
            try await add("aud empty", .rejected(.invalidAudience)) { $0["aud"] = "" }
            try await add("aud ours upper-cased", .rejected(.invalidAudience)) { $0["aud"] = .string(Harness.audience.uppercased()) }
            try await add("aud ours with a suffix", .rejected(.invalidAudience)) { $0["aud"] = .string(Harness.audience + ".evil") }
            try await add("aud a number", .rejected(.invalidAudience)) { $0["aud"] = 42 }
            try await add("aud an object naming ours", .rejected(.invalidAudience)) { $0["aud"] = ["aud": .string(Harness.audience)] }
            try await add("aud an empty array", .rejected(.invalidAudience)) { $0["aud"] = [] }
            try await add("aud an array of non-strings", .rejected(.invalidAudience)) { $0["aud"] = [1, true, .null] }
            try await add("aud an array holding ours inside an array", .rejected(.invalidAudience)) { $0["aud"] = [[.string(Harness.audience)]] }
            try await add("aud an array of other clients", .rejected(.invalidAudience)) { $0["aud"] = ["x", "y"] }
            // Controls: the boundaries themselves are accepted.
            try await add("control: iat 4 minutes in the future", .accepted) { $0["iat"] = .number(now + 240) }
            try await add("control: aud an array with ours among non-strings", .accepted) { $0["aud"] = [1, .string(Harness.audience)] }
            try await forge.run(cases, class: "claim shapes")
        }
    }

    // MARK: - length bounds

    @Test("Length bounds: iss, jti and subject identifiers over 256 bytes are invalid_request, alone or among valid SETs")
    func lengthBounds() async throws {
        try await Harness.with { harness in
            let forge = try await Forge.make(harness)
            var cases: [HostileCase] = []
            func add(_ name: String, _ expect: Expect, _ change: (inout [String: JSONValue]) -> Void) async throws {
                cases.append(try await forge.signedCase(name, expect, change))
            }
            func subject(sub: String, iss: String = "https://accounts.google.com", type: String = "iss-sub") -> JSONValue {
                .object([EventType.sessionsRevoked.rawValue: ["subject": ["subject_type": .string(type), "iss": .string(iss), "sub": .string(sub)]]])
            }
            let issuer = harness.transmitter.issuer
            try await add("iss of 257 bytes", .rejected(.invalidRequest)) {
                $0["iss"] = .string(issuer + String(repeating: "i", count: 257 - issuer.utf8.count))
            }
            try await add("iss of 300 bytes", .rejected(.invalidRequest)) {
                $0["iss"] = .string(issuer + String(repeating: "i", count: 300 - issuer.utf8.count))
            }
            try await add("iss of 4 KB", .rejected(.invalidRequest)) { $0["iss"] = .string(issuer + Forge.randomText(4096 - issuer.utf8.count)) }
            try await add("jti of 257 bytes", .rejected(.invalidRequest)) { $0["jti"] = .string(Forge.randomText(257)) }
            try await add("jti of 300 bytes", .rejected(.invalidRequest)) { $0["jti"] = .string(Forge.randomText(300)) }
            try await add("jti of 4 KB", .rejected(.invalidRequest)) { $0["jti"] = .string(Forge.randomText(4096)) }
            try await add("jti of 100 emoji (100 characters, 400 bytes)", .rejected(.invalidRequest)) {
                $0["jti"] = .string(String(repeating: "😀", count: 100))
            }
            try await add("subject sub of 257 bytes", .rejected(.invalidRequest)) { $0["events"] = subject(sub: Forge.randomText(257)) }
            try await add("subject sub of 300 bytes", .rejected(.invalidRequest)) { $0["events"] = subject(sub: Forge.randomText(300)) }
            try await add("subject sub of 4 KB", .rejected(.invalidRequest)) { $0["events"] = subject(sub: Forge.randomText(4096)) }
            try await add("id_token_claims subject sub of 300 bytes", .rejected(.invalidRequest)) {
                $0["events"] = subject(sub: Forge.randomText(300), type: "id_token_claims")
            }
            try await add("subject iss of 300 bytes", .rejected(.invalidRequest)) {
                $0["events"] = subject(sub: "u-1", iss: "https://" + Forge.randomText(292))
            }
            try await add("SSF sub_id sub of 300 bytes", .rejected(.invalidRequest)) {
                $0["events"] = .object([EventType.caepSessionRevoked.rawValue: ["event_timestamp": 1]])
                $0["sub_id"] = ["format": "iss_sub", "iss": "https://accounts.google.com", "sub": .string(Forge.randomText(300))]
            }
            try await add("SSF sub_id sub of 4 KB", .rejected(.invalidRequest)) {
                $0["events"] = .object([EventType.caepSessionRevoked.rawValue: ["event_timestamp": 1]])
                $0["sub_id"] = ["format": "iss_sub", "iss": "https://accounts.google.com", "sub": .string(Forge.randomText(4096))]
            }
            // Controls: 256 bytes is within the bound.
            try await add("control: jti of exactly 256 bytes", .accepted) { $0["jti"] = .string(Forge.randomText(256)) }
            try await add("control: subject sub of exactly 256 bytes", .accepted) { $0["events"] = subject(sub: Forge.randomText(256)) }
            try await forge.run(cases, class: "length bounds", healthCheck: false)

            // One oversized jti never makes a valid SET posted at the same moment fail (group commit).
            for round in 0..<4 {
                var oversized: [(String, String)] = []
                var valid: [(String, String)] = []
                for _ in 0..<4 {
                    let marker = Forge.marker()
                    oversized.append((try await harness.sign(forge.claims(marker) { $0["jti"] = .string(Forge.randomText(4096)) }), marker))
                    valid.append(try await forge.validSET())
                }
                let replies = try await withThrowingTaskGroup(of: (Bool, String, Harness.Reply).self) { group in
                    for (token, marker) in oversized {
                        group.addTask { (false, marker, try await Forge.postRaw(harness, Array(token.utf8))) }
                    }
                    for (token, marker) in valid {
                        group.addTask { (true, marker, try await Forge.postRaw(harness, Array(token.utf8))) }
                    }
                    return try await group.reduce(into: []) { $0.append($1) }
                }
                for (isValid, marker, reply) in replies {
                    if isValid {
                        #expect(reply.status == 202, "round \(round): a valid SET posted beside 4 KB jtis got \(reply.status) \(reply.body)")
                        #expect(try await forge.storedCount(marker) == 1, "round \(round): the valid SET was not stored")
                    } else {
                        #expect(reply.status == 400, "round \(round): 4 KB jti got \(reply.status) \(reply.body)")
                        #expect(reply.rejection?.err == SETRejection.Code.invalidRequest.rawValue, "round \(round): 4 KB jti: \(reply.body)")
                        #expect(try await forge.storedCount(marker) == 0, "round \(round): a 4 KB jti was stored")
                    }
                }
            }
            #expect(try await harness.call(.GET, "/healthz").status == 200, "length bounds: service down afterwards")
        }
    }

    // MARK: - subjects that name no user

    @Test("Subjects naming no Google user: accepted, recorded as a skip, no user changed")
    func subjectsNamingNoUser() async throws {
        var options = Harness.Options()
        options.worker = true
        try await Harness.with(options) { harness in
            let forge = try await Forge.make(harness)
            let google = "https://accounts.google.com"
            let hijacked = EventType.accountDisabled.rawValue
            /// What a case sends about the victim; `absent` are the subs that must not appear as users.
            struct SubjectCase {
                var name: String
                var claims: (_ victim: String, _ email: String) -> [String: JSONValue]
                var absent: [String] = []
            }
            func legacy(_ subject: JSONValue?, type: String = hijacked) -> [String: JSONValue] {
                var body: [String: JSONValue] = type == hijacked ? ["reason": "hijacking"] : [:]
                if let subject { body["subject"] = subject }
                return ["events": .object([type: .object(body)])]
            }
            let numericSub = String(Int.random(in: 100_000_000_000...999_999_999_999))
            let cases: [SubjectCase] = [
                .init(name: "subject issued by another issuer, victim's sub") { victim, _ in
                    legacy(["subject_type": "iss-sub", "iss": "https://evil.example", "sub": .string(victim)])
                },
                .init(name: "subject issued by the RISC transmitter itself, victim's sub") { victim, _ in
                    legacy(["subject_type": "iss-sub", "iss": .string(harness.transmitter.issuer), "sub": .string(victim)])
                },
                .init(name: "subject issuer that merely starts with Google's") { victim, _ in
                    legacy(["subject_type": "iss-sub", "iss": "https://accounts.google.com.evil.example", "sub": .string(victim)])
                },
                .init(name: "subject issuer Google's host over http") { victim, _ in
                    legacy(["subject_type": "iss-sub", "iss": "http://accounts.google.com", "sub": .string(victim)])
                },
                .init(name: "subject iss missing") { victim, _ in legacy(["subject_type": "iss-sub", "sub": .string(victim)]) },
                .init(name: "subject iss a number") { victim, _ in legacy(["subject_type": "iss-sub", "iss": 1, "sub": .string(victim)]) },
                .init(name: "id_token_claims from another issuer with the victim's sub and email") { victim, email in
                    legacy(["subject_type": "id_token_claims", "iss": "https://evil.example", "sub": .string(victim), "email": .string(email)])
                },
                .init(name: "tokens-revoked from another issuer") { victim, _ in
                    legacy(
                        ["subject_type": "iss-sub", "iss": "https://evil.example", "sub": .string(victim)], type: EventType.tokensRevoked.rawValue)
                },
                .init(name: "credential-change-required from another issuer") { victim, _ in
                    legacy(
                        ["subject_type": "iss-sub", "iss": "https://evil.example", "sub": .string(victim)],
                        type: EventType.accountCredentialChangeRequired.rawValue)
                },
                .init(name: "SSF sub_id from another issuer (CAEP session-revoked)") { victim, _ in
                    [
                        "events": .object([EventType.caepSessionRevoked.rawValue: ["event_timestamp": 1]]),
                        "sub_id": ["format": "iss_sub", "iss": "https://evil.example", "sub": .string(victim)],
                    ]
                },
                .init(name: "email-only subject naming the victim's email") { _, email in
                    legacy(["subject_type": "email", "email": .string(email)])
                },
                .init(name: "SSF email sub_id naming the victim's email") { _, email in
                    [
                        "events": .object([EventType.caepSessionRevoked.rawValue: ["event_timestamp": 1]]),
                        "sub_id": ["format": "email", "email": .string(email)],
                    ]
                },
                .init(
                    name: "empty sub from Google's issuer",
                    claims: { _, _ in
                        legacy(["subject_type": "iss-sub", "iss": .string(google), "sub": ""])
                    }, absent: [""]),
                .init(
                    name: "empty sub, id_token_claims",
                    claims: { _, _ in
                        legacy(["subject_type": "id_token_claims", "iss": .string(google), "sub": ""])
                    }, absent: [""]),
                .init(
                    name: "sub a number",
                    claims: { _, _ in
                        legacy(["subject_type": "iss-sub", "iss": .string(google), "sub": .number(Double(numericSub)!)])
                    }, absent: [numericSub]),
                .init(name: "sub null") { _, _ in legacy(["subject_type": "iss-sub", "iss": .string(google), "sub": .null]) },
                .init(name: "sub missing") { _, _ in legacy(["subject_type": "iss-sub", "iss": .string(google)]) },
                .init(name: "subject missing") { _, _ in legacy(nil) },
                .init(name: "subject not an object (the victim's sub as a string)") { victim, _ in legacy(.string(victim)) },
                .init(name: "subject_type unknown, victim's sub") { victim, _ in
                    legacy(["subject_type": "phone", "iss": .string(google), "sub": .string(victim)])
                },
            ]

            struct Victim {
                var sub: String
                var email: String
                var session: String
            }
            func victim() async throws -> Victim {
                let sub = "hostile-victim-\(UUID().uuidString.lowercased())"
                let email = "\(sub)@example.com"
                return Victim(sub: sub, email: email, session: try await harness.newSession(sub: sub))
            }
            func send(_ claims: [String: JSONValue]) async throws -> (String, Harness.Reply) {
                let marker = Forge.marker()
                let token = try await harness.sign(
                    forge.claims(marker) { c in
                        for (key, value) in claims { c[key] = value }
                    })
                return (marker, try await harness.post(token))
            }

            // Control: a subject from Google's sign-in issuer does reach the user, and the checks below see it.
            do {
                let control = try await victim()
                let (marker, reply) = try await send(legacy(["subject_type": "iss-sub", "iss": .string(google), "sub": .string(control.sub)]))
                #expect(reply.status == 202, "control: \(reply.body)")
                #expect(try await harness.waitUntilProcessed(jti: marker) == "done", "control")
                #expect(try await harness.actions(jti: marker).map(\.kind).contains("revoke_sessions"), "control")
                #expect(try await forge.liveSessions(control.sub) == 0, "control: the session was not revoked")
                #expect(try await forge.userState(control.sub)?.disabled == true, "control: sign-in was not disabled")
            }

            for testCase in cases {
                let target = try await victim()
                let (marker, reply) = try await send(testCase.claims(target.sub, target.email))
                #expect(reply.status == 202, "\(testCase.name): \(reply.status) \(reply.body)")
                #expect(try await forge.storedCount(marker) == 1, "\(testCase.name): an accepted SET was not stored")
                let status = try await harness.waitUntilProcessed(jti: marker)
                #expect(status == "done", "\(testCase.name): status \(status)")
                let actions = try await harness.actions(jti: marker)
                #expect(!actions.isEmpty && actions.allSatisfy { $0.kind == "skip" && $0.rows == 0 }, "\(testCase.name): actions \(actions)")
                #expect(try await forge.liveSessions(target.sub) == 1, "\(testCase.name): the victim's session was revoked")
                let state = try await forge.userState(target.sub)
                #expect(
                    state?.disabled == false && state?.review == false && state?.credentialChange == false,
                    "\(testCase.name): victim state \(String(describing: state))")
                let check = try await harness.checkSession(target.session)
                #expect(check.status == 200, "\(testCase.name): session check \(check.body)")
                #expect(check.json["flags"] == [], "\(testCase.name): flags \(check.body)")
                for sub in testCase.absent {
                    #expect(try await forge.userState(sub) == nil, "\(testCase.name): a user row was created for sub \"\(sub)\"")
                }
            }
            #expect(try await harness.call(.GET, "/healthz").status == 200, "subjects: service down afterwards")
        }
    }

    // MARK: - /tokensignin

    @Test("/tokensignin: forged and malformed ID tokens are 401 invalid_token and write nothing")
    func tokenSignIn() async throws {
        try await Harness.with { harness in
            let forge = try await Forge.make(harness)
            let kid = forge.kid
            struct SignInCase {
                var name: String
                var sub: String
                var email: String
                var send: () async throws -> Harness.Reply
            }
            var cases: [SignInCase] = []
            func identity() -> (String, String) {
                let sub = "hostile-signin-\(UUID().uuidString.lowercased())"
                return (sub, "\(sub)@example.com")
            }
            func claims(_ sub: String, _ email: String, _ change: (inout [String: JSONValue]) -> Void = { _ in }) -> JSONValue {
                let now = Date().timeIntervalSince1970.rounded(.down)
                var claims: [String: JSONValue] = [
                    "iss": .string(harness.transmitter.openIDIssuer), "aud": .string(Harness.audience), "azp": .string(Harness.audience),
                    "sub": .string(sub), "email": .string(email), "email_verified": true, "iat": .number(now), "exp": .number(now + 3600),
                ]
                change(&claims)
                return .object(claims)
            }
            func form(_ token: String) async throws -> Harness.Reply {
                try await harness.call(.POST, "/tokensignin", form: ["idtoken": token])
            }
            /// A case whose ID token is signed with the transmitter's current key after `change`.
            func signed(_ name: String, _ change: @escaping (inout [String: JSONValue]) -> Void) {
                let (sub, email) = identity()
                cases.append(
                    SignInCase(name: name, sub: sub, email: email) {
                        try await form(try await harness.sign(claims(sub, email, change), typ: "JWT"))
                    })
            }
            /// A case whose token is built from the header text and the claims, then signed by `sign`.
            func forged(_ name: String, header: String, sign: @escaping (String) throws -> String) {
                let (sub, email) = identity()
                cases.append(
                    SignInCase(name: name, sub: sub, email: email) {
                        let input = Forge.b64(header) + "." + Forge.b64(claims(sub, email).serialized)
                        return try await form(input + "." + (try sign(input)))
                    })
            }
            func raw(_ name: String, _ send: @escaping (String, String) async throws -> Harness.Reply) {
                let (sub, email) = identity()
                cases.append(SignInCase(name: name, sub: sub, email: email) { try await send(sub, email) })
            }
            let client = Client(base: harness.receiverURL)
            let pem = Array(forge.publicKeyPEM.utf8)

            raw("no body at all") { _, _ in try await client.send(.POST, "/tokensignin") }
            raw("empty form field") { _, _ in try await form("") }
            raw("form without an idtoken field, the token under another name") { sub, email in
                let token = try await harness.sign(claims(sub, email), typ: "JWT")
                return try await harness.call(.POST, "/tokensignin", form: ["id_token": token])
            }
            raw("JSON with the token under another name") { sub, email in
                let token = try await harness.sign(claims(sub, email), typ: "JWT")
                return try await harness.call(.POST, "/tokensignin", json: ["id_token": .string(token)])
            }
            raw("JSON idToken a number") { _, _ in try await harness.call(.POST, "/tokensignin", json: ["idToken": 123]) }
            raw("JSON idToken an array holding a valid token") { sub, email in
                let token = try await harness.sign(claims(sub, email), typ: "JWT")
                return try await harness.call(.POST, "/tokensignin", json: ["idToken": [.string(token)]])
            }
            raw("not a JWS") { _, _ in try await form("garbage") }
            raw("two segments") { sub, email in
                let token = try await harness.sign(claims(sub, email), typ: "JWT")
                return try await form(token.split(separator: ".").prefix(2).joined(separator: "."))
            }
            raw("empty signature segment (RS256)") { sub, email in
                let token = try await harness.sign(claims(sub, email), typ: "JWT")
                return try await form(token.split(separator: ".").prefix(2).joined(separator: ".") + ".")
            }
            forged("alg none, empty signature", header: #"{"alg":"none","kid":"\#(kid)","typ":"JWT"}"#) { _ in "" }
            forged("alg none, with a signature", header: #"{"alg":"none","kid":"\#(kid)","typ":"JWT"}"#) { _ in "c2lnbmF0dXJl" }
            forged("HS256 keyed with the public key (PEM)", header: #"{"alg":"HS256","kid":"\#(kid)","typ":"JWT"}"#) { input in
                Forge.b64(Array(HMAC<SHA256>.authenticationCode(for: Array(input.utf8), using: SymmetricKey(data: pem))))
            }
            forged("RS384 with the provider's own key", header: #"{"alg":"RS384","kid":"\#(kid)","typ":"JWT"}"#) { input in
                Forge.b64(try forge.rs384.sign(Array(input.utf8)))
            }
            forged("crit header", header: #"{"alg":"RS256","kid":"\#(kid)","typ":"JWT","crit":["exp"],"exp":1}"#) { input in
                Forge.b64(try forge.rs256.sign(Array(input.utf8)))
            }
            forged("kid missing", header: #"{"alg":"RS256","typ":"JWT"}"#) { input in Forge.b64(try forge.rs256.sign(Array(input.utf8))) }
            signed("wrong aud") { $0["aud"] = "someone-else.apps.googleusercontent.com" }
            signed("aud an array of other clients") { $0["aud"] = ["x", "y"] }
            signed("aud an array of non-strings") { $0["aud"] = [1, true] }
            signed("aud missing") { $0["aud"] = nil }
            signed("wrong iss") { $0["iss"] = "https://evil.example" }
            signed("iss Google's real one (not this provider's)") { $0["iss"] = "https://accounts.google.com" }
            signed("iss missing") { $0["iss"] = nil }
            signed("expired 2 minutes ago (beyond the 60 s leeway)") { $0["exp"] = .number(Date().timeIntervalSince1970.rounded(.down) - 120) }
            signed("exp missing") { $0["exp"] = nil }
            signed("exp a numeric string") { $0["exp"] = .string(String(Int(Date().timeIntervalSince1970) + 3600)) }
            signed("sub missing") { $0["sub"] = nil }
            signed("sub empty") { $0["sub"] = "" }
            signed("sub null") { $0["sub"] = .null }
            do {
                let (_, email) = identity()
                let numeric = String(Int.random(in: 100_000_000_000...999_999_999_999))
                cases.append(
                    SignInCase(name: "sub a number", sub: numeric, email: email) {
                        try await form(try await harness.sign(claims(numeric, email) { $0["sub"] = .number(Double(numeric)!) }, typ: "JWT"))
                    })
            }
            for length in [257, 300, 4096] {
                let (_, email) = identity()
                let sub = "big-" + Forge.randomText(length - 4)
                cases.append(
                    SignInCase(name: "sub of \(length) bytes", sub: sub, email: email) {
                        try await form(try await harness.sign(claims(sub, email), typ: "JWT"))
                    })
            }
            raw("unknown kid") { sub, email in try await form(try await harness.sign(claims(sub, email), typ: "JWT", kid: "no-such-kid")) }
            raw("bad signature (another token's)") { sub, email in
                let token = try await harness.sign(claims(sub, email), typ: "JWT")
                let other = try await harness.sign(claims("someone-else", "x@example.com"), typ: "JWT")
                return try await form(token.split(separator: ".").prefix(2).joined(separator: ".") + "." + other.split(separator: ".")[2])
            }
            raw("signed by an impostor under the real kid") { sub, email in
                let impostor = try await DevTransmitter(settings: .init(port: 0, audience: Harness.audience), logger: Harness.logger)
                return try await form(try await impostor.sign(claims: claims(sub, email), typ: "JWT", kid: kid))
            }
            raw("duplicate sub members (victim's first)") { sub, email in
                let text = claims(sub, email).serialized
                let payload = "{\"sub\":\"\(sub)\"," + text.dropFirst()
                return try await form(try forge.signRaw(header: #"{"alg":"RS256","kid":"\#(kid)","typ":"JWT"}"#, payload: Array(payload.utf8)))
            }
            raw("NUL in the email") { sub, email in
                let payload = claims(sub, email).serialized.replacingOccurrences(of: email, with: email + "\\u0000")
                return try await form(try forge.signRaw(header: #"{"alg":"RS256","kid":"\#(kid)","typ":"JWT"}"#, payload: Array(payload.utf8)))
            }
            raw("a SET posted as an ID token") { sub, _ in try await form(try await harness.makeSET("sessions-revoked", sub: sub)) }
            raw("a SET with sub and exp added, posted as an ID token") { sub, email in
                let set = harness.claims { claims in
                    claims["sub"] = .string(sub)
                    claims["email"] = .string(email)
                    claims["exp"] = .number(Date().timeIntervalSince1970.rounded(.down) + 3600)
                }
                return try await form(try await harness.sign(set))
            }

            // Control: a well-formed token signs in, and the checks below see its user and session.
            do {
                let (sub, email) = identity()
                let reply = try await form(try await harness.sign(claims(sub, email), typ: "JWT"))
                #expect(reply.status == 200, "control: \(reply.body)")
                #expect(try await forge.users(sub: sub, email: email) == 1, "control: no user row")
                #expect(try await forge.sessions(sub: sub) == 1, "control: no session")
            }
            for testCase in cases {
                let reply = try await testCase.send()
                #expect(reply.status == 401, "\(testCase.name): \(reply.status) \(reply.body)")
                #expect(reply.error == "invalid_token", "\(testCase.name): \(reply.body)")
                #expect(reply.json["session_token"] == nil, "\(testCase.name): a session token was issued")
                #expect(try await forge.users(sub: testCase.sub, email: testCase.email) == 0, "\(testCase.name): a user row was written")
                #expect(try await forge.sessions(sub: testCase.sub) == 0, "\(testCase.name): a session was written")
            }
            #expect(try await harness.call(.GET, "/healthz").status == 200, "tokensignin: service down afterwards")
        }
    }
}

// MARK: - helpers

private enum Expect: Sendable, CustomStringConvertible {
    case rejected(SETRejection.Code)
    case tooLarge
    /// Controls only: a well-formed input the service must take.
    case accepted

    var description: String {
        switch self {
        case .rejected(let code): "400 \(code.rawValue)"
        case .tooLarge: "413"
        case .accepted: "202"
        }
    }
}

private struct HostileCase {
    var name: String
    var body: [UInt8]
    var expect: Expect
    /// jti / `hostile_case` values that must not be stored (for a control: that must be).
    var markers: [String]
    var chunked = false

    init(_ name: String, _ body: [UInt8], _ expect: Expect, markers: [String]) {
        self.name = name
        self.body = body
        self.expect = expect
        self.markers = markers
    }
}

/// Builds hostile tokens with the harness transmitter's real signing key (or an attacker's), and checks answers.
private struct Forge {
    let harness: Harness
    let kid: String
    let rs256: any JWTAlgorithm
    let rs384: any JWTAlgorithm
    let ps256: any JWTAlgorithm
    let publicKeyPEM: String
    let modulus: [UInt8]

    /// A case whose claims are well-formed ones changed by `change`, signed by the transmitter, with a fresh marker.
    func signedCase(_ name: String, _ expect: Expect, _ change: (inout [String: JSONValue]) -> Void) async throws -> HostileCase {
        let marker = Forge.marker()
        let token = try await harness.sign(claims(marker, change))
        return HostileCase(name, Array(token.utf8), expect, markers: [marker])
    }

    static func make(_ harness: Harness) async throws -> Forge {
        let key = harness.transmitter.keys.current
        return Forge(
            harness: harness, kid: key.kid,
            rs256: try await algorithm(rsa: key.privateKey, .sha256),
            rs384: try await algorithm(rsa: key.privateKey, .sha384),
            ps256: try await algorithm(pss: key.privateKey),
            publicKeyPEM: key.privateKey.publicKey.pemRepresentation,
            modulus: Array(try key.privateKey.publicKey.getKeyPrimitives().modulus))
    }

    static func algorithm(rsa key: some RSAKey, _ digest: DigestAlgorithm) async throws -> any JWTAlgorithm {
        let collection = JWTKeyCollection()
        await collection.add(rsa: key, digestAlgorithm: digest, kid: "forge")
        return try await collection.getKey(for: "forge")
    }

    static func algorithm(pss key: some RSAKey) async throws -> any JWTAlgorithm {
        let collection = JWTKeyCollection()
        await collection.add(pss: key, digestAlgorithm: .sha256, kid: "forge")
        return try await collection.getKey(for: "forge")
    }

    static func es256() async throws -> any JWTAlgorithm {
        let collection = JWTKeyCollection()
        await collection.add(ecdsa: ES256PrivateKey(), kid: "forge")
        return try await collection.getKey(for: "forge")
    }

    static func marker() -> String { "hostile-" + UUID().uuidString.lowercased() }

    static func randomText(_ count: Int) -> String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
        var generator = SystemRandomNumberGenerator()
        return String((0..<count).map { _ in alphabet[Int.random(in: 0..<alphabet.count, using: &generator)] })
    }

    static func b64(_ text: String) -> String { Base64URL.encode(Array(text.utf8)) }
    static func b64(_ bytes: [UInt8]) -> String { Base64URL.encode(bytes) }

    static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")

    static func standardAlphabet(_ segment: String) -> String {
        segment.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
    }

    /// The same bytes with the unused low bits of the last character set (length 4n+2 or 4n+3).
    static func nonCanonical(_ segment: String) -> String {
        precondition([2, 3].contains(segment.count % 4))
        let last = alphabet.firstIndex(of: segment.last!)!
        precondition(last % 4 == 0)
        return String(segment.dropLast()) + String(alphabet[last + 1])
    }

    func header(alg: String = "RS256") -> String {
        #"{"alg":"\#(alg)","kid":"\#(kid)","typ":"secevent+jwt"}"#
    }

    /// Well-formed SET claims whose jti (and `hostile_case` claim) is `marker`, then `change`d.
    func claims(_ marker: String, _ change: (inout [String: JSONValue]) -> Void = { _ in }) -> JSONValue {
        harness.claims { claims in
            claims["jti"] = .string(marker)
            claims["hostile_case"] = .string(marker)
            change(&claims)
        }
    }

    func claimsText(_ marker: String, _ change: (inout [String: JSONValue]) -> Void = { _ in }) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: try! encoder.encode(claims(marker, change)), as: UTF8.self)
    }

    func validSET() async throws -> (String, String) {
        let marker = Self.marker()
        return (try await harness.sign(claims(marker)), marker)
    }

    /// Already-encoded segments, signed (RS256, the real key) exactly as they stand.
    func signEncoded(_ header: String, _ payload: String) throws -> String {
        let input = header + "." + payload
        return input + "." + Self.b64(try rs256.sign(Array(input.utf8)))
    }

    func signRaw(header: String, payload: [UInt8]) throws -> String {
        try signEncoded(Self.b64(header), Self.b64(payload))
    }

    /// Encoded header and payload segments for `marker`, the header padded until `accept` holds for it.
    func segments(headerWhere accept: (String) -> Bool, _ marker: String) -> (String, String) {
        let payload = Self.b64(claimsText(marker))
        for padding in 0..<200 {
            let header = Self.b64(#"{"alg":"RS256","kid":"\#(kid)","typ":"secevent+jwt","x":"\#(String(repeating: "?", count: padding))"}"#)
            if accept(header) { return (header, payload) }
        }
        fatalError("no header satisfies the condition")
    }

    func segments(payloadWhere accept: (String) -> Bool, _ marker: String) -> (String, String) {
        for padding in 0..<200 {
            let payload = Self.b64(claimsText(marker) { $0["x"] = .string(String(repeating: "?", count: padding)) })
            if accept(payload) { return (Self.b64(header()), payload) }
        }
        fatalError("no payload satisfies the condition")
    }

    /// Rows in risc_events for a case, whatever their issuer.
    func storedCount(_ marker: String) async throws -> Int {
        var count = 0
        for try await value in try await harness.database.query(
            "SELECT count(*) FROM risc_events WHERE jti = \(marker) OR claims->>'hostile_case' = \(marker)"
        ).decode(Int.self) {
            count = value
        }
        return count
    }

    func users(sub: String, email: String) async throws -> Int {
        var count = 0
        for try await value in try await harness.database.query(
            "SELECT count(*) FROM risc_users WHERE sub = \(sub) OR email = \(email)"
        ).decode(Int.self) {
            count = value
        }
        return count
    }

    func sessions(sub: String) async throws -> Int {
        var count = 0
        for try await value in try await harness.database.query("SELECT count(*) FROM risc_sessions WHERE sub = \(sub)").decode(Int.self) {
            count = value
        }
        return count
    }

    func liveSessions(_ sub: String) async throws -> Int {
        var count = 0
        for try await value in try await harness.database.query(
            "SELECT count(*) FROM risc_sessions WHERE sub = \(sub) AND revoked_at IS NULL"
        ).decode(Int.self) {
            count = value
        }
        return count
    }

    struct UserState: Equatable, CustomStringConvertible {
        var disabled: Bool
        var review: Bool
        var credentialChange: Bool
        var description: String { "disabled=\(disabled) review=\(review) credential_change=\(credentialChange)" }
    }

    func userState(_ sub: String) async throws -> UserState? {
        for try await (disabled, review, credential) in try await harness.database.query(
            "SELECT sign_in_disabled, review_required, credential_change_required FROM risc_users WHERE sub = \(sub)"
        ).decode((Bool, Bool, Bool).self) {
            return UserState(disabled: disabled, review: review, credentialChange: credential)
        }
        return nil
    }

    static func postRaw(_ harness: Harness, _ body: [UInt8], chunked: Bool = false) async throws -> Harness.Reply {
        var request = HTTPClientRequest(url: harness.eventsURL)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/secevent+jwt")
        request.headers.add(name: "Accept", value: "application/json")
        if chunked {
            let chunks = stride(from: 0, to: body.count, by: 8192).map { ByteBuffer(bytes: body[$0..<min($0 + 8192, body.count)]) }
            let stream = AsyncStream<ByteBuffer> { continuation in
                for chunk in chunks { continuation.yield(chunk) }
                continuation.finish()
            }
            request.body = .stream(stream, length: .unknown)
        } else {
            request.body = .bytes(ByteBuffer(bytes: body))
        }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        let data = try await response.body.collect(upTo: 1 << 20)
        return Harness.Reply(status: Int(response.status.code), headers: response.headers, body: String(buffer: data))
    }

    /// Posts every case, checks its answer and that nothing was stored, then that the service is still up.
    func run(_ cases: [HostileCase], class name: String, healthCheck: Bool = true) async throws {
        #expect(Set(cases.map(\.name)).count == cases.count, "\(name): duplicate case names")
        // Control: a well-formed SET is accepted and the stored check finds it.
        let (control, controlMarker) = try await validSET()
        let controlReply = try await harness.post(control)
        #expect(controlReply.status == 202, "\(name) control: \(controlReply.body)")
        #expect(try await storedCount(controlMarker) == 1, "\(name) control: the stored check cannot see the row")

        for testCase in cases {
            let label = "\(name) / \(testCase.name) (expected \(testCase.expect))"
            let reply: Harness.Reply
            do {
                reply = try await Self.postRaw(harness, testCase.body, chunked: testCase.chunked)
            } catch {
                Issue.record("\(label): the request failed: \(error)")
                continue
            }
            switch testCase.expect {
            case .tooLarge:
                #expect(reply.status == 413, "\(label): got \(reply.status) \(reply.body)")
            case .accepted:
                #expect(reply.status == 202, "\(label): got \(reply.status) \(reply.body)")
            case .rejected(let code):
                #expect(reply.status == 400, "\(label): got \(reply.status) \(reply.body)")
                #expect(reply.headers["Content-Type"].first == "application/json", "\(label): Content-Type \(reply.headers["Content-Type"])")
                if let rejection = reply.rejection {
                    #expect(rejection.err == code.rawValue, "\(label): got \(rejection.err): \(rejection.description)")
                    // The description never echoes what was expected.
                    #expect(!rejection.description.contains(harness.transmitter.issuer), "\(label): description echoes the issuer")
                    #expect(!rejection.description.contains(Harness.audience), "\(label): description echoes the audience")
                    #expect(!rejection.description.contains(kid), "\(label): description echoes the kid")
                } else {
                    Issue.record("\(label): not an RFC 8935 error body: \(reply.status) \(reply.body)")
                }
            }
            for marker in testCase.markers {
                let stored = try await storedCount(marker)
                if case .accepted = testCase.expect {
                    #expect(stored == 1, "\(label): not stored")
                } else {
                    #expect(stored == 0, "\(label): a refused input was stored")
                }
            }
        }
        if healthCheck {
            #expect(try await harness.call(.GET, "/healthz").status == 200, "\(name): service down afterwards")
        }
    }
}
