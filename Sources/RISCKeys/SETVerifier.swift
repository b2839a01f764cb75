import Foundation
import JWTKit
import RISC

/// Verifies a pushed SET end to end: structure and claims (pure core), key and signature (jwt-kit's verifier),
/// then issuer and audience against the transmitter's discovery document and our client IDs.
public struct SETVerifier: Sendable {
    public enum Failure: Error, Sendable {
        case rejected(SETRejection)
        /// Keys could not be obtained (now, or for an unknown kid until the next refetch is allowed): answer 503
        /// with this `Retry-After` so the transmitter retries.
        case keysUnavailable(retryAfter: Int)
    }

    /// How long a transmitter is asked to wait when the keys cannot be fetched at all.
    public static let keysUnavailableRetryAfter = 30

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
        let issuer: String
        do {
            issuer = try await keys.verifySignature(
                kid: token.header.kid, alg: token.header.alg, signature: token.signature, signingInput: token.signingInput)
        } catch .unknownKey {
            throw .rejected(.invalidKey("the kid does not name a key of the transmitter for this algorithm"))
        } catch .badSignature {
            throw .rejected(.invalidKey("the signature does not verify"))
        } catch .coolingDown(let seconds) {
            throw .keysUnavailable(retryAfter: seconds)
        } catch {
            throw .keysUnavailable(retryAfter: Self.keysUnavailableRetryAfter)
        }
        do {
            try token.checkIssuerAndAudience(expectedIssuer: issuer, policy: policy)
        } catch {
            throw .rejected(error)
        }
        return token
    }
}
