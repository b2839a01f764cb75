import Foundation

/// Base64 helpers: JWS uses the URL-safe alphabet without padding; RISC token hashes may
/// arrive in either alphabet, padded or not.
public enum Base64Lenient {
    /// Decodes standard or URL-safe base64, with or without padding. Returns nil on any other input.
    public static func decode(_ text: some StringProtocol) -> Data? {
        var normalized = String(text)
            .replacingOccurrences(of: "-", with: "+")
            .replacingOccurrences(of: "_", with: "/")
        while normalized.hasSuffix("=") { normalized.removeLast() }
        guard !normalized.contains("=") else { return nil }
        switch normalized.count % 4 {
        case 0: break
        case 2: normalized += "=="
        case 3: normalized += "="
        default: return nil
        }
        return Data(base64Encoded: normalized)
    }

    /// Decodes the unpadded URL-safe base64 of one JWS segment, refusing the standard alphabet and padding.
    public static func decodeJWSSegment(_ segment: some StringProtocol) -> Data? {
        guard segment.utf8.allSatisfy({ byte in
            (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A) || (byte >= 0x30 && byte <= 0x39)
                || byte == 0x2D || byte == 0x5F
        }) else { return nil }
        return decode(segment)
    }

    public static func urlEncoded(_ data: some Sequence<UInt8>) -> String {
        Data(data).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}
