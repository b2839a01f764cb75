import Foundation
import Hummingbird
import Logging
import NIOCore
import RISC
import RISCKeys
import RISCMetrics
import RISCStore
import Tracing

/// `POST /risc/events`: RFC 8935 push delivery from Google. Verifies the SET, commits it, and only then answers 202.
/// With `streams`, also `POST /ssf/{name}/events`, each Shared Signals transmitter's push stream.
public struct ReceiverController<Context: RequestContext, Inbox: SETStore>: Sendable {
    let verifier: SETVerifier
    let inbox: Inbox
    let streams: StreamReceivers?

    public init(verifier: SETVerifier, inbox: Inbox, streams: StreamReceivers? = nil) {
        self.verifier = verifier
        self.inbox = inbox
        self.streams = streams
    }

    public func addRoutes(to router: Router<Context>) {
        router.post("/risc/events") { request, context in
            await self.counted {
                await self.receive(request, logger: context.logger) { compact throws(SETVerifier.Failure) in
                    try await self.verifier.verify(compact)
                }
            }
        }
        if let streams {
            router.post("/ssf/:name/events") { request, context in
                await self.counted { await streams.receive(request, context: context, controller: self) }
            }
        }
    }

    func counted(_ receive: () async -> (Response, String, String)) async -> Response {
        let started = ContinuousClock.now
        let (response, eventType, outcome) = await receive()
        ServiceMetrics.setReceived(eventType: eventType, outcome: outcome)
        ServiceMetrics.ingestDuration(ContinuousClock.now - started, outcome: outcome)
        return response
    }

    /// The answer, and the event type and outcome it is counted under. `verify` checks the SET as its route requires;
    /// `stored` runs once it is committed (or was already: a redelivery), with the inbox's outcome.
    func receive(
        _ request: Request, logger: Logger,
        verify: (String) async throws(SETVerifier.Failure) -> SecurityEventToken,
        stored: (SecurityEventToken, EventInbox.Outcome) async -> Void = { _, _ in }
    ) async -> (Response, String, String) {
        var request = request
        let body: ByteBuffer
        do {
            body = try await request.collectBody(upTo: RequestLimits.maxBodyBytes)
        } catch {
            return (Response(status: .contentTooLarge), "unparsed", "too_large")
        }
        // Any Content-Type is accepted; surrounding whitespace from hand-made requests is forgiven.
        let compact = Self.trimmedASCII(body)
        // The request's span, which the stored event, the commit and the notifications refer back to.
        let requestTrace = TraceContext.current

        let verified = await TraceContext.span("verify SET") { span -> Result<SecurityEventToken, SETVerifier.Failure> in
            do throws(SETVerifier.Failure) {
                let token = try await verify(compact)
                span?.updateAttributes { attributes in
                    // From the request, even if signed: cut like every attribute a caller sends.
                    attributes["risc.set.kid"] = TraceContext.attribute(token.header.kid)
                    attributes["risc.set.jti"] = TraceContext.attribute(token.jti)
                    attributes["risc.set.event_types"] = token.events.map { TraceContext.attribute($0.typeURI) }
                    attributes["risc.set.outcome"] = "verified"
                }
                return .success(token)
            } catch {
                switch error {
                case .rejected(let rejection): span?.attributes["risc.set.outcome"] = rejection.code.rawValue
                case .keysUnavailable: span?.attributes["risc.set.outcome"] = "keys_unavailable"
                }
                return .failure(error)
            }
        }
        let token: SecurityEventToken
        switch verified {
        case .success(let verifiedToken):
            token = verifiedToken
        case .failure(let error):
            switch error {
            case .rejected(let rejection):
                logger.info("Rejected a SET", metadata: ["err": "\(rejection.code.rawValue)", "reason": "\(rejection.text)"])
                return (JSONResponse.make(status: .badRequest, json: rejection.body.jsonValue), "unparsed", rejection.code.rawValue)
            case .keysUnavailable(let retryAfter):
                logger.warning(
                    "Rejected a SET for now: the transmitter's key for it is unavailable", metadata: ["retry_after": "\(retryAfter)"])
                return (Self.retryLater(seconds: retryAfter), "unparsed", "keys_unavailable")
            }
        }
        let eventType = (token.primaryEvent ?? token.events.first)?.shortName ?? "unknown"

        do {
            var event = InboundEvent(token: token)
            event.trace = requestTrace
            let outcome = try await TraceContext.span("store SET") { span in
                // The wait for the batch's commit; the commit's own span (another trace) links back to the request.
                let outcome = try await inbox.store(event)
                span?.attributes["risc.set.outcome"] = outcome == .duplicate ? "duplicate" : "stored"
                return outcome
            }
            await stored(token, outcome)
            // Debug, not info: the database keeps the audit trail (each event and every action it took), and
            // `risc_sets_received_total` counts them; a line per SET cost the default `serve` a fifth of its rate.
            logger.debug(
                "Accepted a SET",
                metadata: [
                    "jti": "\(token.jti)", "types": "\(token.events.map(\.shortName).joined(separator: ","))",
                    "duplicate": "\(outcome == .duplicate)",
                ])
            return (Response(status: .accepted), eventType, outcome == .duplicate ? "duplicate" : "accepted")
        } catch EventInbox.Failure.unstorable {
            let rejection = SETRejection.invalidRequest("the claims cannot be stored")
            return (JSONResponse.make(status: .badRequest, json: rejection.body.jsonValue), eventType, rejection.code.rawValue)
        } catch {
            logger.warning("Could not commit a SET; asking the transmitter to retry")
            return (Self.retryLater(seconds: 5), eventType, "unavailable")
        }
    }

    static func trimmedASCII(_ buffer: ByteBuffer) -> String {
        buffer.withUnsafeReadableBytes { raw in
            let isSpace = { (byte: UInt8) in byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09 }
            var start = raw.startIndex
            var end = raw.endIndex
            while start < end, isSpace(raw[start]) { start += 1 }
            while end > start, isSpace(raw[end - 1]) { end -= 1 }
            return String(decoding: raw[start..<end], as: UTF8.self)
        }
    }

    static func retryLater(seconds: Int) -> Response {
        var headers = HTTPFields()
        headers[.retryAfter] = String(seconds)
        return Response(status: .serviceUnavailable, headers: headers)
    }
}
