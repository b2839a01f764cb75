import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// An IPv4 or IPv6 address, and whether the service may send a subscriber's notifications to it.
public enum IPAddress: Sendable, Equatable, CustomStringConvertible {
    /// In host byte order.
    case v4(UInt32)
    /// 16 bytes.
    case v6([UInt8])

    /// A host written as an address, in every spelling the system's resolver takes: IPv6 (with or without
    /// brackets), and IPv4 as `inet_aton` reads it, which includes `2852039166`, `0xa9fea9fe`, `0251.0376.0251.0376`
    /// and `169.254.43518`. Nil for a name.
    public init?(literal text: String) {
        var host = text
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        // A zone (fe80::1%eth0) names an interface, not another address.
        let unzoned = host.split(separator: "%", maxSplits: 1).first.map(String.init) ?? host
        // inet_aton stops at whitespace ("127.0.0.1 x" would pass): only the characters of its number forms.
        var v4 = in_addr()
        if host.allSatisfy({ $0.isHexDigit || $0 == "." || $0 == "x" || $0 == "X" }), inet_aton(host, &v4) != 0 {
            self = .v4(UInt32(bigEndian: v4.s_addr))
            return
        }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, unzoned, &v6) == 1 {
            self = .v6(withUnsafeBytes(of: &v6) { Array($0) })
            return
        }
        return nil
    }

    /// From a resolver's answer (`getaddrinfo`).
    public init?(socketAddress pointer: UnsafePointer<sockaddr>) {
        switch Int32(pointer.pointee.sa_family) {
        case AF_INET:
            let address = pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_addr }
            self = .v4(UInt32(bigEndian: address.s_addr))
        case AF_INET6:
            var address = pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { $0.pointee.sin6_addr }
            self = .v6(withUnsafeBytes(of: &address) { Array($0) })
        default:
            return nil
        }
    }

    /// Never a subscriber's destination: link-local (cloud metadata services live there), unspecified, multicast
    /// and broadcast addresses, the metadata services outside link-local, and any IPv6 form that carries such an
    /// IPv4 address (mapped, translated, compatible, NAT64, 6to4, Teredo). Private and loopback addresses are
    /// allowed: the app's services live there.
    public var isForbiddenDestination: Bool {
        switch self {
        case .v4(let address):
            let first = address >> 24
            return first == 0  // 0.0.0.0/8: unspecified, "this network"
                || address >> 16 == 0xA9FE  // 169.254.0.0/16: link-local
                || address >> 28 == 0xE  // 224.0.0.0/4: multicast
                || address == 0xFFFF_FFFF  // limited broadcast
                || Self.metadataV4.contains(address)
        case .v6(let bytes):
            if bytes.allSatisfy({ $0 == 0 }) { return true }  // ::
            if bytes[0] == 0xFE && bytes[1] & 0xC0 == 0x80 { return true }  // fe80::/10: link-local
            if bytes[0] == 0xFF { return true }  // ff00::/8: multicast
            if Self.metadataV6.contains(bytes) { return true }
            return embedded.contains(where: \.isForbiddenDestination)
        }
    }

    /// The IPv4 addresses an IPv6 address reaches or carries: the last 32 bits of an IPv4-mapped (::ffff:a.b.c.d),
    /// IPv4-translated (::ffff:0:a.b.c.d), IPv4-compatible (::a.b.c.d) or NAT64 (64:ff9b::a.b.c.d) address; bits
    /// 16-48 of a 6to4 address (2002::/16); and both ends of a Teredo address (2001:0::/32): the server in bits
    /// 32-64, the client in the last 32 bits, inverted.
    var embedded: [IPAddress] {
        guard case .v6(let bytes) = self else { return [] }
        func v4(at index: Int) -> UInt32 {
            UInt32(bytes[index]) << 24 | UInt32(bytes[index + 1]) << 16 | UInt32(bytes[index + 2]) << 8 | UInt32(bytes[index + 3])
        }
        let last = v4(at: 12)
        let mapped = bytes[0..<10].allSatisfy { $0 == 0 } && bytes[10] == 0xFF && bytes[11] == 0xFF
        let translated = bytes[0..<8].allSatisfy { $0 == 0 } && bytes[8] == 0xFF && bytes[9] == 0xFF && bytes[10] == 0 && bytes[11] == 0
        let compatible = bytes[0..<12].allSatisfy { $0 == 0 } && last > 1  // not :: or ::1
        // 64:ff9b::/96, and the local-use 64:ff9b:1::/48 (RFC 8215), whose last 32 bits are the IPv4 address.
        let nat64 =
            Array(bytes[0..<12]) == [0x00, 0x64, 0xFF, 0x9B, 0, 0, 0, 0, 0, 0, 0, 0]
            || Array(bytes[0..<6]) == [0x00, 0x64, 0xFF, 0x9B, 0x00, 0x01]
        if mapped || translated || compatible || nat64 { return [.v4(last)] }
        if bytes[0] == 0x20 && bytes[1] == 0x02 { return [.v4(v4(at: 2))] }  // 6to4
        if Array(bytes[0..<4]) == [0x20, 0x01, 0, 0] { return [.v4(v4(at: 4)), .v4(last ^ 0xFFFF_FFFF)] }  // Teredo
        return []
    }

    /// Cloud metadata services outside 169.254.0.0/16: Alibaba Cloud's 100.100.100.200 and Azure's WireServer,
    /// 168.63.129.16.
    static let metadataV4: Set<UInt32> = [0x6464_64C8, 0xA83F_8110]
    /// AWS's IPv6 instance metadata service, fd00:ec2::254, and fd00:ec2::23, another of its instance-local services.
    static let metadataV6: Set<[UInt8]> = [
        [0xFD, 0, 0x0E, 0xC2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, 0x54], [0xFD, 0, 0x0E, 0xC2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x23],
    ]

    /// Names of cloud metadata services, refused whatever they resolve to.
    public static let metadataNames: Set<String> = ["metadata.google.internal", "metadata.goog"]

    /// The address as `inet_ntop` writes it (what a connection is pinned to).
    public var description: String {
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        switch self {
        case .v4(let address):
            var raw = in_addr(s_addr: address.bigEndian)
            inet_ntop(AF_INET, &raw, &buffer, socklen_t(buffer.count))
        case .v6(let bytes):
            var raw = in6_addr()
            withUnsafeMutableBytes(of: &raw) { $0.copyBytes(from: bytes) }
            inet_ntop(AF_INET6, &raw, &buffer, socklen_t(buffer.count))
        }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

extension URLPolicy {
    /// Why a subscriber's URL is refused, or nil. `https`, or `http` to loopback only; and never a cloud metadata
    /// service's name, nor an address `IPAddress.isForbiddenDestination` refuses, in any spelling. A name is
    /// checked again for the address it resolves to at each delivery.
    public static func subscriberURLProblem(_ text: String) -> String? {
        guard isHTTPSOrLoopback(text) else {
            return "must be an https:// URL (http:// only on loopback: 127.0.0.0/8, ::1, localhost)"
        }
        guard let host = URL(string: text)?.host, !host.isEmpty else { return "must name a host" }
        // A decoded host with a space or a control character reads differently to each resolver.
        guard !host.contains(where: { $0.isWhitespace || $0.asciiValue.map { $0 < 0x20 || $0 == 0x7F } == true }) else {
            return "must name a host without spaces or control characters"
        }
        var name = host.lowercased()
        if name.hasSuffix(".") { name.removeLast() }
        if IPAddress.metadataNames.contains(name) { return "must not name a cloud metadata service" }
        if let address = IPAddress(literal: name), address.isForbiddenDestination {
            return "must not be a link-local, unspecified, multicast or broadcast address"
        }
        return nil
    }
}
