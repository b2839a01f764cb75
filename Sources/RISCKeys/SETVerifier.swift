import Foundation
import JWTKit
import RISC

/// Verifies a pushed SET end to end: structure and claims (pure core), key and signature (jwt-kit),
/// then issuer and audience against the transmitter's discovery document and our client IDs.
public struct SETVerifier: Sendable {
    public enum Failure: Error, Sendable {
        case rejected(SETRejection)
        /// Keys could not be obtained: answer 503 so the transmitter retries.
        case keysUnavailable
    }

    public let keys: IssuerKeys
    public let policy: SETPolicy

    public init(keys: IssuerKeys, policy: SETPolicy) {
        self.keys = keys
        self.policy = policy
    }

    public func verify(_ compact: String, now: Date = Date()) async throws(Failure) -> SecurityEventToken {
        let token: SecurityEventToken
        do {
            token = try SecurityEventToken.parse(compact: compact, policy: policy, now: now)
        } catch {
            throw .rejected(error)
        }
        let key: ResolvedKey
        do {
            if let cached = keys.cachedKey(kid: token.header.kid, alg: token.header.alg) {
                key = cached
            } else {
                key = try await keys.key(kid: token.header.kid, alg: token.header.alg)
            }
        } catch .unknownKey {
            throw .rejected(.invalidKey("the kid does not name a key of the transmitter for this algorithm"))
        } catch {
            throw .keysUnavailable
        }
        do {
            _ = try await key.collection.verify(compact, as: SignatureOnly.self)
        } catch {
            throw .rejected(.invalidKey("the signature does not verify"))
        }
        do {
            try token.checkIssuerAndAudience(expectedIssuer: key.issuer, policy: policy)
        } catch {
            throw .rejected(error)
        }
        return token
    }
}

/// A payload that checks nothing: the claims are validated by `SecurityEventToken`, and SETs have no `exp`.
struct SignatureOnly: JWTPayload {
    func verify(using algorithm: some JWTAlgorithm) async throws {}
}
