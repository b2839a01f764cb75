import Foundation
import JWTKit
import RISC

/// The verification keys of one JWKS, indexed by `kid` and algorithm.
///
/// Each (kid, alg) pair gets a `JWTKeyCollection` holding that single key, with `alg` pinned. This sidesteps
/// three jwt-kit 5.8 traps at once: an unknown `kid` cannot fall back to a default key, a JWK without `alg`
/// cannot adopt whatever algorithm the first token claims, and one unsupported key cannot poison the set.
struct KeySet: Sendable {
    private(set) var collections: [String: [String: JWTKeyCollection]] = [:]

    var kids: Set<String> { Set(collections.keys) }
    var isEmpty: Bool { collections.isEmpty }

    func collection(kid: String, alg: String) -> JWTKeyCollection? {
        collections[kid]?[alg]
    }

    func knows(kid: String) -> Bool { collections[kid] != nil }

    /// Which algorithms a key type can verify.
    private static func algorithms(for jwk: JWK, curve: String?) -> [String] {
        switch jwk.keyType {
        case .rsa: ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512"]
        case .ecdsa:
            switch curve {
            case "P-256": ["ES256"]
            case "P-384": ["ES384"]
            case "P-521": ["ES512"]
            default: []
            }
        case .octetKeyPair: ["EdDSA"]
        default: []
        }
    }

    /// Builds the set from a JWKS document, keeping only signature keys with a `kid` whose algorithm is allowed.
    static func build(jwksJSON: Data, allowedAlgorithms: Set<String>) async throws -> KeySet {
        struct Document: Decodable { var keys: [JSONValue] }
        let document = try JSONDecoder().decode(Document.self, from: jwksJSON)
        var set = KeySet()
        for keyJSON in document.keys {
            guard let object = keyJSON.objectValue else { continue }
            if let use = object["use"]?.stringValue, use != "sig" { continue }
            guard let kid = object["kid"]?.stringValue, !kid.isEmpty,
                let encoded = try? JSONEncoder().encode(keyJSON),
                let jwk = try? JSONDecoder().decode(JWK.self, from: encoded)
            else { continue }
            let declared = object["alg"]?.stringValue
            for alg in algorithms(for: jwk, curve: object["crv"]?.stringValue)
            where allowedAlgorithms.contains(alg) && (declared == nil || declared == alg) {
                var pinned = jwk
                pinned.algorithm = JWK.Algorithm(rawValue: alg)
                let collection = JWTKeyCollection()
                do {
                    try await collection.add(jwk: pinned)
                } catch {
                    continue
                }
                set.collections[kid, default: [:]][alg] = collection
            }
        }
        return set
    }
}
