import ArgumentParser
import AsyncHTTPClient
import DevTransmitter
import Foundation
import Hummingbird
import NIOCore
import RISC
import RISCKeys

struct DevTransmitterCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "transmitter",
        abstract: "Serve a RISC discovery document and JWKS on loopback, and sign and push SETs on command.")

    @Option(help: "Port on 127.0.0.1 (1-65535).")
    var port: Int = 8765

    @Option(help: "Where SETs are pushed.")
    var receiver: String = "http://127.0.0.1:8080/risc/events"

    @Option(help: "The aud of SETs and ID tokens, and the OAuth client ID: one of the receiver's RISC_CLIENT_IDS.")
    var audience: String = "dev-client.apps.googleusercontent.com"

    @Option(help: "The OAuth client secret the token endpoint expects.")
    var clientSecret: String = "dev-client-secret"

    @Option(help: "Write a Google-style client-secret JSON file here (for GOOGLE_CLIENT_SECRET_FILES).")
    var writeClientSecret: String?

    @Option(help: "Write the service-account key file its fake management API accepts (for GOOGLE_SERVICE_ACCOUNT_FILE).")
    var writeServiceAccount: String?

    func validate() throws {
        guard (1...65535).contains(port) else { throw ValidationError("--port must be 1...65535") }
    }

    func run() async throws {
        let logger = try await Bootstrap.logger("risc-receiver.dev-transmitter", file: nil)
        let transmitter = try await DevTransmitter(
            settings: .init(port: port, receiverURL: receiver, audience: audience, clientSecret: clientSecret), logger: logger)
        let app = transmitter.makeApplication { port in
            for (path, contents) in [(writeClientSecret, transmitter.clientSecretFile()), (writeServiceAccount, transmitter.serviceAccountFile())] {
                guard let path else { continue }
                let data = Data(contents.serialized.utf8)
                guard FileManager.default.createFile(atPath: path, contents: data, attributes: [.posixPermissions: 0o600]) else {
                    logger.error("Cannot write a key file", metadata: ["path": "\(path)"])
                    return
                }
            }
            logger.info(
                "Development transmitter ready",
                metadata: [
                    "discovery": "\(transmitter.discoveryURL)", "openid": "\(transmitter.openIDConfigurationURL)",
                    "receiver": "\(receiver)",
                ])
        }
        // Bounded like serve: a request still in flight (a push to a receiver that is itself stopping) cannot
        // hold SIGTERM open.
        try await Bootstrap.runUntilSignalled([.init(service: app)], shutdownTimeout: Dev.shutdownTimeout, logger: logger)
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

        let body = try await DevClient.post(transmitter, "/dev/send", json: try JSONEncoder().encode(request))
        guard let delivery = try? JSONDecoder().decode(DevTransmitter.Delivery.self, from: body) else {
            throw Bootstrap.fail("the transmitter answered: \(String(decoding: body, as: UTF8.self))")
        }
        print("HTTP \(delivery.status)\(delivery.body.isEmpty ? "" : " " + delivery.body)")
        if let jti = delivery.jti { print("jti \(jti)") }
        if delivery.status != 202 { throw ExitCode(1) }
    }
}

struct DevIDToken: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "idtoken",
        abstract: "Have the development transmitter mint a Google ID token, and print it.",
        discussion: "Sign in with it: curl -d idtoken=$(risc-receiver dev idtoken --sub 42) http://127.0.0.1:8080/tokensignin")

    @Option(help: "The user's Google sub.")
    var sub: String

    @Option(help: "The user's email.")
    var email: String?

    @Option(help: "The audience (default: the transmitter's client ID).")
    var aud: String?

    @Option(help: "Seconds until the token expires (negative: already expired).")
    var expIn: Double = 3600

    @Option(help: "The Workspace hosted domain (hd claim).")
    var hd: String?

    @Option(help: "The development transmitter's URL.")
    var transmitter: String = "http://127.0.0.1:8765"

    func run() async throws {
        var request = IDTokenRequest(sub: sub)
        request.email = email
        request.aud = aud
        request.expIn = expIn
        request.hd = hd
        let body = try await DevClient.post(transmitter, "/dev/idtoken", json: try JSONEncoder().encode(request))
        guard let token = (try? JSONValue.parse(body))?.objectValue?["id_token"]?.stringValue else {
            throw Bootstrap.fail("the transmitter answered: \(String(decoding: body, as: UTF8.self))")
        }
        print(token)
    }
}

/// Calls the running development transmitter's control endpoints.
enum DevClient {
    static func post(_ transmitter: String, _ path: String, json: Data) async throws -> Data {
        var post = HTTPClientRequest(url: transmitter + path)
        post.method = .POST
        post.headers.add(name: "Content-Type", value: "application/json")
        post.body = .bytes(ByteBuffer(data: json))
        let response: HTTPClientResponse
        do {
            response = try await HTTPClient.failFast.execute(post, timeout: .seconds(30))
        } catch {
            throw Bootstrap.fail("cannot reach the development transmitter at \(transmitter): \(NetworkErrors.describe(error))")
        }
        let body = Data(buffer: try await response.body.collect(upTo: 1 << 20))
        guard response.status == .ok else {
            // Hummingbird's HTTPError body: {"error": {"message": ...}}; a 502 names the receiver that failed.
            let message = (try? JSONValue.parse(Array(body)))?["error"]?["message"]?.stringValue
            throw Bootstrap.fail(message ?? "the transmitter answered \(response.status.code): \(String(decoding: body, as: UTF8.self))")
        }
        return body
    }
}

struct DevWebhookSink: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "webhook-sink",
        abstract: "A subscriber on loopback that checks each notification's signature and prints it (one JSON line each).",
        discussion: """
            Add it first: risc-receiver subscribers add --url http://127.0.0.1:PORT/ (then pass the secret it prints), or
            with --secret - and the secret on standard input. Answers 204 to a valid delivery and 401 to a bad signature.
            """)

    @Option(help: "Port on 127.0.0.1 (1-65535).")
    var port: Int = 8766

    @Option(help: "The subscriber's whsec_ secret.")
    var secret: String

    func validate() throws {
        guard (1...65535).contains(port) else { throw ValidationError("--port must be 1...65535") }
        guard StandardWebhook.key(secret: secret) != nil else {
            throw ValidationError("--secret must be whsec_ followed by 24 to 64 bytes in base64")
        }
    }

    func run() async throws {
        let logger = try await Bootstrap.logger("risc-receiver.dev-webhook-sink", file: nil)
        let sink = WebhookSink(key: StandardWebhook.key(secret: secret)!, port: port)
        let app = sink.makeApplication(logger: logger) { port in
            logger.info("Webhook sink ready", metadata: ["url": "http://127.0.0.1:\(port)/"])
        } onDelivery: { received in
            let line: JSONValue =
                if let body = received.body {
                    ["webhook_id": received.webhookID.map(JSONValue.string) ?? .null, "verified": true, "body": body]
                } else {
                    [
                        "webhook_id": received.webhookID.map(JSONValue.string) ?? .null, "verified": false,
                        "problem": .string("\(received.rejection.map { "\($0)" } ?? "unreadable body")"),
                    ]
                }
            // Unbuffered, so a pipe sees each delivery as it arrives.
            FileHandle.standardOutput.write(Data((line.serialized + "\n").utf8))
        }
        // Bounded like serve: a request still in flight (a push to a receiver that is itself stopping) cannot
        // hold SIGTERM open.
        try await Bootstrap.runUntilSignalled([.init(service: app)], shutdownTimeout: Dev.shutdownTimeout, logger: logger)
    }
}
