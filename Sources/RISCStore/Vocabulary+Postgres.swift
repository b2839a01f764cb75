import PostgresNIO
import RISC

// The typed vocabulary binds as text, and text arrays, in every query: a misspelt status or kind does not compile.
extension EventStatus: PostgresCodable, PostgresArrayEncodable, PostgresArrayDecodable {
    public static var psqlArrayType: PostgresDataType { .textArray }
}

extension ActionKind: PostgresCodable, PostgresArrayEncodable, PostgresArrayDecodable {
    public static var psqlArrayType: PostgresDataType { .textArray }
}

extension NotificationStatus: PostgresCodable, PostgresArrayEncodable, PostgresArrayDecodable {
    public static var psqlArrayType: PostgresDataType { .textArray }
}
