import Foundation
import RISC
import Testing

/// Vectors computed independently with openssl (see the fixture's `generated_with`).
struct TokenVector: Decodable, Sendable, CustomTestStringConvertible {
    var token: String
    /// Nil for a token that is not printable ASCII: no prefix identifier can name it.
    var prefix: String?
    var hash_base64_sha512_sha512: String
    var testDescription: String { String(token.prefix(16)) }

    static let all: [TokenVector] = {
        struct Fixture: Decodable { var vectors: [TokenVector] }
        let url = Bundle.module.url(forResource: "token-identifiers", withExtension: "json", subdirectory: "Fixtures")!
        return try! JSONDecoder().decode(Fixture.self, from: Data(contentsOf: url)).vectors
    }()
}

@Suite("Refresh-token identifiers")
struct TokenIdentifierTests {
    @Test("prefix and double SHA-512 match openssl", arguments: TokenVector.all)
    func vectors(_ vector: TokenVector) throws {
        #expect(TokenIdentifier.doubleSHA512Base64(of: vector.token) == vector.hash_base64_sha512_sha512)
        let hash = try #require(TokenIdentifier(algorithm: "hash_base64_sha512_sha512", value: vector.hash_base64_sha512_sha512))
        if let expected = vector.prefix {
            #expect(TokenIdentifier.prefix(of: vector.token) == expected)
            let prefix = try #require(TokenIdentifier(algorithm: "prefix", value: expected))
            #expect(prefix.matches(token: vector.token))
        } else {
            #expect(TokenIdentifier(algorithm: "prefix", value: TokenIdentifier.prefix(of: vector.token)) == nil)
        }
        #expect(hash.matches(token: vector.token))
        #expect(!hash.matches(token: vector.token + "x"))
        #expect(hash.canonicalValue == vector.hash_base64_sha512_sha512)
    }

    @Test("The hash is accepted padded or not, standard or URL-safe", arguments: TokenVector.all)
    func hashEncodings(_ vector: TokenVector) throws {
        let standard = vector.hash_base64_sha512_sha512
        let unpadded = standard.replacingOccurrences(of: "=", with: "")
        let urlSafe = standard.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        let urlSafeUnpadded = urlSafe.replacingOccurrences(of: "=", with: "")
        let expected = try #require(TokenIdentifier(algorithm: "hash_base64_sha512_sha512", value: standard))
        for form in [unpadded, urlSafe, urlSafeUnpadded] {
            #expect(TokenIdentifier(algorithm: "hash_base64_sha512_sha512", value: form) == expected)
        }
    }

    @Test("Malformed identifiers are refused")
    func malformed() {
        #expect(TokenIdentifier(algorithm: "prefix", value: "too-short") == nil)
        #expect(TokenIdentifier(algorithm: "hash_base64_sha512_sha512", value: "AAAA") == nil)
        #expect(TokenIdentifier(algorithm: "hash_base64_sha512_sha512", value: "!!not base64!!") == nil)
        #expect(TokenIdentifier(algorithm: "sha256", value: "x") == nil)
    }

    @Test("A prefix is 16 bytes of printable ASCII, never 16 grapheme clusters")
    func prefixInBytes() {
        // 16 Characters but 32 code points: Swift's String.count would have accepted it.
        let clusters = String(repeating: "e\u{301}", count: 16)
        #expect(clusters.count == 16)
        #expect(TokenIdentifier(algorithm: "prefix", value: clusters) == nil)
        #expect(TokenIdentifier(algorithm: "prefix", value: "1//0g\u{00E9}abcdefghi") == nil)
        #expect(TokenIdentifier.prefix(of: "1//0gABCDEFGHIJKLMNOP") == "1//0gABCDEFGHIJK")
        #expect(TokenIdentifier.prefix(of: clusters).utf8.count == 16)
        #expect(TokenIdentifier.isPrintableASCII("1//0g-abc_DEF.~"))
        #expect(!TokenIdentifier.isPrintableASCII("1//0g abc"))
        #expect(!TokenIdentifier.isPrintableASCII("1//0g\u{00E9}"))
        #expect(!TokenIdentifier.isPrintableASCII(""))
    }
}
