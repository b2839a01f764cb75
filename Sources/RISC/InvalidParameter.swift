/// A parameter that cannot be used (a query string's, a command-line option's, a configured value's), named so the
/// caller can say which.
public struct InvalidParameter: Error, Sendable, CustomStringConvertible {
    public let name: String
    public let problem: String
    public var description: String { "\(name): \(problem)" }

    public init(name: String, problem: String) {
        self.name = name
        self.problem = problem
    }
}
