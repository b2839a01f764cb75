import Crypto
import Foundation

public enum SecretComparison {
    /// Compares a presented secret with the expected one in time that depends on neither: both are hashed
    /// first, so not even the length of the expected secret leaks, then the digests are compared byte by byte.
    public static func equal(_ presented: String, _ expected: String) -> Bool {
        let a = Array(SHA256.hash(data: Data(presented.utf8)))
        let b = Array(SHA256.hash(data: Data(expected.utf8)))
        var difference: UInt8 = 0
        for index in 0..<a.count { difference |= a[index] ^ b[index] }
        return difference == 0
    }
}
