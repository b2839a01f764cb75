import Crypto
import Foundation

/// Encrypts refresh tokens at rest with AES-GCM. The grant's id is authenticated data, so a
/// ciphertext copied onto another grant's row does not decrypt. Old keys stay readable for rotation.
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

    public func seal(_ secret: String, grantID: UUID) throws -> Data {
        let sealed = try AES.GCM.seal(Data(secret.utf8), using: keys[currentKeyID]!, authenticating: Self.aad(grantID))
        return sealed.combined!
    }

    public func open(_ combined: Data, keyID: String, grantID: UUID) throws -> String {
        guard let key = keys[keyID] else { throw Failure(description: "vault key \(keyID) is not configured") }
        let box = try AES.GCM.SealedBox(combined: combined)
        let plaintext = try AES.GCM.open(box, using: key, authenticating: Self.aad(grantID))
        return String(decoding: plaintext, as: UTF8.self)
    }

    static func aad(_ grantID: UUID) -> Data {
        Data("risc-grant:\(grantID.uuidString.lowercased())".utf8)
    }
}
