import Foundation
import JWTKit
import RISC

/// Verifies a Google ID token: claims (pure core), then key and signature against the OpenID
/// provider's JWKS, with the same caching and unknown-kid rules as SETs, then the issuer.
public struct IDTokenVerifier: Sendable {
    public enum Failure: Error, Sendable {
        case invalid(GoogleIDToken.Invalid)
        /// The provider's keys could not be fetched: the client may retry.
        case keysUnavailable
    }

    public let keys: IssuerKeys
    public let policy: IDTokenPolicy

    public init(keys: IssuerKeys, policy: IDTokenPolicy) {
        self.keys = keys
        self.policy = policy
    }

    public func verify(_ compact: String, now: Date = Date()) async throws(Failure) -> GoogleIDToken {
        let token: GoogleIDToken
        do {
            token = try GoogleIDToken.parse(compact, policy: policy, now: now)
        } catch {
            throw .invalid(error)
        }
        let issuer: String
        do {
            issuer = try await keys.verifySignature(
                kid: token.kid, alg: token.alg, signature: token.signature, signingInput: token.signingInput)
        } catch .unknownKey {
            throw .invalid(.init("the kid does not name a key of the identity provider"))
        } catch .badSignature {
            throw .invalid(.init("the signature does not verify"))
        } catch {
            throw .keysUnavailable
        }
        do {
            try token.checkIssuer(discoveryIssuer: issuer)
        } catch {
            throw .invalid(error)
        }
        return token
    }
}
