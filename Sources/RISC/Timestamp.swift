import Foundation

#if canImport(Glibc)
import Glibc
#endif

extension JSONValue {
    /// `2026-11-22T05:03:28Z` (RFC 3339, UTC, whole seconds), as JSONEncoder's `.iso8601` writes it, without
    /// a formatter per call.
    public static func timestamp(_ date: Date) -> JSONValue {
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return .string(
            "\(parts.tm_year + 1900)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))T\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec))Z")
    }
}
