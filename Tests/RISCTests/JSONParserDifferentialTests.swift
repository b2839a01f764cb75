import Foundation
import RISC
import TestSupport
import Testing

/// Differential tests of the hand-written JSON parser (`JSONValue.parse`) against Foundation's
/// `JSONSerialization`, on documents from a seeded, deterministic generator.
///
/// Where the two deliberately differ, our parser is the stricter one, and each difference is generated
/// on its own below and must be refused by our parser (what Foundation does is noted, not asserted: it
/// differs between platforms and releases):
///
/// | input                                            | ours    | Foundation (Linux, Swift 6.3)          |
/// |--------------------------------------------------|---------|----------------------------------------|
/// | duplicate member names (RFC 8259 §4: ambiguous)   | refused | accepted, last one wins                |
/// | names equal under Unicode canonical equivalence   | refused | accepted, merged into one (last wins)  |
/// |   (`"\u00e9"` and `"e\u0301"`: equal Swift Strings) |         |                                        |
/// | `\u0000` in a string (PostgreSQL jsonb refuses)   | refused | accepted                               |
/// | lone surrogate escapes (`\ud800`, `\udc00`)       | refused | refused                                |
/// | nesting deeper than `JSONValue.maxNestingDepth`   | refused | accepted up to 512                     |
/// |   (64; a scalar counts as one level)              |         |                                        |
/// | trailing comma `[1,]`, `{"a":1,}`                 | refused | accepted                               |
/// | byte-order mark before the value                  | refused | accepted                               |
/// | numbers outside Double's range (`1e309`)          | refused | refused                                |
///
/// Foundation's own quirk: on Linux, `JSONSerialization` drops a raw U+FEFF that opens a string or follows an
/// escape sequence (`"\u{FEFF}a"` comes back as `"a"`; `JSONDecoder` keeps it, and so do we). Strings are
/// compared scalar by scalar, and only where that fails, again without U+FEFF.
///
/// Our serializer writes -0 as `0`: round trips compare numbers with `==`, which holds -0 and 0 equal.
///
/// Numbers are compared as `Double`. Ours is `Double(text)` (correctly rounded). Foundation answers
/// integers beyond 64 bits and long mantissas with an `NSDecimalNumber`, whose `doubleValue` can be a few
/// ULPs off: those are compared with a relative tolerance, every other number exactly.
@Suite("JSON parser differential (against Foundation's JSONSerialization)")
struct JSONParserDifferentialTests {
    static let validDocuments = 3_000
    static let mutatedDocuments = 4_000

    @Test("Generated valid documents: both accept, and agree with the generator's value")
    func validDocumentsAgree() throws {
        var generator = DocumentGenerator(seed: 0x5EED_0001)
        var failures: [String] = []
        var containers = 0
        for index in 0..<Self.validDocuments {
            let document = generator.document()
            if case .array = document.value { containers += 1 }
            if case .object = document.value { containers += 1 }
            let bytes = Array(document.text.utf8)
            guard let ours = try? JSONValue.parse(bytes) else {
                failures.append("#\(index) ours refused: \(document.text.debugDescription)")
                continue
            }
            if !JSONCompare.strictlyEqual(ours, document.value) {
                failures.append("#\(index) ours differs from the generator: \(document.text.debugDescription)")
            }
            guard let theirs = try? JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed]) else {
                failures.append("#\(index) Foundation refused: \(document.text.debugDescription)")
                continue
            }
            if let difference = JSONCompare.difference(foundation: theirs, ours: ours) {
                failures.append("#\(index) \(difference): \(document.text.debugDescription)")
            }
            // Our serializer's output is read back by both parsers as the same value.
            let serialized = ours.serialized
            if (try? JSONValue.parse(Array(serialized.utf8))).map({ JSONCompare.strictlyEqual($0, ours, signOfZero: false) }) != true {
                failures.append("#\(index) ours does not round-trip: \(serialized.debugDescription)")
            }
            if let again = try? JSONSerialization.jsonObject(with: Data(serialized.utf8), options: [.fragmentsAllowed]) {
                if let difference = JSONCompare.difference(foundation: again, ours: ours) {
                    failures.append("#\(index) serialized, then read by Foundation: \(difference)")
                }
            } else {
                failures.append("#\(index) Foundation refused our serialization: \(serialized.debugDescription)")
            }
        }
        #expect(failures.isEmpty, "\(failures.count) failures; first: \(failures.prefix(5).joined(separator: "\n"))")
        // The generator must produce structure, not only scalars.
        #expect(containers > Self.validDocuments / 2)
    }

    @Test("Mutated documents: what ours accepts Foundation accepts as the same value; the converse only for documented differences")
    func mutatedDocumentsAgree() throws {
        var generator = DocumentGenerator(seed: 0x5EED_0002)
        var failures: [String] = []
        var oursAccepted = 0
        var bothRefused = 0
        var explainedDifferences = 0
        for index in 0..<Self.mutatedDocuments {
            let bytes = generator.mutated(Array(generator.document().text.utf8))
            let ours = try? JSONValue.parse(bytes)
            let theirs = try? JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed])
            let shown = String(decoding: bytes, as: UTF8.self).debugDescription
            let failuresBefore = failures.count
            defer { if failures.count > failuresBefore + 1 { failures.removeLast(failures.count - failuresBefore - 1) } }
            switch (ours, theirs) {
            case (let ours?, let theirs?):
                oursAccepted += 1
                if let difference = JSONCompare.difference(foundation: theirs, ours: ours) {
                    failures.append("#\(index) \(difference): \(shown)")
                }
                if String(validating: bytes, as: UTF8.self) == nil {
                    failures.append("#\(index) ours accepted invalid UTF-8: \(bytes)")
                }
            case (.some, nil):
                failures.append("#\(index) ours accepted what Foundation refuses: \(shown)")
            case (nil, let theirs?):
                if DocumentedDifference.explain(bytes, foundation: theirs) != nil {
                    explainedDifferences += 1
                } else {
                    failures.append("#\(index) ours refused, for no documented reason, what Foundation accepts: \(shown)")
                }
            case (nil, nil):
                bothRefused += 1
            }
        }
        #expect(failures.isEmpty, "\(failures.count) failures; first: \(failures.prefix(5).joined(separator: "\n"))")
        // Mutations must leave a fair share valid and break a fair share, or this test compares nothing.
        #expect(oursAccepted > Self.mutatedDocuments / 20)
        #expect(bothRefused > Self.mutatedDocuments / 4)
        #expect(explainedDifferences > Self.mutatedDocuments / 100)
        #expect(oursAccepted + bothRefused + explainedDifferences + failures.count == Self.mutatedDocuments)
    }

    // MARK: - The deliberate differences, generated on their own

    @Test("Duplicate member names are refused")
    func duplicateNames() {
        var generator = DocumentGenerator(seed: 0x5EED_0003)
        for _ in 0..<300 {
            let key = generator.string(maxPieces: 4)
            let first = generator.value(depth: 2)
            let second = generator.value(depth: 2)
            var members = (0..<generator.int(0...3)).map { i in "\"pad\(i)\":\(generator.value(depth: 2).text)" }
            members.insert("\(key.text):\(first.text)", at: generator.int(0...members.count))
            members.insert("\(key.text)\(generator.whitespace()):\(second.text)", at: generator.int(0...members.count))
            let text = generator.wrapped("{" + members.joined(separator: ",") + "}")
            #expect((try? JSONValue.parse(Array(text.utf8))) == nil, "accepted: \(text.debugDescription)")
        }
    }

    @Test("Member names that are equal Swift Strings (canonically equivalent) are refused")
    func canonicallyEquivalentNames() {
        var generator = DocumentGenerator(seed: 0x5EED_0004)
        let pairs: [(String, String)] = [
            (#""\u00e9""#, #""e\u0301""#), ("\"\u{e9}\"", "\"e\u{301}\""), (#""\u00c5""#, #""\u212b""#),
            (#""x\u1e69""#, #""xs\u0323\u0307""#), ("\"\u{ac00}\"", "\"\u{1100}\u{1161}\""),
        ]
        for _ in 0..<100 {
            let (first, second) = pairs[generator.int(0...pairs.count - 1)]
            let text = generator.wrapped("{\(first):\(generator.value(depth: 1).text),\(second):1}")
            #expect((try? JSONValue.parse(Array(text.utf8))) == nil, "accepted: \(text.debugDescription)")
        }
    }

    @Test("NUL in a string is refused, escaped or raw")
    func nul() {
        var generator = DocumentGenerator(seed: 0x5EED_0005)
        for round in 0..<300 {
            let before = generator.stringContent(maxPieces: 3)
            let after = generator.stringContent(maxPieces: 3)
            let nul = ["\\u0000", "\\u0000", "\u{0}"][round % 3]
            let string = "\"\(before)\(nul)\(after)\""
            let text = generator.wrapped(round % 2 == 0 ? string : "{\(string):0}")
            #expect((try? JSONValue.parse(Array(text.utf8))) == nil, "accepted: \(text.debugDescription)")
        }
    }

    @Test("Lone or misordered surrogates are refused, escaped or as UTF-8")
    func loneSurrogates() {
        var generator = DocumentGenerator(seed: 0x5EED_0006)
        for round in 0..<400 {
            let high = String(0xD800 + generator.int(0...0x3FF), radix: 16)
            let low = String(0xDC00 + generator.int(0...0x3FF), radix: 16)
            let broken: String
            switch round % 5 {
            case 0: broken = "\\u\(high)"  // high, then the end of the string
            case 1: broken = "\\u\(low)"  // low alone
            case 2: broken = "\\u\(low)\\u\(high)"  // reversed pair
            case 3: broken = "\\u\(high)\\u00\(String(0x41 + generator.int(0...25), radix: 16))"  // high, then not a low
            default: broken = "\\u\(high.uppercased())x"
            }
            let text = generator.wrapped("\"\(generator.stringContent(maxPieces: 2))\(broken)\"")
            #expect((try? JSONValue.parse(Array(text.utf8))) == nil, "accepted: \(text.debugDescription)")
        }
        // A surrogate encoded directly in UTF-8 (CESU-8 style) is invalid UTF-8.
        for lead: UInt8 in [0xA0, 0xAF, 0xB0, 0xBF] {
            #expect((try? JSONValue.parse([0x22, 0xED, lead, 0x80, 0x22])) == nil)
        }
    }

    @Test("Nesting is bounded: depth 64 is accepted, anything deeper refused")
    func nesting() {
        var generator = DocumentGenerator(seed: 0x5EED_0007)
        for _ in 0..<100 {
            let depth = generator.int(1...200)
            // A random chain of arrays and objects around a scalar (the scalar is one level).
            var text = generator.scalar().text
            for _ in 1..<depth {
                text = generator.int(0...1) == 0 ? "[\(generator.whitespace())\(text)]" : "{\"k\":\(text)}"
            }
            let accepted = (try? JSONValue.parse(Array(text.utf8))) != nil
            #expect(accepted == (depth <= JSONValue.maxNestingDepth), "depth \(depth): accepted \(accepted)")
        }
        #expect((try? JSONValue.parse(Array((String(repeating: "[", count: 64) + String(repeating: "]", count: 64)).utf8))) != nil)
        #expect((try? JSONValue.parse(Array((String(repeating: "[", count: 65) + String(repeating: "]", count: 65)).utf8))) == nil)
    }

    @Test("Foundation's leniencies are refused: trailing commas, a byte-order mark")
    func foundationLeniencies() {
        var generator = DocumentGenerator(seed: 0x5EED_0008)
        for _ in 0..<200 {
            let value = generator.value(depth: 2).text
            let cases = ["[\(value),]", "{\"a\":\(value),}", "[\(value) , \n]", "\u{FEFF}\(value)"]
            for text in cases {
                #expect((try? JSONValue.parse(Array(text.utf8))) == nil, "accepted: \(text.debugDescription)")
            }
        }
    }

    @Test("Numbers outside Double's range are refused; tiny ones become zero")
    func numberRange() throws {
        var generator = DocumentGenerator(seed: 0x5EED_0009)
        for _ in 0..<200 {
            let mantissa = "\(generator.int(1...9)).\(generator.int(0...999_999))"
            let sign = generator.int(0...1) == 0 ? "" : "-"
            let huge = "\(sign)\(mantissa)e\(generator.int(309...5000))"
            #expect((try? JSONValue.parse(Array(huge.utf8))) == nil, "accepted \(huge)")
            let tiny = "\(sign)\(mantissa)E-\(generator.int(400...5000))"
            #expect(try JSONValue.parse(Array(tiny.utf8)) == .number(0), "\(tiny)")
        }
        #expect(try JSONValue.parse(Array("1.7976931348623157e308".utf8)) == .number(.greatestFiniteMagnitude))
        #expect(try JSONValue.parse(Array("4.9e-324".utf8)) == .number(.leastNonzeroMagnitude))
    }
}

// MARK: - Comparing values

private enum JSONCompare {
    /// The class Foundation uses for `true` and `false` (a subclass of NSNumber, on every platform).
    static let foundationBoolType: ObjectIdentifier = {
        let value = try! JSONSerialization.jsonObject(with: Data("true".utf8), options: [.fragmentsAllowed])
        return ObjectIdentifier(type(of: value as AnyObject))
    }()

    /// Structural equality with strings compared scalar by scalar (Swift's `==` on String is canonical
    /// equivalence), and numbers by value and sign.
    static func strictlyEqual(_ a: JSONValue, _ b: JSONValue, signOfZero: Bool = true) -> Bool {
        switch (a, b) {
        case (.string(let x), .string(let y)): return x.unicodeScalars.elementsEqual(y.unicodeScalars)
        case (.number(let x), .number(let y)): return x == y && (!signOfZero || x.sign == y.sign)
        case (.bool(let x), .bool(let y)): return x == y
        case (.null, .null): return true
        case (.array(let x), .array(let y)):
            return x.count == y.count && zip(x, y).allSatisfy { strictlyEqual($0, $1, signOfZero: signOfZero) }
        case (.object(let x), .object(let y)):
            let exact = Dictionary(uniqueKeysWithValues: y.map { (Array($0.key.unicodeScalars), $0.value) })
            return x.count == y.count
                && x.allSatisfy { key, value in
                    exact[Array(key.unicodeScalars)].map { strictlyEqual(value, $0, signOfZero: signOfZero) } == true
                }
        default: return false
        }
    }

    /// Scalar by scalar; failing that, without U+FEFF (Foundation's quirk, see the suite's notes).
    static func sameScalars(_ a: String, _ b: String) -> Bool {
        a.unicodeScalars.elementsEqual(b.unicodeScalars) || scalarsWithoutBOM(a) == scalarsWithoutBOM(b)
    }

    static func scalarsWithoutBOM(_ string: String) -> [Unicode.Scalar] {
        string.unicodeScalars.filter { $0 != "\u{FEFF}" }
    }

    /// Nil when Foundation's value equals ours, otherwise where they differ.
    static func difference(foundation: Any, ours: JSONValue, path: String = "$") -> String? {
        switch ours {
        case .null:
            return foundation is NSNull ? nil : "\(path): ours null, Foundation \(foundation)"
        case .bool(let value):
            guard let number = foundation as? NSNumber, ObjectIdentifier(type(of: number)) == foundationBoolType,
                number.boolValue == value
            else { return "\(path): ours \(value), Foundation \(foundation)" }
            return nil
        case .number(let value):
            guard let number = foundation as? NSNumber, ObjectIdentifier(type(of: number)) != foundationBoolType else {
                return "\(path): ours \(value), Foundation \(foundation)"
            }
            let theirs = number.doubleValue
            if number is NSDecimalNumber {
                // Decimal → Double is not correctly rounded: allow a few ULPs.
                let scale = max(abs(value), abs(theirs))
                return abs(value - theirs) <= scale * 1e-14 ? nil : "\(path): ours \(value), Foundation decimal \(number)"
            }
            return theirs == value ? nil : "\(path): ours \(value), Foundation \(theirs)"
        case .string(let value):
            guard let string = foundation as? String, sameScalars(string, value) else {
                return "\(path): ours \(value.debugDescription), Foundation \(foundation)"
            }
            return nil
        case .array(let values):
            guard let array = foundation as? [Any], array.count == values.count else {
                return "\(path): ours an array of \(values.count), Foundation \(type(of: foundation))"
            }
            for (index, (theirs, ours)) in zip(array, values).enumerated() {
                if let difference = difference(foundation: theirs, ours: ours, path: "\(path)[\(index)]") { return difference }
            }
            return nil
        case .object(let members):
            guard let object = foundation as? [String: Any], object.count == members.count else {
                return "\(path): ours an object of \(members.count), Foundation \(type(of: foundation))"
            }
            let exact = Dictionary(object.map { (Array($0.key.unicodeScalars), $0.value) }, uniquingKeysWith: { a, _ in a })
            let withoutBOM = Dictionary(object.map { (scalarsWithoutBOM($0.key), $0.value) }, uniquingKeysWith: { a, _ in a })
            for (key, ours) in members {
                guard let theirs = exact[Array(key.unicodeScalars)] ?? withoutBOM[scalarsWithoutBOM(key)] else {
                    return "\(path): Foundation lacks \(key.debugDescription)"
                }
                if let difference = difference(foundation: theirs, ours: ours, path: "\(path).\(key)") { return difference }
            }
            return nil
        default:
            return "\(path): ours \(ours) is not something the parser produces"
        }
    }
}

/// Why our parser may refuse a document Foundation accepts: one of the documented differences.
private enum DocumentedDifference {
    static func explain(_ bytes: [UInt8], foundation: Any) -> String? {
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { return "byte-order mark" }
        let scan = LexicalScan(bytes)
        if scan.trailingComma { return "trailing comma" }
        if scan.escapedNUL { return "\\u0000" }
        if scan.memberNames > memberCount(foundation) { return "duplicate (or canonically equal) member names" }
        if depth(foundation) > JSONValue.maxNestingDepth { return "nesting" }
        return nil
    }

    static func memberCount(_ value: Any) -> Int {
        if let array = value as? [Any] { return array.map(memberCount).reduce(0, +) }
        if let object = value as? [String: Any] { return object.count + object.values.map(memberCount).reduce(0, +) }
        return 0
    }

    static func depth(_ value: Any) -> Int {
        if let array = value as? [Any] { return 1 + (array.map(depth).max() ?? 0) }
        if let object = value as? [String: Any] { return 1 + (object.values.map(depth).max() ?? 0) }
        return 1
    }

    /// A lexical pass over a document Foundation accepted (so its strings are well-formed).
    struct LexicalScan {
        var trailingComma = false
        var escapedNUL = false
        var memberNames = 0

        init(_ bytes: [UInt8]) {
            var index = 0
            var lastToken: UInt8 = 0  // the last byte outside strings that is not whitespace; '"' after a string
            while index < bytes.count {
                let byte = bytes[index]
                if byte == UInt8(ascii: "\"") {
                    var end = index + 1
                    while end < bytes.count, bytes[end] != UInt8(ascii: "\"") {
                        if bytes[end] == UInt8(ascii: "\\") {
                            if bytes[(end + 1)...].starts(with: Array("u0000".utf8)) { escapedNUL = true }
                            end += 1
                        }
                        end += 1
                    }
                    // A string followed by ':' is a member name.
                    var next = end + 1
                    while next < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[next]) { next += 1 }
                    if next < bytes.count, bytes[next] == UInt8(ascii: ":") { memberNames += 1 }
                    index = end + 1
                    lastToken = UInt8(ascii: "\"")
                    continue
                }
                if (byte == UInt8(ascii: "]") || byte == UInt8(ascii: "}")) && lastToken == UInt8(ascii: ",") {
                    trailingComma = true
                }
                if ![0x20, 0x09, 0x0A, 0x0D].contains(byte) { lastToken = byte }
                index += 1
            }
        }
    }
}

// MARK: - The generator

/// Valid JSON text together with the value it denotes, built independently of both parsers; from a fixed seed
/// per test (`SeededGenerator`, SplitMix64), so every run checks the same documents.
private struct DocumentGenerator {
    var random: SeededGenerator

    init(seed: UInt64) { random = SeededGenerator(seed: seed) }

    mutating func int(_ range: ClosedRange<Int>) -> Int { Int.random(in: range, using: &random) }
    mutating func chance(_ probability: Double) -> Bool { Double.random(in: 0..<1, using: &random) < probability }

    mutating func whitespace() -> String {
        guard chance(0.25) else { return "" }
        return String((0..<int(1...3)).map { _ in [" ", "\t", "\n", "\r"][int(0...3)] })
    }

    mutating func wrapped(_ text: String) -> String { whitespace() + text + whitespace() }

    mutating func document() -> (text: String, value: JSONValue) {
        if chance(0.01) { return deep() }
        let value = chance(0.85) ? container(depth: 0) : scalar()
        return (wrapped(value.text), value.value)
    }

    /// A chain as deep as the bound allows (64 levels, counting the innermost value).
    mutating func deep() -> (text: String, value: JSONValue) {
        var (text, value) = scalar()
        for _ in 1..<JSONValue.maxNestingDepth {
            if chance(0.5) {
                (text, value) = ("[\(text)]", .array([value]))
            } else {
                (text, value) = ("{\"d\":\(text)}", .object(["d": value]))
            }
        }
        return (text, value)
    }

    mutating func value(depth: Int) -> (text: String, value: JSONValue) {
        chance(depth < 5 ? 0.35 : 0.0) ? container(depth: depth) : scalar()
    }

    mutating func container(depth: Int) -> (text: String, value: JSONValue) {
        let count = chance(0.1) ? 0 : int(1...6)
        if chance(0.5) {
            var texts: [String] = []
            var values: [JSONValue] = []
            for _ in 0..<count {
                let element = value(depth: depth + 1)
                texts.append(wrapped(element.text))
                values.append(element.value)
            }
            return ("[" + whitespace() + texts.joined(separator: ",") + "]", .array(values))
        }
        var texts: [String] = []
        var members: [String: JSONValue] = [:]
        for _ in 0..<count {
            // No U+FEFF in names: Foundation's quirk would merge "\u{FEFF}" with "" (see the suite's notes).
            let key = string(maxPieces: 3, allowBOM: false)
            // Unique as Swift Strings (canonical equivalence): equal names are a documented difference.
            guard members[key.value] == nil else { continue }
            let member = value(depth: depth + 1)
            members[key.value] = member.value
            texts.append(wrapped(key.text) + ":" + wrapped(member.text))
        }
        return ("{" + whitespace() + texts.joined(separator: ",") + "}", .object(members))
    }

    mutating func scalar() -> (text: String, value: JSONValue) {
        switch int(0...9) {
        case 0: return ("true", .bool(true))
        case 1: return ("false", .bool(false))
        case 2: return ("null", .null)
        case 3, 4, 5:
            let text = number()
            return (text, .number(Double(text)!))
        default:
            let string = string(maxPieces: 8)
            return (string.text, .string(string.value))
        }
    }

    static let specialNumbers = [
        "0", "-0", "-0.0", "0e0", "0E-0", "-0e+5", "1E+2", "100e-2", "0.1", "1e-7", "9007199254740993",
        "-9007199254740993", "18446744073709551615", "18446744073709551616", "-9223372036854775809",
        "123456789012345678901234567890", "0.1234567890123456789012345", "4.9e-324", "2.2250738585072014e-308",
        "1.7976931348623157e308", "-1.7976931348623157E+308", "1e-400", "999999999999999.9", "1e15", "1e16",
        "1699999999", "1.5e9",
    ]

    /// RFC 8259 number text, always within Double's range.
    mutating func number() -> String {
        if chance(0.15) { return Self.specialNumbers[int(0...Self.specialNumbers.count - 1)] }
        while true {
            var text = chance(0.3) ? "-" : ""
            if chance(0.2) {
                text += "0"
            } else {
                text += String(int(1...9)) + digits(int(0...(chance(0.1) ? 25 : 8)))
            }
            if chance(0.4) { text += "." + digits(int(1...(chance(0.1) ? 25 : 6))) }
            if chance(0.3) {
                text += ["e", "E"][int(0...1)] + ["", "+", "-"][int(0...2)] + String(int(0...(chance(0.1) ? 320 : 30)))
            }
            if Double(text)!.isFinite { return text }
        }
    }

    mutating func digits(_ count: Int) -> String {
        String((0..<count).map { _ in Character(String(int(0...9))) })
    }

    /// A string literal (with its quotes) and its value.
    mutating func string(maxPieces: Int, allowBOM: Bool = true) -> (text: String, value: String) {
        var text = "\""
        var value = String.UnicodeScalarView()
        for _ in 0..<int(0...maxPieces) { piece(&text, &value, allowBOM: allowBOM) }
        return (text + "\"", String(value))
    }

    /// The inside of a string literal (no quotes).
    mutating func stringContent(maxPieces: Int) -> String {
        var text = ""
        var value = String.UnicodeScalarView()
        for _ in 0..<int(0...maxPieces) { piece(&text, &value) }
        return text
    }

    mutating func piece(_ text: inout String, _ value: inout String.UnicodeScalarView, allowBOM: Bool = true) {
        switch int(0...9) {
        case 0, 1, 2:  // plain ASCII, including DEL, never '"' or '\'
            for _ in 0..<int(1...6) {
                var byte = UInt8(int(0x20...0x7F))
                if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") { byte = UInt8(ascii: "q") }
                text.unicodeScalars.append(Unicode.Scalar(byte))
                value.append(Unicode.Scalar(byte))
            }
        case 3:  // a two-character escape
            let escapes: [(String, Unicode.Scalar)] = [
                ("\\\"", "\""), ("\\\\", "\\"), ("\\/", "/"), ("\\b", "\u{08}"), ("\\f", "\u{0C}"), ("\\n", "\n"),
                ("\\r", "\r"), ("\\t", "\t"),
            ]
            let (escape, scalar) = escapes[int(0...escapes.count - 1)]
            text += escape
            value.append(scalar)
        case 4:  // \uXXXX of a BMP scalar: controls, ASCII, anything up to U+FFFF but surrogates and NUL
            var code: UInt32
            repeat {
                code = chance(0.3) ? UInt32(int(1...0x7F)) : UInt32(int(1...0xFFFF))
            } while (0xD800...0xDFFF).contains(code)
            text += "\\u" + hex4(code)
            value.append(Unicode.Scalar(code)!)
        case 5:  // a surrogate pair
            let code = UInt32(int(0x10000...0x10FFFF))
            let high = 0xD800 + ((code - 0x10000) >> 10)
            let low = 0xDC00 + ((code - 0x10000) & 0x3FF)
            text += "\\u" + hex4(high) + "\\u" + hex4(low)
            value.append(Unicode.Scalar(code)!)
        default:  // a raw scalar of 2, 3 or 4 UTF-8 bytes (or a combining mark, or U+2028)
            var code: UInt32
            switch int(0...4) {
            case 0: code = UInt32(int(0x80...0x7FF))
            case 1:
                repeat { code = UInt32(int(0x800...0xFFFF)) } while (0xD800...0xDFFF).contains(code)
            case 2: code = UInt32(int(0x10000...0x10FFFF))
            case 3: code = [0x0301, 0x0323, 0x2028, 0x2029, 0xFEFF, 0xFFFD][int(0...5)]
            default: code = UInt32(int(0xA0...0x17F))
            }
            if code == 0xFEFF && !allowBOM { code = 0xFEFE }
            text.unicodeScalars.append(Unicode.Scalar(code)!)
            value.append(Unicode.Scalar(code)!)
        }
    }

    mutating func hex4(_ code: UInt32) -> String {
        let hex = String(code, radix: 16)
        let padded = String(repeating: "0", count: 4 - hex.count) + hex
        return chance(0.5) ? padded.uppercased() : padded
    }

    /// One to three byte-level mutations: delete, insert, replace, duplicate a slice; sometimes also one of
    /// the documented differences (a trailing comma, `\u0000` after a quote, a byte-order mark).
    mutating func mutated(_ original: [UInt8]) -> [UInt8] {
        var bytes = original
        if chance(0.1) {
            switch int(0...2) {
            case 0:
                let closings = bytes.indices.filter { bytes[$0] == UInt8(ascii: "]") || bytes[$0] == UInt8(ascii: "}") }
                if let at = closings.randomElement(using: &random) { bytes.insert(UInt8(ascii: ","), at: at) }
            case 1:
                let quotes = bytes.indices.filter { bytes[$0] == UInt8(ascii: "\"") }
                if let at = quotes.randomElement(using: &random) { bytes.insert(contentsOf: Array(#"\u0000"#.utf8), at: at + 1) }
            default:
                bytes.insert(contentsOf: [0xEF, 0xBB, 0xBF], at: 0)
            }
            if chance(0.5) { return bytes }
        }
        let alphabet = Array(#"{}[],:"\ 0123456789.eE+-tfnulraux/"#.utf8) + [0x00, 0x09, 0x1F, 0x7F, 0x80, 0xC3, 0xA9, 0xED, 0xFF]
        for _ in 0..<int(1...3) {
            let position = int(0...bytes.count)
            switch int(0...3) {
            case 0 where !bytes.isEmpty: bytes.remove(at: min(position, bytes.count - 1))
            case 1: bytes.insert(alphabet[int(0...alphabet.count - 1)], at: position)
            case 2 where !bytes.isEmpty: bytes[min(position, bytes.count - 1)] = alphabet[int(0...alphabet.count - 1)]
            default:
                guard !bytes.isEmpty else { continue }
                let start = min(position, bytes.count - 1)
                let end = min(bytes.count, start + int(1...8))
                bytes.insert(contentsOf: bytes[start..<end], at: int(0...bytes.count))
            }
        }
        return bytes
    }
}
