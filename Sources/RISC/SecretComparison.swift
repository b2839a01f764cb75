import Crypto
import Foundation

public enum SecretComparison {
    /// Compares a presented secret with the expected one in time that depends on neither: both are hashed
    /// first, so not even the length of the expected secret leaks, then the digests are compared byte by byte.
    public static func equal(_ presented: String, _ expected: String) -> Bool {
        equalDigests(Data(SHA256.hash(data: Data(presented.utf8))), Data(SHA256.hash(data: Data(expected.utf8))))
    }

    /// Compares two digests byte by byte in time that depends only on their length (a stored secret's SHA-256 with
    /// the presented one's).
    public static func equalDigests(_ a: Data, _ b: Data) -> Bool {
        guard a.count == b.count else { return false }
        var difference: UInt8 = 0
        for (x, y) in zip(a, b) { difference |= x ^ y }
        return difference == 0
    }
}
