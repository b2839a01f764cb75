/// What a SET on a Shared Signals stream must satisfy beyond the rules every SET meets: checks that need no key and no
/// database, made once the signature, issuer and audience are verified.
public enum StreamEventRules {
    /// Shared Signals requires the `typ` header, `secevent+jwt` (with or without `application/`, in any case, as media
    /// types are compared).
    public static func checkType(_ header: SecurityEventToken.Header) throws(SETRejection) {
        guard let typ = header.typ?.lowercased(), typ == "secevent+jwt" || typ == "application/secevent+jwt" else {
            throw .invalidRequest("the typ header is not secevent+jwt")
        }
    }

    /// A verification event names the stream itself: its subject is `{"format": "opaque", "id": <stream_id>}`.
    /// Returns the states the SET's verification events carry, for the caller to match with those it asked for.
    public static func checkVerifications(_ token: SecurityEventToken, streamID: String) throws(SETRejection) -> [String] {
        var states: [String] = []
        for event in token.events where event.type == .ssfVerification || event.type == .verification {
            guard event.subject == .opaque(streamID) else {
                throw .invalidRequest("the verification event's sub_id is not this stream's")
            }
            if let state = event.state { states.append(state) }
        }
        return states
    }

    /// The status a `stream-updated` event reports for this stream, if the SET carries one that names it.
    public static func reportedStatus(_ token: SecurityEventToken, streamID: String) -> StreamStatus? {
        for event in token.events where event.type == .ssfStreamUpdated && event.subject == .opaque(streamID) {
            if let status = event.streamStatus { return status }
        }
        return nil
    }
}
