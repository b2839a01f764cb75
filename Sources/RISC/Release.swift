/// This release of risc-receiver: what `--version` prints (with the commit), and what `migrate` records beside the
/// routines it applies, so that an older release never rolls them back. CHANGELOG.md says what each one changed.
public enum Release {
    public static let version = "0.1.0"

    /// Whether `version` ("MAJOR.MINOR.PATCH") is a later release than `other`. Anything unreadable counts as 0.
    public static func isNewer(_ version: String, than other: String) -> Bool {
        func parts(_ text: String) -> [Int] {
            let numbers = text.split(separator: ".").map { Int($0) ?? 0 }
            return numbers + Array(repeating: 0, count: max(0, 3 - numbers.count))
        }
        return parts(other).lexicographicallyPrecedes(parts(version))
    }
}
