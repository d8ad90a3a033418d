import AsyncHTTPClient
import Foundation
import GRDB
import HeraldCore
import HeraldStorage
import HeraldTestSupport
import NIOCore
import NIOHTTP1
import Publishing
import SQLiteStorage
import ServiceLifecycle
import Testing

@testable import HeraldApp

/// One Server-Sent Event, or a comment line (`comment` set).
struct ServerEvent: Sendable {
    var id: Int?
    var event: String?
    var data: String
    var comment: String?

    var job: [String: Any] { (try? JSONSerialization.jsonObject(with: Data(data.utf8)) as? [String: Any]) ?? [:] }
}

/// An open event stream: its status and headers, and its events as they come.
final class EventReader: @unchecked Sendable {
    // @unchecked Sendable: read by one test task at a time.
    let status: HTTPResponseStatus
    let headers: HTTPHeaders
    private var bytes: HTTPClientResponse.Body.AsyncIterator
    private var buffer = ""

    private init(status: HTTPResponseStatus, headers: HTTPHeaders, body: HTTPClientResponse.Body) {
        self.status = status
        self.headers = headers
        self.bytes = body.makeAsyncIterator()
    }

    static func open(_ url: String, headers: [(String, String)] = []) async throws -> EventReader {
        var request = HTTPClientRequest(url: url)
        request.authorize()
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        return EventReader(status: response.status, headers: response.headers, body: response.body)
    }

    /// The next event or comment; nil once the stream has ended.
    func next() async throws -> ServerEvent? {
        while true {
            if let end = buffer.range(of: "\n\n") {
                let block = String(buffer[..<end.lowerBound])
                buffer.removeSubrange(..<end.upperBound)
                var event = ServerEvent(data: "")
                for line in block.split(separator: "\n", omittingEmptySubsequences: false) {
                    if line.hasPrefix(":") { event.comment = String(line.dropFirst()).trimmingCharacters(in: .whitespaces) }
                    if line.hasPrefix("id: ") { event.id = Int(line.dropFirst(4)) }
                    if line.hasPrefix("event: ") { event.event = String(line.dropFirst(7)) }
                    if line.hasPrefix("data: ") { event.data += line.dropFirst(6) }
                }
                return event
            }
            guard let chunk = try await bytes.next() else { return nil }
            buffer += String(buffer: chunk)
        }
    }

    /// The next event that is not a comment.
    func nextEvent() async throws -> ServerEvent? {
        while let event = try await next() {
            if event.comment == nil { return event }
        }
        return nil
    }
}

@Suite("Server-Sent Events", .serialized, .timeLimit(.minutes(2)))
struct EventStreamTests {
    @Test func aJobsStreamSendsItsSnapshotThenEveryChangeAndEndsWhenItIsDone() async throws {
        try await withHerald { base, _, _ in
            let job = try await createJob(base, ["text": "later", "scheduled_at": "2099-01-01T00:00:00Z"])
            let stream = try await EventReader.open("\(base)/v1/jobs/\(job)/events")
            #expect(stream.status == .ok)
            #expect(stream.headers["Content-Type"] == ["text/event-stream"])
            #expect(stream.headers["Cache-Control"] == ["no-store"])
            let first = try #require(try await stream.nextEvent())
            #expect(first.event == "job")
            #expect(first.job["state"] as? String == "scheduled")
            #expect(try await exchange(.POST, "\(base)/v1/jobs/\(job)/cancel").status == .accepted)
            let last = try #require(try await stream.nextEvent())
            #expect(last.job["state"] as? String == "cancelled")
            #expect(last.job["done"] as? Bool == true)
            #expect(try #require(last.id) > (try #require(first.id)))
            // Done: the stream ends.
            #expect(try await stream.next() == nil)
        }
    }

    @Test func aPublishStreamsIncreasingIdsToSucceeded() async throws {
        try await withHerald { base, _, _ in
            #expect(try await exchange(.POST, "\(base)/v1/queue/pause").status == .ok)
            let media = try await uploadMedia(base)
            let job = try await createJob(base, ["text": "live", "media_ids": [media]])
            let stream = try await EventReader.open("\(base)/v1/jobs/\(job)/events")
            #expect(try await stream.nextEvent()?.job["state"] as? String == "queued")
            #expect(try await exchange(.POST, "\(base)/v1/queue/resume").status == .ok)
            var ids: [Int] = []
            var states: [String] = []
            while let event = try await stream.nextEvent() {
                ids.append(try #require(event.id))
                states.append(try #require(event.job["state"] as? String))
            }
            #expect(states.last == "succeeded")
            #expect(ids == ids.sorted() && Set(ids).count == ids.count, "ids only grow: \(ids)")
        }
    }

    @Test func lastEventIDSkipsASnapshotTheClientHas() async throws {
        try await withHerald { base, _, _ in
            let job = try await createJob(base, ["text": "later", "scheduled_at": "2099-01-01T00:00:00Z"])
            let first = try await EventReader.open("\(base)/v1/jobs/\(job)/events")
            let seen = try #require(try await first.nextEvent()?.id)
            // Reconnecting with the id it has: no snapshot again, only what is newer.
            let resumed = try await EventReader.open("\(base)/v1/jobs/\(job)/events", headers: [("Last-Event-ID", "\(seen)")])
            #expect(try await exchange(.POST, "\(base)/v1/jobs/\(job)/cancel").status == .accepted)
            let next = try #require(try await resumed.nextEvent())
            #expect(try #require(next.id) > seen)
            #expect(next.job["state"] as? String == "cancelled")
            // An older id gets the current snapshot at once.
            let behind = try await EventReader.open("\(base)/v1/jobs/\(job)/events", headers: [("Last-Event-ID", "0")])
            #expect(try await behind.nextEvent()?.job["state"] as? String == "cancelled")
        }
    }

    @Test func anIdleStreamGetsKeepAliveComments() async throws {
        try await withHerald(configure: { $0.eventKeepAlive = .milliseconds(100) }) { base, _, _ in
            let job = try await createJob(base, ["text": "later", "scheduled_at": "2099-01-01T00:00:00Z"])
            let stream = try await EventReader.open("\(base)/v1/jobs/\(job)/events")
            #expect(try await stream.next()?.event == "job")
            let comment = try #require(try await stream.next())
            #expect(comment.comment == "keep-alive")
        }
    }

    @Test func streamsAreLimitedAndAnotherTenantsJobIs404() async throws {
        try await withHerald(configure: { $0.maxStreams = 1 }) { base, _, application in
            let job = try await createJob(base, ["text": "later", "scheduled_at": "2099-01-01T00:00:00Z"])
            let open = try await EventReader.open("\(base)/v1/jobs/\(job)/events")
            #expect(try await open.nextEvent() != nil)
            let refused = try await exchange(.GET, "\(base)/v1/jobs/\(job)/events")
            #expect(refused.status == .serviceUnavailable)
            #expect(refused.headers.first(name: "Retry-After") != nil)
            #expect(application.events.limit.count == 1)

            let admin = try #require(application.initialKey?.secret)
            let other = try await makeKey(base, admin: admin, name: "other", tenant: "b")
            let theirs = try await call(.GET, "\(base)/v1/jobs/\(job)/events", key: other.secret)
            let unknown = try await call(.GET, "\(base)/v1/jobs/\(unknownID)/events", key: other.secret)
            #expect(theirs.status == .notFound)
            #expect(theirs.body.replacingOccurrences(of: job, with: "ID") == unknown.body.replacingOccurrences(of: unknownID, with: "ID"))
        }
    }

    @Test func theTenantsStreamStartsWithItsActiveJobsAndShowsOnlyItsOwn() async throws {
        try await withHerald { base, _, application in
            let admin = try #require(application.initialKey?.secret)
            let active = try await createJob(base, ["text": "later", "scheduled_at": "2099-01-01T00:00:00Z"])
            let stream = try await EventReader.open("\(base)/v1/events")
            #expect(try await stream.nextEvent()?.job["id"] as? String == active)
            // Another tenant's job changes: nothing arrives for it; this tenant's does.
            let other = try await makeKey(base, admin: admin, name: "other", tenant: "b")
            let theirs = try await TestKey.$current.withValue(other.secret) {
                try await createJob(base, ["text": "theirs", "scheduled_at": "2099-01-01T00:00:00Z"])
            }
            let mine = try await createJob(base, ["text": "mine", "scheduled_at": "2099-01-01T00:00:00Z"])
            let next = try #require(try await stream.nextEvent())
            #expect(next.job["id"] as? String == mine)
            #expect(next.job["id"] as? String != theirs)
        }
    }

    @Test func streamsEndCleanlyOnShutdown() async throws {
        try await withHerald { base, group, _ in
            let job = try await createJob(base, ["text": "later", "scheduled_at": "2099-01-01T00:00:00Z"])
            let stream = try await EventReader.open("\(base)/v1/jobs/\(job)/events")
            #expect(try await stream.nextEvent() != nil)
            await group.triggerGracefulShutdown()
            // The stream ends (not cut): the server's shutdown waits for it, so it must end for the group to stop.
            #expect(try await stream.next() == nil)
        }
    }

    @Test func bytesTakenByTheStoreStreamAsProgressAndShowInAPoll() async throws {
        let store = TestStore(default: .stepped)
        try await withHerald(store: store) { base, _, application in
            let media = try await uploadMedia(base, Array(pngBytes.prefix(1000)))
            let job = try await createJob(base, ["text": "bytes", "media_ids": [media]])
            let stream = try await EventReader.open("\(base)/v1/jobs/\(job)/events")
            var events: [ServerEvent] = []
            func upload(_ event: ServerEvent) -> [String: Any] { (event.job["uploads"] as? [[String: Any]])?.first ?? [:] }
            func progress(_ event: ServerEvent) -> [String: Any] { event.job["progress"] as? [String: Any] ?? [:] }
            // Until the upload has started.
            while upload(events.last ?? ServerEvent(data: ""))["state"] as? String != "uploading" {
                events.append(try #require(try await stream.nextEvent()))
            }
            #expect(upload(events.last!)["size"] as? Int == 1000 && upload(events.last!)["bytes_sent"] as? Int == 0)

            // Bytes taken: an event, and a poll shows them too.
            store.take(400)
            events.append(try #require(try await stream.nextEvent()))
            let shown = ContinuousClock.now
            #expect(upload(events.last!)["bytes_sent"] as? Int == 400)
            #expect(progress(events.last!)["bytes_uploaded"] as? Int == 400 && progress(events.last!)["bytes_total"] as? Int == 1000)
            #expect(progress(events.last!)["percent"] as? Int == 40)
            let polled = try await exchange(.GET, "\(base)/v1/jobs/\(job)")
            #expect(((polled.json["uploads"] as? [[String: Any]])?.first?["bytes_sent"] as? Int) == 400)

            // Once 250 ms have passed since that event (the throttle itself is JobChangesTests' to check), the next
            // count is an event of its own. (The wait is the interval, not a synchronisation.)
            try await Task.sleep(until: shown + application.storage.uploadProgress.interval)
            store.take(900)
            events.append(try #require(try await stream.nextEvent()))
            #expect(upload(events.last!)["bytes_sent"] as? Int == 900)

            // Done: uploaded counts every byte, then the job succeeds at 100 %, and the stream ends.
            store.finish()
            while let event = try await stream.nextEvent() { events.append(event) }
            #expect(events.last?.job["state"] as? String == "succeeded")
            #expect(progress(events.last!)["percent"] as? Int == 100 && progress(events.last!)["bytes_uploaded"] as? Int == 1000)
            #expect(upload(events.last!)["bytes_sent"] as? Int == 1000)
            let ids = events.compactMap(\.id)
            #expect(ids.count == events.count && ids == ids.sorted() && Set(ids).count == ids.count, "ids only grow: \(ids)")
            // In SQLite only the state changes wrote bytes: all of them, once uploaded.
            let stored = try await application.sqlite.pool.read { db in
                try Int.fetchOne(db, sql: "SELECT bytes_sent FROM uploads WHERE job_id = ?", arguments: [job])
            }
            #expect(stored == 1000)
        }
    }
}
