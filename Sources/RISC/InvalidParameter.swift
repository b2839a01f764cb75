/// A parameter that cannot be used (a query string's, a command-line option's, a configured value's), named so the
/// caller can say which.
public struct InvalidParameter: Error, Sendable, CustomStringConvertible {
    public let name: String
    public let problem: String

    public init(name: String, problem: String) { (self.name, self.problem) = (name, problem) }

    public var description: String { "\(name): \(problem)" }
}
