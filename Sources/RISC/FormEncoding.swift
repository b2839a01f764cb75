import Foundation

/// `application/x-www-form-urlencoded` (HTML form encoding), in both directions.
public enum FormEncoding {
    static let unreserved = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")

    public static func encode(_ fields: [String: String]) -> String {
        fields.sorted { $0.key < $1.key }.map { key, value in
            "\(escape(key))=\(escape(value))"
        }.joined(separator: "&")
    }

    public static func escape(_ value: String) -> String {
        value.addingPercentEncoding(withAllowedCharacters: unreserved) ?? value
    }

    public static func decode(_ body: String) -> [String: String] {
        var fields: [String: String] = [:]
        for pair in body.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let key = unescape(parts[0])
            let value = parts.count > 1 ? unescape(parts[1]) : ""
            if fields[key] == nil { fields[key] = value }
        }
        return fields
    }

    static func unescape(_ value: Substring) -> String {
        value.replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? String(value)
    }
}
