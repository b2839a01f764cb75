import ArgumentParser
import AsyncHTTPClient
import Hummingbird
import RISCServer

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the HTTP server (SET receiver).")

    func run() async throws {
        let configuration = try Bootstrap.configuration { reader throws(ServiceConfiguration.Invalid) in
            try ServiceConfiguration(reader: reader)
        }
        let logger = Bootstrap.logger("risc-receiver")
        let dependencies = try ServiceDependencies(configuration: configuration, httpClient: .shared, logger: logger)
        let app = buildApplication(configuration: configuration, dependencies: dependencies, logger: logger)
        // runService handles SIGTERM/SIGINT: in-flight requests finish, queued SETs commit, then the pool closes.
        try await app.runService()
    }
}
