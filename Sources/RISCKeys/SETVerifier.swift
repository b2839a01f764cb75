import Foundation
import JWTKit
import RISC

/// Verifies a pushed SET end to end: structure and claims (pure core), key and signature (jwt-kit's verifier),
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
            key = try await keys.resolve(kid: token.header.kid, alg: token.header.alg)
        } catch .unknownKey {
            throw .rejected(.invalidKey("the kid does not name a key of the transmitter for this algorithm"))
        } catch {
            throw .keysUnavailable
        }
        guard (try? key.algorithm.verify(token.signature, signs: token.signingInput)) == true else {
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
