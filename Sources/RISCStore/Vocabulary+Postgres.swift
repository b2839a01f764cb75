import NIOCore
import PostgresNIO
import RISC

// The typed vocabulary binds as text, and text arrays, in every query: a misspelt status or kind does not compile.
//
// The enums are `Encodable` (the admin API's JSON), and postgres-nio offers two defaults that would then both fit:
// `PostgresEncodable where Self: Encodable` (jsonb, binding a status as the JSON string `"dead"`) and
// `where Self: RawRepresentable` (the raw value). Every member is written out below instead, once for all three.

/// A word of the vocabulary: bound as its raw value, as text (text[] in arrays). These members are more specialised
/// than either of postgres-nio's defaults (this protocol implies both `Encodable` and `RawRepresentable`), so they
/// are the witnesses.
protocol TextVocabulary: PostgresCodable, PostgresArrayEncodable, PostgresArrayDecodable, Encodable, RawRepresentable<String> {}

extension TextVocabulary {
    public static var psqlType: PostgresDataType { .text }
    public static var psqlFormat: PostgresFormat { .binary }
    public static var psqlArrayType: PostgresDataType { .textArray }

    public func encode<JSONEncoder: PostgresJSONEncoder>(into byteBuffer: inout ByteBuffer, context: PostgresEncodingContext<JSONEncoder>) {
        rawValue.encode(into: &byteBuffer, context: context)
    }

    public init<JSONDecoder: PostgresJSONDecoder>(
        from byteBuffer: inout ByteBuffer, type: PostgresDataType, format: PostgresFormat, context: PostgresDecodingContext<JSONDecoder>
    ) throws {
        self = try vocabulary(from: &byteBuffer, type: type, format: format, context: context)
    }
}

extension EventStatus: TextVocabulary {}
extension ActionKind: TextVocabulary {}
extension NotificationStatus: TextVocabulary {}

/// The word a text cell holds. A word the vocabulary does not have (or a cell that is not text) fails as any cell
/// that cannot be decoded does: a `PostgresDecodingError`.
private func vocabulary<Word: RawRepresentable<String>, JSONDecoder: PostgresJSONDecoder>(
    from byteBuffer: inout ByteBuffer, type: PostgresDataType, format: PostgresFormat, context: PostgresDecodingContext<JSONDecoder>
) throws -> Word {
    guard let text = try? String(from: &byteBuffer, type: type, format: format, context: context), let word = Word(rawValue: text) else {
        throw PostgresDecodingError.Code.failure
    }
    return word
}
