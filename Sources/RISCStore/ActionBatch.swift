import RISC

/// Actions as `risc_apply_actions` takes them: one JSON array, one object per action, in each event's order.
/// The function sorts them by user and totals what they changed; nothing here sorts or totals. `event` is the
/// event's id for a worker, and the 1-based place of the action's SET in the batch for the inbox.
struct ActionBatch: Sendable {
    private var elements: [JSONValue] = []

    mutating func append(event: Int64, position: Int, _ action: AccountAction) {
        elements.append([
            "event": .number(Double(event)), "position": .number(Double(position)), "kind": .string(action.kind.rawValue),
            "sub": action.sub.map(JSONValue.string) ?? .null, "argument": action.argument.map(JSONValue.string) ?? .null,
            "client_ids": .array(action.clientIDs.map(JSONValue.string)),
        ])
    }

    var isEmpty: Bool { elements.isEmpty }

    /// The `jsonb` argument.
    var json: String { JSONValue.array(elements).serialized }
}
