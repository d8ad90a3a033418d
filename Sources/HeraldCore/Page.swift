/// One page of a list, newest first: `{"data": [...], "next_cursor": string|null}`.
public struct Page<Element> {
    /// The items of this page.
    public var data: [Element]
    /// Where the next page starts, or nil on the last page.
    public var nextCursor: Cursor?

    /// Creates a page.
    public init(data: [Element], nextCursor: Cursor?) {
        self.data = data
        self.nextCursor = nextCursor
    }

    /// Makes a page from up to `limit + 1` fetched rows: the extra row only tells that another page exists.
    ///
    /// Fetching one row more than asked is how a list knows whether to give a `next_cursor` without a
    /// second query, and so never hands out a cursor to an empty page.
    public init(fetched rows: [Element], limit: Int, cursor: (Element) -> Cursor) {
        if rows.count > limit, limit > 0 {
            let kept = Array(rows.prefix(limit))
            self.init(data: kept, nextCursor: cursor(kept[kept.count - 1]))
        } else {
            self.init(data: Array(rows.prefix(max(limit, 0))), nextCursor: nil)
        }
    }

    /// The page object's members.
    public enum Member: String, JSONMember {
        case data
        case nextCursor = "next_cursor"
    }
}

extension Page: Sendable where Element: Sendable {}

extension Page: Equatable where Element: Equatable {}

extension Page: Decodable where Element: Decodable {
    // Decoded by the members' keys; a null `next_cursor` decodes as nil.
    private typealias CodingKeys = Member
}

extension Page: JSONWritable where Element: JSONWritable {
    /// Both members, with `"next_cursor": null` on the last page.
    public func write(to writer: inout JSONWriter) {
        writer.object(Member.self) { member, writer in
            switch member {
            case .data: writer.array(data)
            case .nextCursor: writer.string(nextCursor?.encoded)
            }
        }
    }
}

/// The job queue's state: the API's queue object.
public struct QueueStatus: Decodable, Sendable, Equatable {
    /// Whether claiming new jobs is stopped (on every replica).
    public var paused: Bool
    /// The replicas alive: processes claiming jobs from this database.
    public var replicas: Int
    /// How many jobs may run at once: every live replica's workers.
    public var workers: Int
    /// Jobs running now.
    public var running: Int
    /// Jobs waiting to be claimed.
    public var queued: Int
    /// Jobs waiting for their time.
    public var scheduled: Int

    /// Creates a queue object.
    public init(paused: Bool, replicas: Int, workers: Int, running: Int, queued: Int, scheduled: Int) {
        self.paused = paused
        self.replicas = replicas
        self.workers = workers
        self.running = running
        self.queued = queued
        self.scheduled = scheduled
    }

    /// The queue object's members.
    public enum Member: String, JSONMember {
        case paused, replicas, workers, running, queued, scheduled
    }

    // Decoded by these keys.
    private typealias CodingKeys = Member
}

extension QueueStatus: JSONWritable {
    public func write(to writer: inout JSONWriter) {
        writer.object(Member.self) { member, writer in
            switch member {
            case .paused: writer.bool(paused)
            case .replicas: writer.int(replicas)
            case .workers: writer.int(workers)
            case .running: writer.int(running)
            case .queued: writer.int(queued)
            case .scheduled: writer.int(scheduled)
            }
        }
    }
}
