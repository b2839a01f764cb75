/// A subscriber as given by an operator, checked: an https URL (http on loopback), a `whsec_` secret
/// (generated when none is given), and action kinds from `ActionKind.notified` (nil: all).
public struct NewSubscriber: Sendable {
    public let url: String
    public let secret: String
    public let actions: [ActionKind]?

    public init(url: String, secret: String?, actions: [String]?) throws(InvalidParameter) {
        if let problem = URLPolicy.subscriberURLProblem(url) { throw .init(name: "url", problem: problem) }
        if let secret, StandardWebhook.key(secret: secret) == nil {
            throw .init(name: "secret", problem: "must be whsec_ followed by 24 to 64 bytes in base64")
        }
        var kinds: [ActionKind]?
        if let actions {
            let names = ActionKind.notified.map(\.rawValue)
            kinds = try actions.map { name throws(InvalidParameter) in
                guard let kind = ActionKind(rawValue: name), ActionKind.notified.contains(kind) else {
                    throw .init(name: "actions", problem: "'\(name)' is not one of \(names.joined(separator: ", "))")
                }
                return kind
            }
            guard !(kinds ?? []).isEmpty else { throw .init(name: "actions", problem: "must name at least one action kind") }
        }
        self.url = url
        self.secret = secret ?? StandardWebhook.generateSecret()
        self.actions = kinds
    }
}
