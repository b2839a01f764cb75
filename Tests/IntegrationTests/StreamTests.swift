import DevTransmitter
import Foundation
import PostgresNIO
import RISC
import Testing

@Suite("Stream registration with the (fake) RISC management API", .timeLimit(.minutes(3)))
struct StreamTests {
    static func writeKeyFile(_ contents: String) -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("service-account-\(UUID().uuidString).json").path
        #expect(FileManager.default.createFile(atPath: path, contents: Data(contents.utf8)))
        return path
    }

    func verificationsStored(state: String, in harness: Harness) async throws -> Int {
        var count = 0
        for try await _ in try await harness.database.query(
            "SELECT 1 FROM risc_events WHERE events @> \(JSONValue.array([["state": .string(state)]]).serialized)::jsonb")
        {
            count += 1
        }
        return count
    }

    @Test("update, get, status, disable (nothing delivered), enable, then verify --wait receives its state end to end")
    func roundTrip() async throws {
        var options = Harness.Options()
        options.worker = true
        try await Harness.with(options) { harness in
            let keyFile = Self.writeKeyFile(harness.transmitter.serviceAccountFile().serialized)
            defer { try? FileManager.default.removeItem(atPath: keyFile) }
            let environment = [
                "GOOGLE_SERVICE_ACCOUNT_FILE": keyFile, "RISC_MANAGEMENT_URL": harness.transmitter.baseURL + "/v1beta",
                "DATABASE_URL": Harness.environment("RISC_TEST_DATABASE_URL"), "LOG_LEVEL": "warning",
            ]
            func stream(_ arguments: [String]) async throws -> (status: Int32, output: String) {
                try await runRiscReceiver(["stream"] + arguments, environment: environment)
            }

            let before = try await stream(["get"])
            #expect(before.status == 1)
            #expect(before.output.contains("No stream configuration exists"), "Google's message is shown as is: \(before.output)")

            let update = try await stream(["update", "--url", harness.eventsURL])
            #expect(update.status == 0, "\(update.output)")
            let get = try await stream(["get", "--json"])
            #expect(get.status == 0)
            let config = try JSONValue.parse(Data(get.output.utf8))
            let lines = try await stream(["get"])
            #expect(lines.output.contains("delivery.url") && lines.output.contains(harness.eventsURL), "lines for people: \(lines.output)")
            #expect(try JSONValue.parse(Data(try await stream(["status", "--json"]).output.utf8))["status"] == "enabled")
            #expect(config["delivery"]?["url"]?.stringValue == harness.eventsURL)
            #expect(Set(config["events_requested"]?.arrayValue?.compactMap(\.stringValue) ?? []) == Set(EventType.googleRISCTypes.map(\.rawValue)))
            #expect(try await stream(["status"]).output.contains("enabled"))

            #expect(try await stream(["disable"]).status == 0)
            #expect(try await stream(["status"]).output.contains("disabled"))
            let silent = "silent-\(UUID().uuidString)"
            #expect(try await stream(["verify", "--state", silent]).status == 0)

            #expect(try await stream(["enable"]).status == 0)
            let state = "round-trip-\(UUID().uuidString)"
            let verify = try await stream(["verify", "--state", state, "--wait", "--timeout", "20"])
            #expect(verify.status == 0, "\(verify.output)")
            #expect(verify.output.contains("received and stored after"))
            #expect(try await verificationsStored(state: state, in: harness) == 1)
            // The CLI takes a bare --wait: it waits with the default timeout.
            let bare = try await stream(["verify", "--wait"])
            #expect(bare.status == 0, "\(bare.output)")
            #expect(bare.output.contains("received and stored after"))
            // The disabled stream delivered nothing. Barriers: the two verifications since, each waited for until
            // stored. The transmitter starts a verification's delivery before it answers stream:verify, so one for
            // the silent state would have started before `enable` was even asked, ahead of theirs, on the same path.
            #expect(try await verificationsStored(state: silent, in: harness) == 0, "a disabled stream delivered")

            let narrow = try await stream(["update", "--url", harness.eventsURL, "--events", "sessions-revoked", "verification"])
            #expect(narrow.status == 0)
            let narrowed = try JSONValue.parse(Data(try await stream(["get", "--json"]).output.utf8))
            #expect(narrowed["events_requested"]?.arrayValue?.count == 2)
        }
    }

    @Test("A bad key file, a wrong key, and a non-HTTPS URL give clear errors")
    func errors() async throws {
        try await Harness.with { harness in
            let management = harness.transmitter.baseURL + "/v1beta"
            for contents in ["not json", #"{"type": "service_account", "client_email": "a@b"}"#, #"{"type": "authorized_user"}"#] {
                let file = Self.writeKeyFile(contents)
                defer { try? FileManager.default.removeItem(atPath: file) }
                let result = try await runRiscReceiver(
                    ["stream", "status"], environment: ["GOOGLE_SERVICE_ACCOUNT_FILE": file, "RISC_MANAGEMENT_URL": management])
                #expect(result.status == 2, "\(result.output)")
                #expect(result.output.split(separator: "\n").count == 1)
                #expect(result.output.contains("GOOGLE_SERVICE_ACCOUNT_FILE"), "\(result.output)")
            }
            let missing = try await runRiscReceiver(["stream", "status"], environment: [:])
            #expect(missing.status == 2)
            #expect(missing.output.contains("GOOGLE_SERVICE_ACCOUNT_FILE"))

            // A well-formed key the management API does not know: Google's 401 message, as it is.
            let stranger = try await DevTransmitter(settings: .init(port: 0), logger: Harness.logger)
            let strangerFile = Self.writeKeyFile(stranger.serviceAccountFile().serialized)
            defer { try? FileManager.default.removeItem(atPath: strangerFile) }
            let refused = try await runRiscReceiver(
                ["stream", "status"], environment: ["GOOGLE_SERVICE_ACCOUNT_FILE": strangerFile, "RISC_MANAGEMENT_URL": management])
            #expect(refused.status == 1)
            #expect(refused.output.contains("Request had invalid authentication credentials."), "\(refused.output)")

            // The service-account JWT is never sent in the clear, except to a loopback development transmitter.
            let cleartext = try await runRiscReceiver(
                ["stream", "status"],
                environment: ["GOOGLE_SERVICE_ACCOUNT_FILE": strangerFile, "RISC_MANAGEMENT_URL": "http://risc.example.com/v1beta"])
            #expect(cleartext.status == 2)
            #expect(cleartext.output.contains("RISC_MANAGEMENT_URL"), "\(cleartext.output)")

            // Plain HTTP is refused before Google is called (the default management URL is Google's own).
            let insecure = try await runRiscReceiver(
                ["stream", "update", "--url", "http://risc.example.com/risc/events"],
                environment: ["GOOGLE_SERVICE_ACCOUNT_FILE": strangerFile])
            #expect(insecure.status == 2, "\(insecure.output)")
            #expect(insecure.output.contains("https://"))
        }
    }
}
