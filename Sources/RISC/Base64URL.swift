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
        // One pass over the bytes as they lie in memory: this runs three times for every SET received.
        if let decoded = segment.withContiguousStorageIfAvailable({ decodeCanonical($0) }) { return decoded }
        return Array(segment).withUnsafeBufferPointer { decodeCanonical($0) }
    }

    private static func decodeCanonical(_ input: UnsafeBufferPointer<UInt8>) -> Data? {
        // One leftover character is not a whole byte.
        guard input.count % 4 != 1 else { return nil }
        var output = [UInt8]()
        output.reserveCapacity(input.count / 4 * 3 + 2)
        var accumulator: UInt32 = 0
        var bits: UInt32 = 0
        let decoded = sextets.withUnsafeBufferPointer { table in
            for byte in input {
                let value = table[Int(byte)]
                guard value != invalid else { return false }
                accumulator = (accumulator << 6 | UInt32(value)) & 0xFFFFFF
                bits += 6
                if bits >= 8 {
                    bits -= 8
                    output.append(UInt8(truncatingIfNeeded: accumulator >> bits))
                }
            }
            return true
        }
        // Canonical: the bits of the last character that make no whole byte (4 or 2 of them) are zero.
        guard decoded, accumulator & ((1 << bits) - 1) == 0 else { return nil }
        return Data(output)
    }

    private static let invalid: UInt8 = 0xFF

    /// The 6-bit value of each base64url character by byte; `invalid` for every other byte.
    private static let sextets: [UInt8] = (0..<256).map { byte in
        switch byte {
        case 0x41...0x5A: UInt8(byte - 0x41)
        case 0x61...0x7A: UInt8(byte - 0x61 + 26)
        case 0x30...0x39: UInt8(byte - 0x30 + 52)
        case 0x2D: 62
        case 0x5F: 63
        default: invalid
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
