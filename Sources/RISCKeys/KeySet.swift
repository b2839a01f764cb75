import Foundation
import JWTKit
import RISC

/// The verification keys of one JWKS, indexed by `kid` and algorithm.
///
/// Each (kid, alg) pair gets jwt-kit's verifier for that single key, with `alg` pinned. This sidesteps
/// three jwt-kit 5.8 traps at once: an unknown `kid` cannot fall back to a default key, a JWK without `alg`
/// cannot adopt whatever algorithm the first token claims, and one unsupported key cannot poison the set.
/// Holding the verifier itself (rather than a `JWTKeyCollection`) keeps actor hops and a second JSON decode
/// of the token off the request path.
struct KeySet: Sendable {
    private(set) var algorithms: [String: [String: any JWTAlgorithm]] = [:]

    var kids: Set<String> { Set(algorithms.keys) }
    var isEmpty: Bool { algorithms.isEmpty }

    func algorithm(kid: String, alg: String) -> (any JWTAlgorithm)? {
        algorithms[kid]?[alg]
    }

    func knows(kid: String) -> Bool { algorithms[kid] != nil }

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
                guard let identifier = pinned.keyIdentifier,
                    (try? await collection.add(jwk: pinned)) != nil,
                    let algorithm = try? await collection.getKey(for: identifier, alg: alg)
                else { continue }
                set.algorithms[kid, default: [:]][alg] = algorithm
            }
        }
        return set
    }
}
