import Crypto
import Foundation

/// Encrypts refresh tokens, subscribers' secrets and transmitters' credentials at rest with AES-GCM. The row's id is authenticated data, so a
/// ciphertext copied onto another row does not decrypt. Old keys stay readable for rotation.
public struct VaultCipher: Sendable {
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public let description: String
    }

    public let currentKeyID: String
    private let keys: [String: SymmetricKey]

    /// `current` seals; `previous` only open what was sealed before a rotation.
    public init(current: SymmetricKey, previous: [SymmetricKey] = []) {
        currentKeyID = Self.keyID(current)
        var keys: [String: SymmetricKey] = [:]
        for key in previous { keys[Self.keyID(key)] = key }
        keys[currentKeyID] = current
        self.keys = keys
    }

    /// Parses a base64 key of exactly 32 bytes (AES-256).
    public static func key(base64 value: String) -> SymmetricKey? {
        guard let data = Data(base64Encoded: value), data.count == 32 else { return nil }
        return SymmetricKey(data: data)
    }

    /// A short public name for a key, stored beside each ciphertext: the first 8 bytes of SHA-256 of the key.
    public static func keyID(_ key: SymmetricKey) -> String {
        let digest = key.withUnsafeBytes { SHA256.hash(data: Data($0)) }
        return digest.prefix(8).map { String(format: "%02x", $0) }.joined()
    }

    /// The keys of a configuration: nil without RISC_VAULT_KEY (or with one that is not a key; configuration
    /// checks refuse that first).
    public static func from(key: String?, previous: [String]) -> VaultCipher? {
        guard let current = key.flatMap(Self.key(base64:)) else { return nil }
        return VaultCipher(current: current, previous: previous.compactMap(Self.key(base64:)))
    }

    public func seal(_ secret: String, grantID: UUID) throws -> Data {
        try seal(secret, context: "risc-grant:\(grantID.uuidString.lowercased())")
    }

    public func open(_ combined: Data, keyID: String, grantID: UUID) throws -> String {
        try open(combined, keyID: keyID, context: "risc-grant:\(grantID.uuidString.lowercased())")
    }

    public func seal(_ secret: String, subscriberID: Int64) throws -> Data {
        try seal(secret, context: "risc-subscriber:\(subscriberID)")
    }

    public func open(_ combined: Data, keyID: String, subscriberID: Int64) throws -> String {
        try open(combined, keyID: keyID, context: "risc-subscriber:\(subscriberID)")
    }

    /// A transmitter's client secret, private key or bearer token, bound to its name.
    public func seal(_ secret: String, transmitter: TransmitterName) throws -> Data {
        try seal(secret, context: "risc-transmitter:\(transmitter.value)")
    }

    public func open(_ combined: Data, keyID: String, transmitter: TransmitterName) throws -> String {
        try open(combined, keyID: keyID, context: "risc-transmitter:\(transmitter.value)")
    }

    private func seal(_ secret: String, context: String) throws -> Data {
        try AES.GCM.seal(Data(secret.utf8), using: keys[currentKeyID]!, authenticating: Data(context.utf8)).combined!
    }

    private func open(_ combined: Data, keyID: String, context: String) throws -> String {
        guard let key = keys[keyID] else { throw Failure(description: "vault key \(keyID) is not configured") }
        let box = try AES.GCM.SealedBox(combined: combined)
        return String(decoding: try AES.GCM.open(box, using: key, authenticating: Data(context.utf8)), as: UTF8.self)
    }
}
