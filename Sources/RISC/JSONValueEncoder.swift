import Foundation

/// Encodes any `Encodable` into a `JSONValue`, so typed responses go out through the one serializer
/// (sorted keys, RFC 3339 timestamps) rather than `JSONEncoder`. Four choices differ from `JSONEncoder`'s:
/// a nil optional is written as `null`, never left out, so every field of a response is always present;
/// a `Date` is an RFC 3339 timestamp; a `JSONValue` goes in as it is, so `.verbatim` claims stay verbatim;
/// and a property's name is written in snake_case (`nextCursor` is `next_cursor`, `webhookID` is `webhook_id`),
/// the style of every name in the admin API, while a dictionary's keys are written as they are.
public struct JSONValueEncoder: Sendable {
    public init() {}

    public func encode(_ value: some Encodable) throws -> JSONValue {
        let root = Node()
        try root.store(value, codingPath: [])
        return root.json
    }
}

/// One value under construction. A class, because a container hands out nested containers that write into it
/// after the container itself has gone.
private final class Node {
    var scalar: JSONValue?
    var members: [String: Node]?
    var elements: [Node]?

    var json: JSONValue {
        if let members { return .object(members.mapValues(\.json)) }
        if let elements { return .array(elements.map(\.json)) }
        return scalar ?? .object([:])
    }

    func store(_ value: some Encodable, codingPath: [any CodingKey]) throws {
        switch value {
        case let json as JSONValue: scalar = json
        case let date as Date: scalar = .timestamp(date)
        default:
            let names: MemberNames = value is any KeysAsGiven ? .asGiven : .snakeCase
            try value.encode(to: NodeEncoder(node: self, codingPath: codingPath, names: names))
        }
    }

    /// A new value at `name`, replacing any before it.
    func member(_ name: String) -> Node {
        let child = Node()
        if members == nil { members = [:] }
        members?[name] = child
        return child
    }

    /// The container at `name`, made if absent: an encoder may add members to an object written earlier.
    func container(at name: String) -> Node {
        members?[name] ?? member(name)
    }

    func appendElement() -> Node {
        let child = Node()
        if elements == nil { elements = [] }
        elements?.append(child)
        return child
    }
}

/// A dictionary's keys are data (statuses, event types, subjects), not property names.
private protocol KeysAsGiven {}
extension Dictionary: KeysAsGiven {}

/// How a keyed container writes its keys.
private enum MemberNames {
    case snakeCase
    case asGiven

    func name(of key: some CodingKey) -> String {
        switch self {
        case .asGiven: key.stringValue
        case .snakeCase: Self.snakeCased(key.stringValue)
        }
    }

    /// `nextCursor` → `next_cursor`, `webhookID` → `webhook_id`, `URLPolicy` → `url_policy`: a word starts at an
    /// upper-case letter after a lower-case letter or digit, and at the last capital of a run followed by lower case.
    static func snakeCased(_ name: String) -> String {
        let characters = Array(name)
        var result = ""
        for (index, character) in characters.enumerated() {
            if character.isUppercase, index > 0 {
                let previous = characters[index - 1]
                let nextIsLowercase = index + 1 < characters.count && characters[index + 1].isLowercase
                if previous.isLowercase || previous.isNumber || (previous.isUppercase && nextIsLowercase) {
                    result.append("_")
                }
            }
            result += character.lowercased()
        }
        return result
    }
}

private struct NodeEncoder: Encoder {
    let node: Node
    let codingPath: [any CodingKey]
    var names = MemberNames.snakeCase
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        if node.members == nil { node.members = [:] }
        return KeyedEncodingContainer(KeyedNodeContainer<Key>(node: node, codingPath: codingPath, names: names))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        if node.elements == nil { node.elements = [] }
        return UnkeyedNodeContainer(node: node, codingPath: codingPath)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer { SingleNodeContainer(node: node, codingPath: codingPath) }
}

private struct KeyedNodeContainer<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let node: Node
    let codingPath: [any CodingKey]
    let names: MemberNames

    private func member(_ key: Key) -> Node { node.member(names.name(of: key)) }

    mutating func encodeNil(forKey key: Key) throws { member(key).scalar = .null }
    mutating func encode(_ value: Bool, forKey key: Key) throws { member(key).scalar = .bool(value) }
    mutating func encode(_ value: String, forKey key: Key) throws { member(key).scalar = .string(value) }
    mutating func encode(_ value: Double, forKey key: Key) throws { member(key).scalar = .number(value) }
    mutating func encode(_ value: Float, forKey key: Key) throws { member(key).scalar = .number(Double(value)) }
    mutating func encode(_ value: Int, forKey key: Key) throws { member(key).scalar = .number(Double(value)) }
    mutating func encode(_ value: Int8, forKey key: Key) throws { member(key).scalar = .number(Double(value)) }
    mutating func encode(_ value: Int16, forKey key: Key) throws { member(key).scalar = .number(Double(value)) }
    mutating func encode(_ value: Int32, forKey key: Key) throws { member(key).scalar = .number(Double(value)) }
    mutating func encode(_ value: Int64, forKey key: Key) throws { member(key).scalar = .number(Double(value)) }
    mutating func encode(_ value: UInt, forKey key: Key) throws { member(key).scalar = .number(Double(value)) }
    mutating func encode(_ value: UInt8, forKey key: Key) throws { member(key).scalar = .number(Double(value)) }
    mutating func encode(_ value: UInt16, forKey key: Key) throws { member(key).scalar = .number(Double(value)) }
    mutating func encode(_ value: UInt32, forKey key: Key) throws { member(key).scalar = .number(Double(value)) }
    mutating func encode(_ value: UInt64, forKey key: Key) throws { member(key).scalar = .number(Double(value)) }
    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        try member(key).store(value, codingPath: codingPath + [key])
    }

    // A synthesized `Encodable` calls these for optional properties; the defaults would leave a nil out.
    mutating func encodeIfPresent(_ value: Bool?, forKey key: Key) throws { try encodeOrNil(value, forKey: key) }
    mutating func encodeIfPresent(_ value: String?, forKey key: Key) throws { try encodeOrNil(value, forKey: key) }
    mutating func encodeIfPresent(_ value: Double?, forKey key: Key) throws { try encodeOrNil(value, forKey: key) }
    mutating func encodeIfPresent(_ value: Float?, forKey key: Key) throws { try encodeOrNil(value, forKey: key) }
    mutating func encodeIfPresent(_ value: Int?, forKey key: Key) throws { try encodeOrNil(value, forKey: key) }
    mutating func encodeIfPresent(_ value: Int8?, forKey key: Key) throws { try encodeOrNil(value, forKey: key) }
    mutating func encodeIfPresent(_ value: Int16?, forKey key: Key) throws { try encodeOrNil(value, forKey: key) }
    mutating func encodeIfPresent(_ value: Int32?, forKey key: Key) throws { try encodeOrNil(value, forKey: key) }
    mutating func encodeIfPresent(_ value: Int64?, forKey key: Key) throws { try encodeOrNil(value, forKey: key) }
    mutating func encodeIfPresent(_ value: UInt?, forKey key: Key) throws { try encodeOrNil(value, forKey: key) }
    mutating func encodeIfPresent(_ value: UInt8?, forKey key: Key) throws { try encodeOrNil(value, forKey: key) }
    mutating func encodeIfPresent(_ value: UInt16?, forKey key: Key) throws { try encodeOrNil(value, forKey: key) }
    mutating func encodeIfPresent(_ value: UInt32?, forKey key: Key) throws { try encodeOrNil(value, forKey: key) }
    mutating func encodeIfPresent(_ value: UInt64?, forKey key: Key) throws { try encodeOrNil(value, forKey: key) }
    mutating func encodeIfPresent<T: Encodable>(_ value: T?, forKey key: Key) throws { try encodeOrNil(value, forKey: key) }

    private mutating func encodeOrNil<T: Encodable>(_ value: T?, forKey key: Key) throws {
        if let value { try encode(value, forKey: key) } else { try encodeNil(forKey: key) }
    }

    mutating func nestedContainer<NestedKey: CodingKey>(
        keyedBy keyType: NestedKey.Type, forKey key: Key
    )
        -> KeyedEncodingContainer<NestedKey>
    {
        NodeEncoder(node: node.container(at: names.name(of: key)), codingPath: codingPath + [key]).container(keyedBy: keyType)
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        NodeEncoder(node: node.container(at: names.name(of: key)), codingPath: codingPath + [key]).unkeyedContainer()
    }

    mutating func superEncoder() -> any Encoder { NodeEncoder(node: node.container(at: "super"), codingPath: codingPath) }
    mutating func superEncoder(forKey key: Key) -> any Encoder {
        NodeEncoder(node: node.container(at: names.name(of: key)), codingPath: codingPath + [key])
    }
}

private struct UnkeyedNodeContainer: UnkeyedEncodingContainer {
    let node: Node
    let codingPath: [any CodingKey]
    var count: Int { node.elements?.count ?? 0 }

    mutating func encodeNil() throws { node.appendElement().scalar = .null }
    mutating func encode(_ value: Bool) throws { node.appendElement().scalar = .bool(value) }
    mutating func encode(_ value: String) throws { node.appendElement().scalar = .string(value) }
    mutating func encode(_ value: Double) throws { node.appendElement().scalar = .number(value) }
    mutating func encode(_ value: Float) throws { node.appendElement().scalar = .number(Double(value)) }
    mutating func encode(_ value: Int) throws { node.appendElement().scalar = .number(Double(value)) }
    mutating func encode(_ value: Int8) throws { node.appendElement().scalar = .number(Double(value)) }
    mutating func encode(_ value: Int16) throws { node.appendElement().scalar = .number(Double(value)) }
    mutating func encode(_ value: Int32) throws { node.appendElement().scalar = .number(Double(value)) }
    mutating func encode(_ value: Int64) throws { node.appendElement().scalar = .number(Double(value)) }
    mutating func encode(_ value: UInt) throws { node.appendElement().scalar = .number(Double(value)) }
    mutating func encode(_ value: UInt8) throws { node.appendElement().scalar = .number(Double(value)) }
    mutating func encode(_ value: UInt16) throws { node.appendElement().scalar = .number(Double(value)) }
    mutating func encode(_ value: UInt32) throws { node.appendElement().scalar = .number(Double(value)) }
    mutating func encode(_ value: UInt64) throws { node.appendElement().scalar = .number(Double(value)) }
    mutating func encode<T: Encodable>(_ value: T) throws {
        try node.appendElement().store(value, codingPath: codingPath + [NamedKey(index: count)])
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        NodeEncoder(node: node.appendElement(), codingPath: codingPath).container(keyedBy: keyType)
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        NodeEncoder(node: node.appendElement(), codingPath: codingPath).unkeyedContainer()
    }

    mutating func superEncoder() -> any Encoder { NodeEncoder(node: node.appendElement(), codingPath: codingPath) }
}

private struct SingleNodeContainer: SingleValueEncodingContainer {
    let node: Node
    let codingPath: [any CodingKey]

    mutating func encodeNil() throws { node.scalar = .null }
    mutating func encode(_ value: Bool) throws { node.scalar = .bool(value) }
    mutating func encode(_ value: String) throws { node.scalar = .string(value) }
    mutating func encode(_ value: Double) throws { node.scalar = .number(value) }
    mutating func encode(_ value: Float) throws { node.scalar = .number(Double(value)) }
    mutating func encode(_ value: Int) throws { node.scalar = .number(Double(value)) }
    mutating func encode(_ value: Int8) throws { node.scalar = .number(Double(value)) }
    mutating func encode(_ value: Int16) throws { node.scalar = .number(Double(value)) }
    mutating func encode(_ value: Int32) throws { node.scalar = .number(Double(value)) }
    mutating func encode(_ value: Int64) throws { node.scalar = .number(Double(value)) }
    mutating func encode(_ value: UInt) throws { node.scalar = .number(Double(value)) }
    mutating func encode(_ value: UInt8) throws { node.scalar = .number(Double(value)) }
    mutating func encode(_ value: UInt16) throws { node.scalar = .number(Double(value)) }
    mutating func encode(_ value: UInt32) throws { node.scalar = .number(Double(value)) }
    mutating func encode(_ value: UInt64) throws { node.scalar = .number(Double(value)) }
    mutating func encode<T: Encodable>(_ value: T) throws { try node.store(value, codingPath: codingPath) }
}

private struct NamedKey: CodingKey {
    var stringValue: String
    var intValue: Int?

    init(_ name: String) { (stringValue, intValue) = (name, nil) }
    init(index: Int) { (stringValue, intValue) = ("Index \(index)", index) }
    init?(stringValue: String) { self.init(stringValue) }
    init?(intValue: Int) { self.init(index: intValue) }
}
