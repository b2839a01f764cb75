import Foundation

/// The one base64url helper (RFC 4648 §5): JWS segments, session tokens, cursors and PKCE challenges are
/// URL-safe without padding; RISC token hashes may arrive in either alphabet, padded or not.
public enum Base64URL {
    /// Decodes standard or URL-safe base64, with or without padding. Returns nil on any other input.
    public static func decode(_ text: some StringProtocol) -> Data? {
        decode(bytes: text.utf8)
    }

    /// Byte-level so that it stays cheap on the request path (Foundation's string replacing is not).
    public static func decode(bytes: some Collection<UInt8>) -> Data? {
        var normalized = [UInt8]()
        normalized.reserveCapacity(bytes.count + 3)
        var padding = 0
        for byte in bytes {
            switch byte {
            case UInt8(ascii: "="):
                padding += 1
                continue
            case UInt8(ascii: "-"): normalized.append(UInt8(ascii: "+"))
            case UInt8(ascii: "_"): normalized.append(UInt8(ascii: "/"))
            default: normalized.append(byte)
            }
            // Padding is only allowed at the end.
            if padding > 0 { return nil }
        }
        guard padding <= 2 else { return nil }
        switch normalized.count % 4 {
        case 0: guard padding == 0 else { return nil }
        case 2: normalized.append(contentsOf: [UInt8(ascii: "="), UInt8(ascii: "=")])
        case 3: normalized.append(UInt8(ascii: "="))
        default: return nil
        }
        return Data(base64Encoded: Data(normalized))
    }

    /// Decodes the unpadded URL-safe base64 of one JWS segment, refusing the standard alphabet, padding, and
    /// non-canonical encodings (unused low bits of the last character set): each token has exactly one
    /// spelling, so a signature cannot be re-spelled into a "different" token with the same bytes.
    public static func decodeJWSSegment(_ segment: some Collection<UInt8>) -> Data? {
        var last: UInt8 = 0x41
        for byte in segment {
            guard (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A) || (byte >= 0x30 && byte <= 0x39)
                || byte == 0x2D || byte == 0x5F
            else { return nil }
            last = byte
        }
        let unusedBits: UInt8 =
            switch segment.count % 4 {
            case 2: 0b1111
            case 3: 0b11
            default: 0
            }
        guard sextet(last) & unusedBits == 0 else { return nil }
        return decode(bytes: segment)
    }

    /// The 6-bit value of a base64url character (the caller has checked the alphabet).
    private static func sextet(_ byte: UInt8) -> UInt8 {
        switch byte {
        case 0x41...0x5A: byte - 0x41
        case 0x61...0x7A: byte - 0x61 + 26
        case 0x30...0x39: byte - 0x30 + 52
        case 0x2D: 62
        default: 63
        }
    }

    /// URL-safe alphabet, no padding.
    public static func encode(_ data: some Sequence<UInt8>) -> String {
        Data(data).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// `bytes` random bytes from the system's secure generator, encoded: session tokens, codes, nonces.
    public static func random(bytes: Int) -> String {
        var generator = SystemRandomNumberGenerator()
        return encode((0..<bytes).map { _ in UInt8.random(in: .min ... .max, using: &generator) })
    }
}
