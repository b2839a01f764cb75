import RISC
import Testing

@Suite("Where a subscriber may point")
struct SubscriberURLPolicyTests {
    @Test(
        "Link-local, unspecified, multicast and broadcast addresses and metadata services are refused in every spelling",
        arguments: [
            "https://169.254.169.254/latest/meta-data", "https://169.254.169.254./", "https://2852039166/", "https://0xa9fea9fe/",
            "https://0251.0376.0251.0376/", "https://169.254.43518/", "https://[fe80::1]/", "https://[FE80::1%25eth0]/",
            "https://[::ffff:169.254.169.254]/", "https://[::ffff:a9fe:a9fe]/", "https://[::169.254.169.254]/",
            "https://[64:ff9b::a9fe:a9fe]/", "https://0.0.0.0/", "https://0/", "https://[::]/", "https://224.0.0.1/",
            "https://[ff02::1]/", "https://255.255.255.255/", "https://metadata.google.internal/computeMetadata/v1/",
            "https://METADATA.GOOGLE.INTERNAL./", "https://metadata.goog/", "https://100.100.100.200/", "https://[fd00:ec2::254]/",
            "http://169.254.169.254/", "https://[64:ff9b:1::a9fe:a9fe]/", "https://168.63.129.16/",
            // inet_aton stops at a space; a resolver would look the whole name up.
            "https://127.0.0.1%20x/", "https://8.8.8.8%09/",
        ])
    func refused(url: String) {
        #expect(URLPolicy.subscriberURLProblem(url) != nil, "\(url)")
    }

    @Test(
        "IPv6 forms that carry a forbidden IPv4 address (6to4, Teredo, IPv4-translated) and AWS's IPv6 services are refused",
        arguments: [
            // 6to4 (2002::/16): bits 16-48 are the IPv4 address: 169.254.169.254, 224.0.0.1, 100.100.100.200, 0.0.0.0.
            "https://[2002:a9fe:a9fe::1]/", "https://[2002:e000:1::1]/", "https://[2002:6464:64c8::]/", "https://[2002::1]/",
            // Teredo (2001:0::/32): the client is the last 32 bits inverted (169.254.169.254, then 0.0.0.0), the
            // server bits 32-64 (169.254.169.254, its client 10.0.0.1).
            "https://[2001:0:4136:e378:8000:63bf:5601:5601]/", "https://[2001:0:4136:e378:8000:63bf:ffff:ffff]/",
            "https://[2001:0:a9fe:a9fe:0:0:f5ff:fffe]/",
            // IPv4-translated (::ffff:0:0:0/96).
            "https://[::ffff:0:169.254.169.254]/", "https://[::ffff:0:a9fe:a9fe]/", "https://[::ffff:0:224.0.0.1]/",
            // AWS's IPv6 instance metadata service, and fd00:ec2::23.
            "https://[fd00:ec2::254]/", "https://[fd00:ec2::23]/", "https://[FD00:EC2:0::23]/",
        ])
    func embeddedIPv4Refused(url: String) {
        #expect(URLPolicy.subscriberURLProblem(url) != nil, "\(url)")
    }

    @Test(
        "The same forms carrying allowed IPv4 addresses stay allowed",
        arguments: [
            "https://[2002:a00:1::1]/", "https://[2002:c000:22d::1]/", "https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/",
            "https://[::ffff:0:10.0.0.1]/", "https://[fd00:ec2::24]/",
        ])
    func embeddedIPv4Allowed(url: String) {
        #expect(URLPolicy.subscriberURLProblem(url) == nil, "\(url)")
    }

    @Test(
        "Public names, private and loopback addresses are allowed: the app's services live there",
        arguments: [
            "https://hooks.example.com/risc", "https://10.0.0.7/hook", "https://192.168.1.10:8443/", "https://172.16.0.1/",
            "https://[fd12:3456::1]/", "http://127.0.0.1:9000/hook", "http://[::1]:9000/", "http://localhost:8080/",
            "https://8.8.8.8/",
        ])
    func allowed(url: String) {
        #expect(URLPolicy.subscriberURLProblem(url) == nil, "\(url)")
    }

    @Test("Plain http is refused off loopback, as before")
    func plainHTTP() {
        #expect(URLPolicy.subscriberURLProblem("http://hooks.example.com/") != nil)
        #expect(URLPolicy.subscriberURLProblem("ftp://hooks.example.com/") != nil)
    }

    @Test("A resolver's address is judged the same way, and written as it is connected to")
    func addresses() {
        #expect(IPAddress(literal: "169.254.169.254")?.isForbiddenDestination == true)
        #expect(IPAddress(literal: "::ffff:127.0.0.1")?.isForbiddenDestination == false)
        #expect(IPAddress(literal: "10.1.2.3")?.description == "10.1.2.3")
        #expect(IPAddress(literal: "[::1]")?.description == "::1")
        #expect(IPAddress(literal: "hooks.example.com") == nil)
    }
}
