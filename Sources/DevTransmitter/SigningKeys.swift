import Crypto
import CryptoExtras
import Foundation
import JWTKit
import RISC
import Synchronization

/// The transmitter's RSA signing keys. The newest signs; older ones stay published until retired,
/// as a real transmitter does during rotation.
final class SigningKeys: Sendable {
    struct Key: Sendable {
        let kid: String
        let privateKey: JWTKit.Insecure.RSA.PrivateKey
        let backing: _RSA.Signing.PrivateKey
        let collection: JWTKeyCollection
    }

    private let keys = Mutex<[Key]>([])

    init() async throws {
        _ = try await rotate(retireOld: false)
    }

    var current: Key { keys.withLock { $0.last! } }

    /// Makes a new signing key; with `retireOld`, stops publishing the previous ones.
    @discardableResult
    func rotate(retireOld: Bool) async throws -> String {
        let backing = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let privateKey = try JWTKit.Insecure.RSA.PrivateKey(backing: backing)
        let kid = "dev-" + UUID().uuidString.lowercased().prefix(8)
        let collection = JWTKeyCollection()
        await collection.add(rsa: privateKey, digestAlgorithm: .sha256, kid: JWKIdentifier(string: kid))
        let key = Key(kid: kid, privateKey: privateKey, backing: backing, collection: collection)
        keys.withLock { keys in
            if retireOld { keys.removeAll() }
            keys.append(key)
        }
        return kid
    }

    /// The published JWKS.
    func jwks() throws -> JSONValue {
        let published = keys.withLock { $0 }
        return .object([
            "keys": .array(
                try published.map { key in
                    let primitives = try key.privateKey.publicKey.getKeyPrimitives()
                    return .object([
                        "kty": .string("RSA"), "alg": .string("RS256"), "use": .string("sig"), "kid": .string(key.kid),
                        "n": .string(Base64URL.encode(primitives.modulus)),
                        "e": .string(Base64URL.encode(primitives.publicExponent)),
                    ])
                })
        ])
    }

    /// Signs arbitrary claims with the current key. `headerOverrides` may set `typ` or replace `kid`.
    func sign(claims: JSONValue, typ: String? = "secevent+jwt", kid kidOverride: String? = nil) async throws -> String {
        let key = current
        var header = JWTHeader()
        header.typ = typ
        header.kid = kidOverride ?? key.kid
        // jwt-kit replaces the header's kid with the signer's when one is named; for an override, name none and
        // let the key's own collection (which holds only this key) sign under the header's kid.
        return try await key.collection.sign(
            RawClaims(value: claims), kid: kidOverride == nil ? JWKIdentifier(string: key.kid) : nil, header: header)
    }
}

extension SigningKeys {
    /// Signs a payload given as JSON text, byte for byte (RS256 with the current key): for claims a JSON model
    /// cannot carry exactly, such as a 30-digit number.
    func sign(payloadJSON: String, typ: String = "secevent+jwt") throws -> String {
        let key = current
        let header: JSONValue = ["alg": "RS256", "kid": .string(key.kid), "typ": .string(typ)]
        let signingInput = Base64URL.encode(Data(header.serialized.utf8)) + "." + Base64URL.encode(Data(payloadJSON.utf8))
        let signature = try key.backing.signature(for: Data(signingInput.utf8), padding: .insecurePKCS1v1_5)
        return signingInput + "." + Base64URL.encode(signature.rawRepresentation)
    }
}

/// Any JSON object as a JWT payload.
struct RawClaims: JWTPayload {
    var value: JSONValue
    init(value: JSONValue) { self.value = value }
    init(from decoder: any Decoder) throws { value = try JSONValue(from: decoder) }
    func encode(to encoder: any Encoder) throws { try value.encode(to: encoder) }
    func verify(using algorithm: some JWTAlgorithm) async throws {}
}
