import PostgresNIO
import RISC

/// Actions in the form `risc_apply_actions` takes them, and `risc_ingest_events` passes them on: parallel arrays,
/// one element per action, '' for no sub or argument, the client IDs as a JSON array. The worker keys each
/// action by its event's id, the inbox by its SET's 1-based place in the batch.
public struct ActionColumns<Key: PostgresArrayEncodable & Sendable>: Sendable {
    public private(set) var keys: [Key] = []
    /// The action's event's position in its SET.
    public private(set) var positions: [Int32] = []
    public private(set) var kinds: [ActionKind] = []
    public private(set) var subs: [String] = []
    public private(set) var arguments: [String] = []
    public private(set) var clientIDs: [String] = []

    public init() {}

    public mutating func append(_ key: Key, position: Int, _ action: AccountAction) {
        keys.append(key)
        positions.append(Int32(position))
        kinds.append(action.kind)
        subs.append(action.sub ?? "")
        arguments.append(action.argument ?? "")
        clientIDs.append(JSONValue.array(action.clientIDs.map(JSONValue.string)).serialized)
    }
}
