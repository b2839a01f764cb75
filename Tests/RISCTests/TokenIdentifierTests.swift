import Foundation
import RISC
import Testing

/// Vectors computed independently with openssl (see the fixture's `generated_with`).
struct TokenVector: Decodable, Sendable, CustomTestStringConvertible {
    var token: String
    var prefix: String
    var hash_base64_sha512_sha512: String
    var testDescription: String { prefix }

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
        #expect(TokenIdentifier.prefix(of: vector.token) == vector.prefix)
        #expect(TokenIdentifier.doubleSHA512Base64(of: vector.token) == vector.hash_base64_sha512_sha512)
        let prefix = try #require(TokenIdentifier(algorithm: "prefix", value: vector.prefix))
        let hash = try #require(TokenIdentifier(algorithm: "hash_base64_sha512_sha512", value: vector.hash_base64_sha512_sha512))
        #expect(prefix.matches(token: vector.token))
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
}
