import ArgumentParser
import AsyncHTTPClient
import DevTransmitter
import Foundation
import Hummingbird
import NIOCore
import RISC

struct DevTransmitterCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "transmitter",
        abstract: "Serve a RISC discovery document and JWKS on loopback, and sign and push SETs on command.")

    @Option(help: "Port on 127.0.0.1.")
    var port: Int = 8765

    @Option(help: "Where SETs are pushed.")
    var receiver: String = "http://127.0.0.1:8080/risc/events"

    @Option(help: "The aud of the SETs: one of the receiver's RISC_CLIENT_IDS.")
    var audience: String = "dev-client.apps.googleusercontent.com"

    func run() async throws {
        let logger = Bootstrap.logger("risc-receiver.dev-transmitter")
        let transmitter = try await DevTransmitter(
            settings: .init(port: port, receiverURL: receiver, audience: audience), logger: logger)
        let app = transmitter.makeApplication { port in
            logger.info(
                "Development transmitter ready",
                metadata: ["discovery": "\(transmitter.discoveryURL)", "receiver": "\(receiver)"])
        }
        try await app.runService()
    }
}

struct DevSend: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "send",
        abstract: "Have the development transmitter sign a SET and push it to the receiver.",
        discussion: """
            TYPE is a short name or a full URI: \(EventType.allCases.map(\.shortName).joined(separator: ", ")).
            Prints the receiver's HTTP status and body; exits 0 only on 202.
            """)

    @Argument(help: "The event type.")
    var type: String

    @Option(help: "The user's Google sub.")
    var sub: String?

    @Option(help: "The user's email (sends an id_token_claims subject).")
    var email: String?

    @Option(help: "account-disabled reason: hijacking or bulk-account.")
    var reason: String?

    @Option(help: "token-revoked: the refresh token to identify.")
    var token: String?

    @Option(help: "token-revoked: prefix or hash.")
    var alg: String?

    @Option(help: "verification: the state to echo.")
    var state: String?

    @Option(help: "Receiver URL (default: the transmitter's --receiver).")
    var target: String?

    @Option(help: "The development transmitter's URL.")
    var transmitter: String = "http://127.0.0.1:8765"

    func validate() throws {
        let eventType = EventType(uriOrShortName: type)
        if eventType == nil && !type.hasPrefix("https://") {
            throw ValidationError("unknown event type '\(type)'")
        }
        switch eventType {
        case .tokenRevoked?:
            guard token != nil else { throw ValidationError("token-revoked needs --token") }
            if let alg, !["prefix", "hash"].contains(alg) { throw ValidationError("--alg must be prefix or hash") }
        case .verification?, .ssfVerification?, nil:
            break
        default:
            guard sub != nil else { throw ValidationError("\(type) needs --sub") }
        }
        if let reason, !["hijacking", "bulk-account"].contains(reason) {
            throw ValidationError("--reason must be hijacking or bulk-account")
        }
    }

    func run() async throws {
        var request = SETRequest(type: type, sub: sub)
        request.email = email
        request.reason = reason
        request.token = token
        request.alg = alg
        request.state = state
        request.target = target

        var post = HTTPClientRequest(url: transmitter + "/dev/send")
        post.method = .POST
        post.headers.add(name: "Content-Type", value: "application/json")
        post.body = .bytes(ByteBuffer(data: try JSONEncoder().encode(request)))
        let response: HTTPClientResponse
        do {
            response = try await HTTPClient.shared.execute(post, timeout: .seconds(30))
        } catch {
            throw Bootstrap.fail("cannot reach the development transmitter at \(transmitter): \(error)")
        }
        let body = try await response.body.collect(upTo: 1 << 20)
        guard response.status == .ok, let delivery = try? JSONDecoder().decode(DevTransmitter.Delivery.self, from: Data(buffer: body))
        else {
            throw Bootstrap.fail("the transmitter answered \(response.status.code): \(String(buffer: body))")
        }
        print("HTTP \(delivery.status)\(delivery.body.isEmpty ? "" : " " + delivery.body)")
        if let jti = delivery.jti { print("jti \(jti)") }
        if delivery.status != 202 { throw ExitCode(1) }
    }
}
