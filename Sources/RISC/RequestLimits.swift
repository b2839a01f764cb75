/// Bounds on what a client may send.
public enum RequestLimits {
    /// The largest request body any endpoint reads: SETs, ID tokens and the JSON bodies are small, and a larger
    /// body is refused (413) before any of it is parsed. Hummingbird's default would be 2 MiB.
    public static let maxBodyBytes = 64 * 1024
}
