import AsyncHTTPClient
import NIOCore
import NIOPosix

#if canImport(Glibc)
import Glibc
#endif

/// What went wrong on the network, as a person would say it: "connection refused", not NIO's nested
/// description of every address it tried.
public enum NetworkErrors {
    public static func describe(_ error: any Error) -> String {
        if let connection = error as? NIOConnectionError {
            if let first = connection.connectionErrors.first { return describe(first.error) }
            if let dns = connection.dnsAError ?? connection.dnsAAAAError { return "unknown host (\(dns))" }
        }
        if let io = error as? IOError { return String(cString: strerror(io.errnoCode)).lowercased() }
        if let client = error as? HTTPClientError {
            switch client {
            case .connectTimeout: return "no connection within the timeout"
            case .deadlineExceeded: return "no answer within the timeout"
            default: break
            }
        }
        return String(describing: error)
    }
}
