import ArgumentParser
import AsyncHTTPClient
import DevTransmitter
import Foundation

/// A container's health check without curl: the image carries only this binary and CA certificates.
struct Health: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Ask a running serve or worker whether it is alive (GET /healthz).",
        discussion: """
            Exits 0 when /healthz answers 200, 1 otherwise, and prints why. The default URL is this host's serve: \
            http://127.0.0.1:$RISC_PORT/healthz (RISC_PORT defaults to 8080). A worker answers on its \
            --metrics-port: risc-receiver health --url http://127.0.0.1:9090/healthz
            """)

    @Option(help: "The health endpoint to ask.") var url: String?
    @Option(help: "Seconds to wait for the answer.") var timeout: Int64 = 3

    func validate() throws {
        guard timeout > 0 else { throw ValidationError("--timeout must be a positive number of seconds") }
    }

    func run() async throws {
        let port =
            ProcessInfo.processInfo.environment["RISC_PORT"]
            .map { $0.trimmingCharacters(in: .whitespaces) }.flatMap { $0.isEmpty ? nil : $0 } ?? "8080"
        let target = url ?? "http://127.0.0.1:\(port)/healthz"
        let status: UInt
        do {
            let response = try await HTTPClient.failFast.execute(HTTPClientRequest(url: target), timeout: .seconds(timeout))
            status = response.status.code
        } catch {
            FileHandle.standardError.write(Data("risc-receiver health: \(target) did not answer: \(error)\n".utf8))
            throw ExitCode(1)
        }
        guard status == 200 else {
            FileHandle.standardError.write(Data("risc-receiver health: \(target) answered \(status)\n".utf8))
            throw ExitCode(1)
        }
        print("ok")
    }
}
