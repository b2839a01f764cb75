import Foundation
import RISC
import Testing

@Suite("JSON parser")
struct JSONParserTests {
    func parse(_ text: String) -> JSONValue? { try? JSONValue.parse(Array(text.utf8)) }

    @Test("Values of every kind")
    func values() {
        #expect(
            parse(#" {"a": [1, -2.5e3, true, false, null, "x"], "b": {}} "#)
                == ["a": [1, .number(-2500), true, false, .null, "x"], "b": [:]])
        #expect(parse("0") == .number(0))
        #expect(parse("[]") == [])
        #expect(parse(#""""#) == "")
    }

    @Test("Escapes, including surrogate pairs")
    func escapes() {
        #expect(parse(#""a\"b\\c\/d\b\f\n\r\t""#) == .string("a\"b\\c/d\u{08}\u{0C}\n\r\t"))
        #expect(parse(#""\u00e9\u2603\ud83d\ude00""#) == .string("é☃😀"))
        #expect(parse("\"ünïcødé\"") == .string("ünïcødé"))
    }

    @Test("Escapes beside raw UTF-8: each raw run must be UTF-8 on its own")
    func escapesBesideRawUTF8() {
        #expect(parse(#""https:\/\/accounts.google.com\/""#) == .string("https://accounts.google.com/"))
        #expect(parse(#""é\/ü\u00e9😀\n""#) == .string("é/üé😀\n"))
        // A raw byte that is not UTF-8, or a sequence cut short, before or after an escape.
        for bytes: [UInt8] in [
            [0x22, 0xFF, 0x5C, 0x2F, 0x22], [0x22, 0x5C, 0x2F, 0xFF, 0x22], [0x22, 0xC3, 0x5C, 0x6E, 0x22],
            [0x22, 0x5C, 0x6E, 0xA9, 0x22], [0x22, 0xE2, 0x98, 0x5C, 0x2F, 0x22], [0x22, 0xC3, 0x5C, 0x75, 0x30, 0x30, 0x41, 0x39, 0x22],
        ] {
            #expect((try? JSONValue.parse(bytes)) == nil, "\(bytes)")
        }
        // Neither a control character nor an unterminated string after an escape.
        #expect(parse("\"\\/\u{01}\"") == nil)
        #expect(parse(#""\/abc"#) == nil)
    }

    @Test(
        "Invalid JSON is refused",
        arguments: [
            "", "{", "[1,]", "{\"a\":1,}", "{'a':1}", "01", "1.", ".5", "-", "1e", "tru", "nul", "\"abc", "\"\\x\"",
            "\"\\u12\"", "[1] x", "{\"a\" 1}", "NaN", "1e999", "\"a\u{01}b\"", "{\"a\":1,\"a\":2}",
        ])
    func invalid(_ text: String) {
        #expect(parse(text) == nil)
    }

    @Test("What PostgreSQL's jsonb refuses is refused here: NUL and lone surrogates")
    func unstorable() {
        #expect(parse(#""a\u0000b""#) == nil)
        #expect(parse(#""\ud800""#) == nil)
        #expect(parse(#""\udc00x""#) == nil)
        #expect((try? JSONValue.parse([0x22, 0x61, 0x00, 0x22])) == nil)
        #expect((try? JSONValue.parse([0x22, 0xFF, 0x22])) == nil)
    }

    @Test("Nesting is bounded")
    func depth() {
        let deep = String(repeating: "[", count: 100) + String(repeating: "]", count: 100)
        #expect(parse(deep) == nil)
        let fine = String(repeating: "[", count: 10) + String(repeating: "]", count: 10)
        #expect(parse(fine) != nil)
    }

    @Test("Agrees with Foundation on a SET payload")
    func agreesWithFoundation() throws {
        let text =
            #"{"iss":"https://accounts.google.com/","aud":["a","b"],"iat":1508184845,"jti":"756E","events":{"https://schemas.openid.net/secevent/risc/event-type/account-disabled":{"subject":{"subject_type":"iss-sub","iss":"https://accounts.google.com/","sub":"7375626A656374"},"reason":"hijacking"}}}"#
        let ours = try JSONValue.parse(Array(text.utf8))
        let foundation = try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))
        #expect(ours == foundation)
    }

    @Test("Serializing and parsing round-trips, with sorted keys")
    func roundTrip() throws {
        let value: JSONValue = ["b": [1, .number(2.5), "x\"y\\z\n\u{01}é😀"], "a": ["nested": .null, "t": true]]
        let text = value.serialized
        #expect(text.hasPrefix(#"{"a":{"nested":null,"t":true},"b":[1,2.5,"#))
        #expect(try JSONValue.parse(Array(text.utf8)) == value)
        #expect(try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8)) == value)
        // Only ASCII is escaped, control characters as \u00XX; every other scalar is written as it is.
        #expect(JSONValue.string("a\"\\\n\r\t\u{08}\u{1f}/é😀").serialized == #""a\"\\\n\r\t\u0008\u001f/é😀""#)
    }

    @Test("Serialization is deterministic even for keys Swift's String ordering cannot order (found by fuzzing)")
    func keyOrderIsTotal() throws {
        let text = "{\"\u{e9}5\":1,\"e\u{301}\":2}"
        let value = try JSONValue.parse(Data(text.utf8))
        let first = value.serialized
        for _ in 0..<200 {
            // Rebuilt dictionaries iterate in other orders; the bytes must not change.
            #expect(try JSONValue.parse(Data(first.utf8)).serialized == first)
        }
        #expect(first == "{\"e\u{301}\":2,\"\u{e9}5\":1}")
    }
}
