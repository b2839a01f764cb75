import AsyncHTTPClient
import DevTransmitter
import Foundation
import NIOCore
import RISC
import Testing

@Suite("POST /risc/events over real HTTP and PostgreSQL")
struct IngestionTests {
    static let unknownTypeURI = "https://schemas.example.com/secevent/event-type/something-new"

    @Test("Every event type is accepted and stored as one row")
    func oneRowPerEventType() async throws {
        try await Harness.with { harness in
            for type in EventType.allCases.map(\.rawValue) + [Self.unknownTypeURI] {
                let sub = "user-\(UUID().uuidString)"
                let token = try await harness.makeSET(type, sub: sub) { request in
                    request.reason = "hijacking"
                    request.token = "1//0gLx4mZ9bQhTQCgYIARAAGBASNwF"
                    request.alg = "hash"
                    request.state = "state-1"
                }
                let reply = try await harness.post(token)
                #expect(reply.status == 202, "\(type): \(reply.body)")
                #expect(reply.body.isEmpty)
                let rows = try await harness.stored(jti: jti(of: token))
                try #require(rows.count == 1, "\(type)")
                #expect(rows[0].eventTypes == [type])
                #expect(rows[0].claimsJTI == jti(of: token))
                #expect(!rows[0].hasSignature)
                let known = EventType(rawValue: type)
                #expect(known == nil ? rows[0].status == "ignored" : ["pending", "done"].contains(rows[0].status), "\(type)")
                switch known {
                case .tokenRevoked?, .verification?, .ssfVerification?: #expect(rows[0].subjectSub == nil)
                default: #expect(rows[0].subjectSub == sub, "\(type)")
                }
            }
        }
    }

    @Test("A redelivered SET is answered 202 and stored once")
    func duplicate() async throws {
        try await Harness.with { harness in
            let token = try await harness.makeSET("sessions-revoked")
            #expect(try await harness.post(token).status == 202)
            #expect(try await harness.post(token).status == 202)
            // Concurrent redeliveries share a batch: still one row.
            try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<20 { group.addTask { try await harness.post(token).status } }
                for try await status in group { #expect(status == 202) }
            }
            #expect(try await harness.stored(jti: jti(of: token)).count == 1)
        }
    }

    @Test("Any Content-Type is accepted, and surrounding whitespace is forgiven")
    func contentTypes() async throws {
        try await Harness.with { harness in
            for contentType in ["application/secevent+jwt", "application/jwt", "text/plain", nil] {
                let token = try await harness.makeSET("sessions-revoked")
                #expect(try await harness.post(token + "\n", contentType: contentType).status == 202)
            }
        }
    }

    @Test("Concurrent SETs are all committed before their 202")
    func concurrentBatch() async throws {
        try await Harness.with { harness in
            var tokens: [String] = []
            for _ in 0..<200 { tokens.append(try await harness.makeSET("sessions-revoked")) }
            try await withThrowingTaskGroup(of: Void.self) { group in
                for token in tokens {
                    group.addTask {
                        let reply = try await harness.post(token)
                        #expect(reply.status == 202, "\(reply.body)\n\(harness.warnings.recent)")
                        // The row is visible as soon as the 202 arrives.
                        #expect(try await harness.stored(jti: jti(of: token)).count == 1)
                    }
                }
                try await group.waitForAll()
            }
        }
    }
}
