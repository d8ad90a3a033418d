import Foundation
import HeraldCore
import HeraldStorage
import HeraldTestSupport
import Logging
import PostgresNIO
import PostgresStorage
import SQLiteStorage
import Testing

/// A storage backend the conformance suite runs against: each test runs once per case, on a database of its own.
///
/// A new backend adds its case here (and what it needs to start); the suite itself does not change.
enum Backend: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case sqlite
    /// A database of its own on the tests' PostgreSQL 15 server, the storage running beside the test.
    case postgres

    var testDescription: String { rawValue }

    /// Runs `body` on an empty, migrated database of this backend, dropped afterwards.
    func withStorage(_ body: (any Storage) async throws -> Void) async throws {
        switch self {
        case .sqlite:
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("herald-conformance-\(UUID().uuidString)").path
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let storage = try SQLiteStorage.open(directory: directory, logger: Self.quiet)
            defer { try? storage.close() }
            try await body(storage)
        case .postgres:
            let server = try await PostgresServer.shared()
            let url = try DatabaseURL(parsing: server.url(database: try await server.makeDatabase()))
            let storage = try await PostgresStorage.open(url: url, logger: Self.quiet)
            try await withThrowingTaskGroup { group in
                group.addTask { try await storage.run() }
                defer { group.cancelAll() }
                do {
                    try await body(storage)
                } catch let error as PSQLError {
                    // The driver's own description hides the server's message: the test's failure should show it.
                    throw Unexpected(String(reflecting: error))
                }
            }
        }
    }

    private static let quiet = Logger(label: "conformance", factory: { _ in SwiftLogNoOpLogHandler() })
}

/// What the tests do often, through the protocols only.
struct Fixture {
    let storage: any Storage

    /// The tests' origin of time.
    static let origin = Timestamp(rfc3339: "2026-11-22T10:00:00.000Z")!

    /// `seconds` after ``origin``.
    static func at(_ seconds: Double) -> Timestamp {
        origin.adding(milliseconds: Int64((seconds * 1000).rounded()))
    }

    /// Stages `count` media of `tenant`; their ids in staging order.
    func stage(_ count: Int, tenant: Tenant = .default, at time: Timestamp = Fixture.origin) async throws -> [MediaID] {
        var ids: [MediaID] = []
        for index in 0..<count {
            let id = MediaID.generate(at: time)
            let medium = Media(
                id: id, contentType: index % 2 == 0 ? .png : .mp4, size: Int64(100 + index), sha256: String(repeating: "ab", count: 32),
                createdAt: time)
            try await storage.media.insert(medium, tenant: tenant, stagingPath: "staging/\(id)")
            ids.append(id)
        }
        return ids
    }

    /// Creates a post that must be accepted.
    func create(
        _ text: String, media: [MediaID] = [], tenant: Tenant = .default, priority: Priority = .normal, scheduledAt: Timestamp? = nil,
        traceparent: String? = nil, at now: Timestamp = Fixture.at(1)
    ) async throws -> PostAndJob {
        let request = PostRequest(text: text, mediaIDs: media, scheduledAt: scheduledAt, priority: priority, traceparent: traceparent)
        let creation = try await storage.posts.create(request, tenant: tenant, idempotency: nil, now: now)
        guard case .created(let created) = creation else { throw Unexpected("expected a created post, got \(creation)") }
        return created
    }

    /// `count` text posts of `tenant`, made a tenth of a second apart from 1 s on: their jobs' ids, oldest first.
    func backlog(_ count: Int, tenant: Tenant) async throws -> [JobID] {
        var jobs: [JobID] = []
        for index in 0..<count {
            jobs.append(try await create("\(tenant)\(index)", tenant: tenant, at: Fixture.at(1 + Double(index) / 10)).job.id)
        }
        return jobs
    }

    /// Claims exactly one job for `runner`.
    func claim(_ runner: String = "a", leaseUntil: Timestamp = Fixture.at(60), at now: Timestamp = Fixture.at(2)) async throws -> ClaimedJob {
        guard let claimed = try await storage.jobs.claim(runner: runner, leaseUntil: leaseUntil, now: now) else {
            throw Unexpected("no job to claim")
        }
        return claimed
    }

    /// A stored object for each medium of `claimed`.
    static func objects(_ claimed: ClaimedJob) -> [MediaID: StoredObject] {
        Dictionary(
            uniqueKeysWithValues: claimed.media.map { ($0.mediaID, StoredObject(key: "k/\($0.mediaID)", url: "https://cdn.example/\($0.mediaID)")) })
    }
}

struct Unexpected: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
