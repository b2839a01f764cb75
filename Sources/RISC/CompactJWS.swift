import Foundation

/// The three decoded segments of a compact JWS (RFC 7515 §7.1), nothing verified yet.
public struct CompactJWS: Sendable {
    public let header: Data
    public let payload: Data
    public let signature: Data
    /// What the signature covers: `header.payload`, exactly as sent.
    public let signingInput: Data

    public enum Malformed: Error, Sendable {
        case notThreeSegments
        case notBase64URL
    }

    public init(_ token: String) throws(Malformed) {
        // Over the token's bytes as they lie in memory: splitting the string's UTF-8 view cost more than decoding.
        var token = token
        let parts = token.withUTF8 { bytes -> Result<(Data, Data, Data, Data), Malformed> in
            let dot = UInt8(ascii: ".")
            // An empty signature is framing-valid (an unsecured JWS, `alg: none`): the header's algorithm is judged
            // first, so such a token is refused as a key failure, not as a malformed request.
            guard let first = bytes.firstIndex(of: dot), let second = bytes[(first + 1)...].firstIndex(of: dot),
                !bytes[(second + 1)...].contains(dot), first > 0, second > first + 1
            else { return .failure(.notThreeSegments) }
            let signature = bytes[(second + 1)...]
            guard let header = Base64URL.decodeJWSSegment(bytes[..<first]),
                let payload = Base64URL.decodeJWSSegment(bytes[(first + 1)..<second]),
                let signature = signature.isEmpty ? Data() : Base64URL.decodeJWSSegment(signature)
            else { return .failure(.notBase64URL) }
            return .success((header, payload, signature, Data(bytes[..<second])))
        }
        switch parts {
        case .success(let (header, payload, signature, signingInput)):
            (self.header, self.payload, self.signature, self.signingInput) = (header, payload, signature, signingInput)
        case .failure(let malformed):
            throw malformed
        }
    }
}
