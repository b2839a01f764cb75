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
        let segments = token.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        // An empty signature is framing-valid (an unsecured JWS, `alg: none`): the header's algorithm is judged
        // first, so such a token is refused as a key failure, not as a malformed request.
        guard segments.count == 3, !segments[0].isEmpty, !segments[1].isEmpty else {
            throw .notThreeSegments
        }
        guard let header = Base64URL.decodeJWSSegment(segments[0]),
            let payload = Base64URL.decodeJWSSegment(segments[1]),
            let signature = segments[2].isEmpty ? Data() : Base64URL.decodeJWSSegment(segments[2])
        else { throw .notBase64URL }
        self.header = header
        self.payload = payload
        self.signature = signature
        self.signingInput = Data(token.utf8[segments[0].startIndex..<segments[1].endIndex])
    }
}
