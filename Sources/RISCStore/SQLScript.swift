import Foundation

/// Splits a SQL script into statements at top-level semicolons, so that each runs through the extended
/// protocol inside one transaction. Quotes, dollar-quoted bodies and comments are respected.
public enum SQLScript {
    public static func statements(in script: String) -> [String] {
        let chars = Array(script.unicodeScalars)
        var statements: [String] = []
        var current = String.UnicodeScalarView()
        var index = 0

        func flush() {
            let text = String(current).trimmingCharacters(in: .whitespacesAndNewlines)
            if !text.isEmpty, !isOnlyComments(text) { statements.append(text) }
            current = String.UnicodeScalarView()
        }

        while index < chars.count {
            let char = chars[index]
            let next: Unicode.Scalar? = index + 1 < chars.count ? chars[index + 1] : nil
            if char == "-" && next == "-" {
                while index < chars.count && chars[index] != "\n" {
                    current.append(chars[index])
                    index += 1
                }
                continue
            }
            if char == "/" && next == "*" {
                while index < chars.count && !(chars[index] == "*" && index + 1 < chars.count && chars[index + 1] == "/") {
                    current.append(chars[index])
                    index += 1
                }
                if index < chars.count {
                    current.append(contentsOf: [chars[index], chars[index + 1]])
                    index += 2
                }
                continue
            }
            if char == "'" || char == "\"" {
                current.append(char)
                index += 1
                while index < chars.count {
                    current.append(chars[index])
                    if chars[index] == char {
                        // A doubled quote is an escaped quote, not the end.
                        if index + 1 < chars.count && chars[index + 1] == char {
                            current.append(chars[index + 1])
                            index += 2
                            continue
                        }
                        index += 1
                        break
                    }
                    index += 1
                }
                continue
            }
            if char == "$", let tag = dollarTag(chars, at: index) {
                current.append(contentsOf: tag)
                index += tag.count
                while index < chars.count {
                    if chars[index] == "$", index + tag.count <= chars.count, Array(chars[index..<index + tag.count]) == tag {
                        current.append(contentsOf: tag)
                        index += tag.count
                        break
                    }
                    current.append(chars[index])
                    index += 1
                }
                continue
            }
            if char == ";" {
                flush()
                index += 1
                continue
            }
            current.append(char)
            index += 1
        }
        flush()
        return statements
    }

    /// `$$` or `$tag$` starting at `index`, if there is one.
    private static func dollarTag(_ chars: [Unicode.Scalar], at index: Int) -> [Unicode.Scalar]? {
        var end = index + 1
        while end < chars.count, chars[end] == "_" || chars[end].properties.isAlphabetic || ("0"..."9").contains(chars[end]) {
            end += 1
        }
        guard end < chars.count, chars[end] == "$" else { return nil }
        return Array(chars[index...end])
    }

    private static func isOnlyComments(_ text: String) -> Bool {
        text.split(separator: "\n").allSatisfy { $0.trimmingCharacters(in: .whitespaces).hasPrefix("--") }
    }
}
