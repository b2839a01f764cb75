extension JSONValue {
    /// Compact JSON with sorted keys, so equal values serialize identically.
    public var serialized: String {
        // Written as UTF-8 bytes, made a string once: appending to a String checks its capacity and form each time.
        var output: [UInt8] = []
        output.reserveCapacity(256)
        write(to: &output)
        return String(decoding: output, as: UTF8.self)
    }

    private func write(to output: inout [UInt8]) {
        switch self {
        case .null: output.append(contentsOf: "null".utf8)
        case .bool(let value): output.append(contentsOf: (value ? "true" : "false").utf8)
        case .number(let value):
            if value == value.rounded(), abs(value) < 1e15 {
                output.append(contentsOf: String(Int64(value)).utf8)
            } else {
                output.append(contentsOf: "\(value)".utf8)
            }
        case .string(let value): Self.writeString(value, to: &output)
        case .verbatim(let text): output.append(contentsOf: text.utf8)
        case .array(let values):
            output.append(UInt8(ascii: "["))
            for (index, value) in values.enumerated() {
                if index > 0 { output.append(UInt8(ascii: ",")) }
                value.write(to: &output)
            }
            output.append(UInt8(ascii: "]"))
        case .object(let members):
            output.append(UInt8(ascii: "{"))
            for (index, member) in members.sorted(by: { Self.byteOrder($0.key, $1.key) }).enumerated() {
                if index > 0 { output.append(UInt8(ascii: ",")) }
                Self.writeString(member.key, to: &output)
                output.append(UInt8(ascii: ":"))
                member.value.write(to: &output)
            }
            output.append(UInt8(ascii: "}"))
        }
    }

    /// A total order on keys: their UTF-8 bytes. Swift's `String <` compares canonically equivalent forms and
    /// is not total across them ("\u{e9}5" and "e\u{301}" are neither less, greater nor equal), so sorting with
    /// it would follow dictionary order and equal values could serialize differently (found by fuzzing).
    public static func byteOrder(_ a: String, _ b: String) -> Bool {
        a.utf8.lexicographicallyPrecedes(b.utf8)
    }

    private static let hexDigits = Array("0123456789abcdef".utf8)

    /// Byte by byte: only ASCII is escaped (a quote, a backslash, a control character), and the bytes of every other
    /// scalar are never ASCII, so they pass through as they are.
    private static func writeString(_ value: String, to output: inout [UInt8]) {
        output.append(UInt8(ascii: "\""))
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "\""): output.append(contentsOf: #"\""#.utf8)
            case UInt8(ascii: "\\"): output.append(contentsOf: #"\\"#.utf8)
            case 0x0A: output.append(contentsOf: #"\n"#.utf8)
            case 0x0D: output.append(contentsOf: #"\r"#.utf8)
            case 0x09: output.append(contentsOf: #"\t"#.utf8)
            case ..<0x20:
                output.append(contentsOf: #"\u00"#.utf8)
                output.append(hexDigits[Int(byte >> 4)])
                output.append(hexDigits[Int(byte & 0x0F)])
            default: output.append(byte)
            }
        }
        output.append(UInt8(ascii: "\""))
    }
}
