// What receiving a SET costs before its signature is checked: the JWS split, and the payload's JSON parsed and
// serialized again for storage (`scripts/bench-parse.sh`). Each figure is also given as a ratio to Foundation's
// JSONSerialization reading the same payload in the same run, as a machine's speed varies from one run to the next.
import Foundation
import RISC

/// A development transmitter's sessions-revoked SET payload, as jwt-kit writes it: Foundation's encoder writes
/// every "/" as "\/".
let escaped = #"""
    {"aud":"risc-receiver-dev.apps.example","events":{"https:\/\/schemas.openid.net\/secevent\/risc\/event-type\/sessions-revoked":{"subject":{"iss":"https:\/\/accounts.google.com","sub":"bench-user-0001234","subject_type":"iss-sub"}}},"iat":1764340000,"iss":"https:\/\/risc-dev.example\/","jti":"6f1d2c3b-4a5e-4f60-8a7b-9c0d1e2f3a4b"}
    """#
/// The same payload without the escapes, as most encoders write it.
let plain = escaped.replacingOccurrences(of: #"\/"#, with: "/")
let header = #"{"alg":"RS256","kid":"dev-key-1","typ":"secevent+jwt"}"#

func base64URL(_ data: Data) -> String {
    data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        .replacingOccurrences(of: "=", with: "")
}
let token = [Data(header.utf8), Data(escaped.utf8), Data((0..<256).map { UInt8($0) })].map(base64URL).joined(separator: ".")

/// Calls per round: the first argument, else 50,000.
let calls = CommandLine.arguments.dropFirst().first.flatMap { Int($0) }.map { max($0, 1) } ?? 50_000

/// The best of 7 rounds, in nanoseconds per call.
func measure(calls: Int = calls, _ body: () -> Int) -> Double {
    var best = Double.infinity
    var checksum = 0
    for _ in 0..<7 {
        let start = ContinuousClock.now
        for _ in 0..<calls { checksum &+= body() }
        let elapsed = (ContinuousClock.now - start) / calls
        best = min(best, Double(elapsed.components.attoseconds) / 1e9 + Double(elapsed.components.seconds) * 1e9)
    }
    precondition(checksum != 0)
    return best
}

let escapedData = Data(escaped.utf8)
let plainData = Data(plain.utf8)
guard (try? JSONValue.parse(escapedData)) == (try? JSONValue.parse(plainData)) else { fatalError("the payloads differ") }
let value = try JSONValue.parse(plainData)

print("SET parsing (release build; best of 7 rounds of \(calls) calls each, one thread)")
// The baseline, measured in this run: Foundation's JSONSerialization reading the same payload (no escapes).
let baseline = measure { ((try? JSONSerialization.jsonObject(with: plainData)) as? [String: Any])?.count ?? 0 }
func padded(_ label: String) -> String { "  " + label.padding(toLength: 46, withPad: " ", startingAt: 0) }
print(padded("baseline: Foundation's JSONSerialization parse") + String(format: "%6.0f ns", baseline))
let rows: [(String, () -> Int)] = [
    ("parse, slashes escaped (as jwt-kit writes)", { (try? JSONValue.parse(escapedData))?.objectValue?.count ?? 0 }),
    ("parse, no escapes", { (try? JSONValue.parse(plainData))?.objectValue?.count ?? 0 }),
    ("serialize, sorted keys", { value.serialized.utf8.count }),
    ("compact JWS: split, 3 segments decoded", { (try? CompactJWS(token))?.payload.count ?? 0 }),
]
for (label, body) in rows {
    let nanoseconds = measure(body)
    print(padded(label) + String(format: "%6.0f ns, %.2f x the baseline", nanoseconds, nanoseconds / baseline))
}
// A hostile payload, read before any signature is checked: one string of `\/` escapes, as long as the largest body
// (64 KiB of base64url) can carry. Its cost must grow with its length, not with its square.
let hostile = Array(("\"" + String(repeating: #"\/"#, count: 24_575) + "\"").utf8)
let hostileNanoseconds = measure(calls: max(calls / 1000, 1)) { (try? JSONValue.parse(hostile))?.stringValue?.utf8.count ?? 0 }
print(
    padded("parse, a 48 KiB string of escapes")
        + String(format: "%6.0f us, %.0f x the baseline", hostileNanoseconds / 1000, hostileNanoseconds / baseline))
