/// A strict RFC 8259 parser into `JSONValue`, over raw bytes.
///
/// Why not `JSONDecoder`: decoding an untyped value through `Decodable` means trying each type in turn and
/// throwing on every miss, which made JSON the largest cost of receiving a SET. This parser also refuses what
/// PostgreSQL's jsonb would refuse later (lone surrogates, NUL), and bounds nesting so hostile input cannot
/// exhaust the stack.
public struct JSONParseError: Error, Sendable, Equatable {
    /// About where reading stopped, for a person looking at the input: not exact, and not kept the same from one
    /// release to the next (a string's UTF-8 is checked at its end).
    public let offset: Int
}

extension JSONValue {
    public static let maxNestingDepth = 64

    public static func parse(_ bytes: some Collection<UInt8>) throws(JSONParseError) -> JSONValue {
        let array = Array(bytes)
        var parser = Parser(bytes: array)
        parser.skipWhitespace()
        let value = try parser.parseValue(depth: 0)
        parser.skipWhitespace()
        guard parser.index == array.count else { throw JSONParseError(offset: parser.index) }
        return value
    }
}

private struct Parser {
    let bytes: [UInt8]
    var index = 0

    init(bytes: [UInt8]) { self.bytes = bytes }

    var error: JSONParseError { JSONParseError(offset: index) }

    mutating func skipWhitespace() {
        while index < bytes.count, bytes[index] == 0x20 || bytes[index] == 0x0A || bytes[index] == 0x0D || bytes[index] == 0x09 {
            index += 1
        }
    }

    mutating func parseValue(depth: Int) throws(JSONParseError) -> JSONValue {
        guard depth < JSONValue.maxNestingDepth, index < bytes.count else { throw error }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try parseObject(depth: depth)
        case UInt8(ascii: "["): return try parseArray(depth: depth)
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"):
            try expect("true")
            return .bool(true)
        case UInt8(ascii: "f"):
            try expect("false")
            return .bool(false)
        case UInt8(ascii: "n"):
            try expect("null")
            return .null
        default: return .number(try parseNumber())
        }
    }

    mutating func expect(_ literal: StaticString) throws(JSONParseError) {
        let count = literal.utf8CodeUnitCount
        guard index + count <= bytes.count else { throw error }
        for offset in 0..<count where bytes[index + offset] != literal.utf8Start[offset] { throw error }
        index += count
    }

    mutating func parseObject(depth: Int) throws(JSONParseError) -> JSONValue {
        var members: [String: JSONValue] = [:]
        try parseList(closing: UInt8(ascii: "}")) { (parser: inout Parser) throws(JSONParseError) in
            guard parser.index < parser.bytes.count, parser.bytes[parser.index] == UInt8(ascii: "\"") else { throw parser.error }
            let key = try parser.parseString()
            parser.skipWhitespace()
            guard parser.index < parser.bytes.count, parser.bytes[parser.index] == UInt8(ascii: ":") else { throw parser.error }
            parser.index += 1
            parser.skipWhitespace()
            let value = try parser.parseValue(depth: depth + 1)
            // A repeated member is ambiguous (RFC 8259 §4); refuse it rather than guess which one counts.
            guard members.updateValue(value, forKey: key) == nil else { throw parser.error }
        }
        return .object(members)
    }

    mutating func parseArray(depth: Int) throws(JSONParseError) -> JSONValue {
        var elements: [JSONValue] = []
        try parseList(closing: UInt8(ascii: "]")) { (parser: inout Parser) throws(JSONParseError) in
            elements.append(try parser.parseValue(depth: depth + 1))
        }
        return .array(elements)
    }

    /// From an opening bracket: `element (, element)*` up to `closing`, or nothing at all.
    mutating func parseList(
        closing: UInt8, _ element: (inout Parser) throws(JSONParseError) -> Void
    ) throws(JSONParseError) {
        index += 1
        skipWhitespace()
        if index < bytes.count, bytes[index] == closing {
            index += 1
            return
        }
        while true {
            skipWhitespace()
            try element(&self)
            skipWhitespace()
            guard index < bytes.count else { throw error }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
                continue
            }
            guard bytes[index] == closing else { throw error }
            index += 1
            return
        }
    }

    mutating func parseString() throws(JSONParseError) -> String {
        index += 1
        let start = index
        // Fast path: no escapes, so the string is the bytes between the quotes.
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                let string = try validated(start..<index)
                index += 1
                return string
            }
            if byte == UInt8(ascii: "\\") { break }
            guard byte >= 0x20 else { throw error }
            index += 1
        }
        // With escapes (Foundation's encoder writes every "/" as "\/"): the unescaped UTF-8 is gathered and checked
        // once. An escape adds whole scalars, so it cannot complete or split a sequence of raw bytes around it: the
        // whole is valid exactly when each raw run is.
        var utf8: [UInt8] = []
        utf8.reserveCapacity(index - start + 32)
        utf8.append(contentsOf: bytes[start..<index])
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                index += 1
                guard let string = utf8.withUnsafeBufferPointer(Self.string(utf8:)) else { throw error }
                return string
            }
            guard byte >= 0x20 else { throw error }
            index += 1
            guard byte == UInt8(ascii: "\\") else {
                utf8.append(byte)
                continue
            }
            guard index < bytes.count else { throw error }
            let escape = bytes[index]
            index += 1
            switch escape {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): utf8.append(escape)
            case UInt8(ascii: "b"): utf8.append(0x08)
            case UInt8(ascii: "f"): utf8.append(0x0C)
            case UInt8(ascii: "n"): utf8.append(0x0A)
            case UInt8(ascii: "r"): utf8.append(0x0D)
            case UInt8(ascii: "t"): utf8.append(0x09)
            case UInt8(ascii: "u"): utf8.append(contentsOf: UTF8.encode(try parseUnicodeEscape())!)
            default: throw error
            }
        }
        throw error
    }

    /// The bytes in `range` as a string, if they are UTF-8.
    func validated(_ range: Range<Int>) throws(JSONParseError) -> String {
        guard let string = bytes.withUnsafeBufferPointer({ Self.string(utf8: UnsafeBufferPointer(rebasing: $0[range])) }) else {
            throw JSONParseError(offset: range.upperBound)
        }
        return string
    }

    /// `utf8` as a string, if it is UTF-8. ASCII, nearly every string of a SET, is decoded as it stands; the
    /// initializer that validates is generic over the encoding, and looked its types up at run time, for each string.
    static func string(utf8: UnsafeBufferPointer<UInt8>) -> String? {
        if utf8.allSatisfy({ $0 < 0x80 }) { return String(decoding: utf8, as: UTF8.self) }
        return String(validating: utf8, as: UTF8.self)
    }

    mutating func parseHex4() throws(JSONParseError) -> UInt32 {
        guard index + 4 <= bytes.count else { throw error }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw error
            }
            value = value << 4 | UInt32(digit)
            index += 1
        }
        return value
    }

    mutating func parseUnicodeEscape() throws(JSONParseError) -> Unicode.Scalar {
        let first = try parseHex4()
        var code = first
        if (0xD800...0xDBFF).contains(first) {
            guard index + 2 <= bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u")
            else { throw error }
            index += 2
            let second = try parseHex4()
            guard (0xDC00...0xDFFF).contains(second) else { throw error }
            code = 0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
        }
        guard code != 0, let scalar = Unicode.Scalar(code) else { throw error }
        return scalar
    }

    mutating func parseNumber() throws(JSONParseError) -> Double {
        let start = index
        func digits(_ parser: inout Parser) -> Int {
            let begin = parser.index
            while parser.index < parser.bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(parser.bytes[parser.index]) {
                parser.index += 1
            }
            return parser.index - begin
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "-") { index += 1 }
        guard index < bytes.count else { throw error }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
        } else {
            guard digits(&self) > 0 else { throw error }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            index += 1
            guard digits(&self) > 0 else { throw error }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
            guard digits(&self) > 0 else { throw error }
        }
        guard let value = Double(try validated(start..<index)), value.isFinite else { throw error }
        return value
    }
}
