import ArgumentParser
import Foundation
import RISC
import RISCServer
import RISCStore

/// Shared Signals transmitters besides Google's.
struct Transmitters: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Shared Signals transmitters besides Google's (the built-in google): add, list, show, remove.",
        subcommands: [TransmittersAdd.self, TransmittersList.self, TransmittersShow.self, TransmittersRemove.self])
}

struct TransmittersAdd: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "add",
        abstract: "Register a transmitter: its metadata is read and its issuer checked. `streams create NAME` then makes its stream.",
        discussion: """
            Authorization for the stream endpoints is OAuth client credentials (--client-id with --client-secret - or \
            --client-key FILE) or a fixed bearer token (--bearer -). Secrets are read from standard input, sealed with \
            RISC_VAULT_KEY, and never shown again.

            """ + EnvironmentHelp.database)

    @Argument(help: "1-40 of a-z, 0-9 and -; not google.") var name: String
    @Option(help: "The transmitter's issuer: https:// (http:// only on loopback).") var issuer: String
    @Option(name: .customLong("config-url"), help: "Where its metadata is (default: the issuer's well-known ssf-configuration).")
    var configURL: String?
    @Option(help: "push or poll (default push).") var delivery: String = DeliveryMethod.push.rawValue
    @Option(help: "Event types, comma-separated: short names or URIs (default: every RISC and CAEP type acted on).")
    var events: String?
    @Option(name: .customLong("client-id"), help: "OAuth client id for client credentials.") var clientID: String?
    @Option(name: .customLong("client-secret"), help: "- to read the client secret from standard input.") var clientSecret: String?
    @Option(name: .customLong("client-key"), help: "A private key file (PEM) for private_key_jwt.") var clientKey: String?
    @Option(
        name: .customLong("token-auth"),
        help: "\(StreamAuthorization.ClientAuthentication.allCases.map(\.rawValue).joined(separator: ", ")) (default client_secret_basic).")
    var tokenAuth: String?
    @Option(help: "OAuth scope (default \"\(StreamAuthorization.defaultScope)\").") var scope: String = StreamAuthorization.defaultScope
    @Option(name: .customLong("token-endpoint"), help: "The token endpoint (default: from the issuer's OAuth metadata).")
    var tokenEndpoint: String?
    @Option(help: "- to read a fixed bearer token from standard input.") var bearer: String?
    @OptionGroup var options: AdminOptions

    var method: StreamAuthorization.ClientAuthentication? {
        tokenAuth.map { StreamAuthorization.ClientAuthentication(rawValue: $0) }
            ?? (clientKey != nil ? .privateKeyJWT : .clientSecretBasic)
    }

    func validate() throws {
        // A secret on the command line is in `ps` and the shell's history.
        for (option, value) in [("client-secret", clientSecret), ("bearer", bearer)] where value != nil && value != "-" {
            throw ValidationError("--\(option) takes -: the secret is read from standard input, never from the command line")
        }
        guard DeliveryMethod(rawValue: delivery) != nil else { throw ValidationError("--delivery must be push or poll") }
        guard let method else { throw ValidationError("--token-auth must be one of client_secret_basic, client_secret_post, private_key_jwt") }
        if bearer != nil {
            guard clientID == nil, clientSecret == nil, clientKey == nil, tokenAuth == nil, tokenEndpoint == nil else {
                throw ValidationError("--bearer is used alone: not with --client-id, --client-secret, --client-key, --token-auth or --token-endpoint")
            }
        } else {
            guard clientID != nil else { throw ValidationError("give --client-id (OAuth client credentials) or --bearer -") }
            switch method {
            case .privateKeyJWT:
                guard clientKey != nil, clientSecret == nil else {
                    throw ValidationError("private_key_jwt takes --client-key FILE, not --client-secret")
                }
            case .clientSecretBasic, .clientSecretPost:
                guard clientSecret != nil, clientKey == nil else {
                    throw ValidationError("\(method.rawValue) takes --client-secret -, not --client-key")
                }
            }
        }
        do {
            _ = try transmitter(secret: "placeholder")
        } catch {
            throw ValidationError("--\(error.description)")
        }
    }

    func transmitter(secret: String) throws(InvalidParameter) -> NewTransmitter {
        let authorization: StreamAuthorization =
            bearer != nil
            ? .bearer(token: secret)
            : .clientCredentials(
                clientID: clientID ?? "", method: method ?? .clientSecretBasic, secret: secret, scope: scope, tokenEndpoint: tokenEndpoint)
        return try NewTransmitter(
            name: name, issuer: issuer, configURL: configURL, delivery: DeliveryMethod(rawValue: delivery) ?? .push,
            events: events.map { $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) } }, authorization: authorization)
    }

    func run() async throws {
        let secret: String
        if let clientKey {
            guard let pem = try? String(contentsOfFile: clientKey, encoding: .utf8), pem.contains("PRIVATE KEY") else {
                throw Bootstrap.fail("--client-key: \(clientKey) is not a readable PEM private key", code: 2)
            }
            secret = pem
        } else {
            secret = (readLine(strippingNewline: true) ?? "").trimmingCharacters(in: .whitespaces)
        }
        let transmitter: NewTransmitter
        do {
            transmitter = try self.transmitter(secret: secret)
        } catch {
            throw Bootstrap.fail("--\(error.description)", code: 2)
        }
        let record = try await options.withTransmitters { registry in try await registry.add(transmitter) }
        if options.json { return try options.printJSON(record) }
        print("Transmitter \(transmitter.name) added: \(transmitter.issuer) (metadata from \(record.configURL)).")
        print("Next: risc-receiver streams create \(transmitter.name)")
    }
}

struct TransmittersList: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list", abstract: "Every transmitter, the built-in google first (never a credential).", discussion: EnvironmentHelp.database)
    @OptionGroup var options: AdminOptions

    func run() async throws {
        let transmitters = try await options.withTransmitters { registry in try await registry.transmitters() }
        if options.json { return try options.printJSON(["transmitters": transmitters]) }
        print(
            Table.render(
                headers: ["NAME", "ISSUER", "DELIVERY", "AUTH", "STREAM", "STATUS"],
                rows: transmitters.map { transmitter in
                    [
                        transmitter.name, transmitter.issuer ?? "(from \(transmitter.configURL))", transmitter.delivery.rawValue,
                        transmitter.authMethod ?? "-",
                        transmitter.stream?.streamID ?? (transmitter.builtIn ? "(stream commands)" : "-"), transmitter.stream?.status ?? "-",
                    ]
                }))
    }
}

struct TransmittersShow: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "show", abstract: "One transmitter, with its metadata and stream (never its credential).", discussion: EnvironmentHelp.database)
    @Argument(help: "Its name.") var name: String
    @OptionGroup var options: AdminOptions

    func run() async throws {
        let name = try transmitterName(self.name)
        guard let transmitter = try await options.withTransmitters({ registry in try await registry.transmitter(named: name) }) else {
            throw Bootstrap.fail("no transmitter \(name)")
        }
        if options.json { return try options.printJSON(transmitter) }
        let json = try JSONValueEncoder().encode(transmitter)
        for (key, value) in (json.objectValue ?? [:]).sorted(by: { $0.key < $1.key }) where key != "metadata" && key != "stream" {
            print("\(key): \(Table.text(value))")
        }
        if let stream = json["stream"]?.objectValue {
            for (key, value) in stream.sorted(by: { $0.key < $1.key }) { print("stream.\(key): \(Table.text(value))") }
        }
        if let metadata = json["metadata"], metadata != .null { print("metadata: \(metadata.serialized)") }
    }
}

struct TransmittersRemove: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "remove",
        abstract: "Forget a transmitter and its credential; its events stay. Delete its stream first (streams delete NAME).",
        discussion: EnvironmentHelp.database)
    @Argument(help: "Its name.") var name: String
    @OptionGroup var options: AdminOptions

    func run() async throws {
        let name = try transmitterName(self.name)
        guard name != .google else { throw Bootstrap.fail("google is built in: it cannot be removed") }
        guard try await options.withTransmitters({ registry in try await registry.remove(named: name) }) else {
            throw Bootstrap.fail("no transmitter \(name)")
        }
        if options.json { return options.printJSON(["removed": .string(name.value)]) }
        print("Transmitter \(name) removed.")
    }
}

/// A name as typed, or a usage error.
func transmitterName(_ text: String) throws -> TransmitterName {
    do {
        return try TransmitterName(naming: text)
    } catch {
        throw Bootstrap.fail("NAME: \(error.problem)", code: 2)
    }
}
