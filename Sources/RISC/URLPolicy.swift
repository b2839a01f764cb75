import Foundation

/// Where the service may fetch keys from or send credentials to: `https`, or plain `http` to this machine
/// only (the development transmitter). Anything else can be read or altered on the way.
public enum URLPolicy {
    public static func isHTTPSOrLoopback(_ text: String) -> Bool {
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), let host = url.host, !host.isEmpty
        else { return false }
        return scheme == "https" || (scheme == "http" && isLoopback(host: host))
    }

    /// The URL as listings show it: any user-info and query string replaced, since either may carry a credential.
    public static func redacted(_ text: String) -> String {
        guard var components = URLComponents(string: text) else { return "(unreadable URL)" }
        if components.user != nil || components.password != nil {
            components.user = "redacted"
            components.password = nil
        }
        if components.query != nil { components.query = "redacted" }
        return components.string ?? "(unreadable URL)"
    }

    /// `localhost`, `::1`, or an address in 127.0.0.0/8.
    public static func isLoopback(host: String) -> Bool {
        let host = host.lowercased().trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        if host == "localhost" || host == "::1" { return true }
        let octets = host.split(separator: ".", omittingEmptySubsequences: false)
        return octets.count == 4 && octets[0] == "127" && octets.allSatisfy { UInt8($0) != nil }
    }
}
