import Foundation
import RISC

/// How the admin listings page and what they accept: a page size, and cursors that name the last id seen.
enum AdminPaging {
    /// A page size: 1 to 500, 50 when not given.
    static func parseLimit(_ limit: String?) throws(InvalidParameter) -> Int {
        guard let limit else { return 50 }
        guard let value = Int(limit), (1...500).contains(value) else {
            throw InvalidParameter(name: "limit", problem: "must be a number from 1 to 500")
        }
        return value
    }

    /// A cursor this API issued, or nil.
    static func checkCursor(_ cursor: String?) throws(InvalidParameter) -> String? {
        guard let cursor else { return nil }
        guard decodeCursor(cursor) != nil else { throw InvalidParameter(name: "cursor", problem: "is not a cursor this API issued") }
        return cursor
    }

    /// Pages run newest first by id. A cursor names the last id seen, so rows inserted meanwhile (with higher
    /// ids) never shift a page: the listing is stable under concurrent inserts.
    static func encodeCursor(_ id: Int64) -> String {
        Base64URL.encode(Array("e:\(id)".utf8))
    }

    static func decodeCursor(_ cursor: String) -> Int64? {
        guard let data = Base64URL.decode(cursor), let text = String(data: data, encoding: .utf8), text.hasPrefix("e:")
        else { return nil }
        return Int64(text.dropFirst(2))
    }

    /// The first `limit` records of a query that asked for one more, and the cursor of the next page when that one
    /// more came (nil on the last page).
    static func page<Records: AsyncSequence>(
        _ records: Records, limit: Int, id: (Records.Element) -> Int64
    ) async throws -> (records: [Records.Element], nextCursor: String?) {
        var page: [Records.Element] = []
        for try await record in records {
            if page.count == limit { return (page, encodeCursor(id(page[page.count - 1]))) }
            page.append(record)
        }
        return (page, nil)
    }
}
