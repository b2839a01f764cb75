import Crypto
import Foundation

/// How a `token-revoked` event names a refresh token without revealing it (RISC §2.2).
public enum TokenIdentifier: Sendable, Equatable, Hashable {
    /// `prefix`: the first 16 characters of the token. Google's refresh tokens are ASCII, so characters are
    /// bytes here; never Swift `Character`s, which would let one "character" span many code points.
    case prefix(String)
    /// `hash_base64_sha512_sha512`: the 64 raw bytes of SHA-512(SHA-512(token)).
    case doubleSHA512(Data)

    public static let prefixLength = 16

    /// Parses an identifier as sent; a hash is accepted in the standard or URL-safe alphabet,
    /// padded or not. Nil for an unknown algorithm or a malformed value.
    public init?(algorithm: String, value: String) {
        switch algorithm {
        case "prefix":
            guard value.utf8.count == Self.prefixLength, Self.isPrintableASCII(value) else { return nil }
            self = .prefix(value)
        case "hash_base64_sha512_sha512":
            guard let digest = Base64URL.decode(value), digest.count == SHA512.byteCount else { return nil }
            self = .doubleSHA512(digest)
        default:
            return nil
        }
    }

    public var algorithm: String {
        switch self {
        case .prefix: "prefix"
        case .doubleSHA512: "hash_base64_sha512_sha512"
        }
    }

    /// The value in the form we store and compare: the prefix, or the padded standard base64 of the hash.
    public var canonicalValue: String {
        switch self {
        case .prefix(let prefix): prefix
        case .doubleSHA512(let digest): digest.base64EncodedString()
        }
    }

    /// The first 16 bytes of a refresh token (the vault only holds printable-ASCII tokens).
    public static func prefix(of token: String) -> String {
        String(decoding: token.utf8.prefix(prefixLength), as: UTF8.self)
    }

    /// Printable ASCII without space (0x21–0x7E): what Google's refresh tokens are made of, and all the
    /// vault accepts, so that a prefix in bytes and in characters is the same thing.
    public static func isPrintableASCII(_ token: String) -> Bool {
        !token.isEmpty && token.utf8.allSatisfy { $0 >= 0x21 && $0 <= 0x7E }
    }

    /// SHA-512 over the 64 raw bytes of SHA-512(token), as raw bytes.
    public static func doubleSHA512Digest(of token: String) -> Data {
        let inner = SHA512.hash(data: Data(token.utf8))
        return Data(SHA512.hash(data: Data(inner)))
    }

    /// The identifier's canonical string for a stored token: padded standard base64 of the double hash.
    public static func doubleSHA512Base64(of token: String) -> String {
        doubleSHA512Digest(of: token).base64EncodedString()
    }

    /// Whether this identifier names `token`.
    public func matches(token: String) -> Bool {
        switch self {
        case .prefix(let prefix): Self.prefix(of: token) == prefix
        case .doubleSHA512(let digest): Self.doubleSHA512Digest(of: token) == digest
        }
    }
}
