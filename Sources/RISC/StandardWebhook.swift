import Crypto
import Foundation

/// Standard Webhooks (standardwebhooks.com), as notifications use it: a `whsec_` secret, and the `webhook-id`,
/// `webhook-timestamp` and `webhook-signature` headers, so an app can check a delivery with an existing library.
public enum StandardWebhook {
    public static let secretPrefix = "whsec_"
    /// The key sizes Standard Webhooks allows (24 to 64 bytes); a generated secret has 32.
    public static let keySizes = 24...64

    /// A new random secret: `whsec_` and 32 random bytes in base64.
    public static func generateSecret() -> String {
        var generator = SystemRandomNumberGenerator()
        return secretPrefix + Data((0..<32).map { _ in UInt8.random(in: .min ... .max, using: &generator) }).base64EncodedString()
    }

    /// The key of a `whsec_` secret, or nil when it is not one (wrong prefix, not base64, a key of the wrong size).
    public static func key(secret: String) -> SymmetricKey? {
        guard secret.hasPrefix(secretPrefix), let bytes = Data(base64Encoded: String(secret.dropFirst(secretPrefix.count))),
            keySizes.contains(bytes.count)
        else { return nil }
        return SymmetricKey(data: bytes)
    }

    /// `v1,<base64 HMAC-SHA256 of "id.timestamp.body">`.
    public static func signature(id: String, timestamp: Int64, body: some DataProtocol, key: SymmetricKey) -> String {
        var hmac = HMAC<SHA256>(key: key)
        hmac.update(data: Data("\(id).\(timestamp).".utf8))
        hmac.update(data: body)
        return "v1," + Data(hmac.finalize()).base64EncodedString()
    }

    /// The three headers of one delivery attempt: one signature per key, space-separated (`v1,<new> v1,<old>`
    /// while a rotated-out secret still signs), as Standard Webhooks allows.
    public static func headers(id: String, timestamp: Int64, body: some DataProtocol, keys: [SymmetricKey]) -> [(String, String)] {
        [
            ("webhook-id", id), ("webhook-timestamp", String(timestamp)),
            ("webhook-signature", keys.map { signature(id: id, timestamp: timestamp, body: body, key: $0) }.joined(separator: " ")),
        ]
    }

    public enum Rejection: Error, Equatable, Sendable {
        case missingHeader(String)
        /// Older or newer than the tolerance: a replayed or held-back delivery.
        case timestampOutOfRange
        case badSignature
    }

    /// Checks a delivery as a receiver would: the timestamp within `tolerance` seconds of `now`, and one of the
    /// space-separated `v1,` signatures matching (compared in constant time). For the development sink and tests.
    public static func verify(
        id: String?, timestamp: String?, signatures: String?, body: some DataProtocol, key: SymmetricKey, now: Date = Date(),
        tolerance: Double = 300
    ) throws(Rejection) {
        guard let id else { throw .missingHeader("webhook-id") }
        guard let timestamp else { throw .missingHeader("webhook-timestamp") }
        guard let signatures else { throw .missingHeader("webhook-signature") }
        guard let seconds = Int64(timestamp), abs(Double(seconds) - now.timeIntervalSince1970) <= tolerance else {
            throw .timestampOutOfRange
        }
        let expected = signature(id: id, timestamp: seconds, body: body, key: key)
        let matched = signatures.split(separator: " ").contains { SecretComparison.equal(String($0), expected) }
        guard matched else { throw .badSignature }
    }
}
