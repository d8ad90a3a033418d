import AsyncHTTPClient
import Foundation
import HeraldCore
import HeraldStorage
import HeraldTestSupport
import Logging
import NIOHTTP1
import Platform
import Publishing
import SQLiteStorage
import Synchronization
import Testing

@testable import HeraldApp

// Both owners of `struct stat` imported: see FileReading/FileChunks.swift.
#if canImport(CNIOLinux)
    import CNIOLinux
#endif

/// Files in a folder, none if it does not exist.
func files(in folder: String) -> [String] {
    ((try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []).sorted()
}

/// Publishes a post of `count` fresh media and waits for its job; returns the post's and media's ids.
func publishedPost(_ base: String, media count: Int = 2) async throws -> (post: String, media: [String]) {
    var media: [String] = []
    for _ in 0..<count { media.append(try await uploadMedia(base)) }
    let created = try await createPost(base, ["text": "kept", "media_ids": media])
    let (post, job) = try postAndJob(created.json)
    let done = try await exchange(.GET, "\(base)/v1/jobs/\(try #require(job["id"] as? String))?wait=20")
    #expect(done.json["state"] as? String == "succeeded")
    return (try #require(post["id"] as? String), media)
}

@Suite("The lifecycle of data", .serialized, .timeLimit(.minutes(3)))
struct LifecycleTests {
    @Test func aPublishLeavesExactlyOneCopyOfEachMedium() async throws {
        try await withHerald { base, _, application in
            let (_, media) = try await publishedPost(base)
            let directory = application.configuration.dataDirectory
            // The job's end is announced at its commit; the runner removes the staged files right after, then frees its
            // worker (a test that looked at once saw them, under load): bounded, no event says it from outside.
            for _ in 0..<500 where await application.runner.status().running > 0 { try await Task.sleep(for: .milliseconds(10)) }
            // The staged files went once the post was committed; the objects hold the only copy.
            #expect(files(in: directory + "/staging") == [])
            #expect(files(in: directory + "/objects/media") == media.map { "\($0).png" }.sorted())
            for id in media {
                var info = stat()
                #expect(stat(directory + "/objects/media/\(id).png", &info) == 0)
                #expect(info.st_nlink == 1, "one name for the bytes: linked from staging, then the staging name removed")
                #expect(Array(FileManager.default.contents(atPath: directory + "/objects/media/\(id).png") ?? Data()) == pngBytes)
            }
        }
    }

    @Test func unattachedMediaAndIdempotencyKeysExpireWithTheirFiles() async throws {
        try await withHerald(configure: { $0.stagedMediaTTL = 60 }) { base, _, application in
            let sweeper = try #require(application.services.compactMap { $0 as? Sweeper }.first)
            let directory = application.configuration.dataDirectory
            #expect(try await exchange(.POST, "\(base)/v1/queue/pause").status == .ok)
            let loose = try await uploadMedia(base)
            let kept = try await uploadMedia(base)
            let created = try await createPost(base, ["text": "holds one", "media_ids": [kept]], key: "retry-me")
            #expect(created.status == .accepted)
            #expect(files(in: directory + "/staging").count == 2)
            // Not yet: under a minute old.
            #expect(await sweeper.sweep(now: .now()) == (0, 0, 0, 0))
            // Past the TTL: the unattached medium goes, row and file; the attached one stays.
            let later = Timestamp.now().adding(milliseconds: 61_000)
            #expect(await sweeper.sweep(now: later).media == 1)
            #expect(try await exchange(.GET, "\(base)/v1/media/\(loose)").status == .notFound)
            #expect(try await exchange(.GET, "\(base)/v1/media/\(kept)").status == .ok)
            #expect(files(in: directory + "/staging") == ["\(kept).png"])
            // Idempotency keys after 24 hours.
            #expect(await sweeper.sweep(now: Timestamp.now().adding(milliseconds: 25 * 3_600_000)).keys == 1)
        }
    }

    @Test func theFileSweepRemovesWhatNoRowNeeds() async throws {
        try await withHerald { base, _, application in
            let sweeper = try #require(application.services.compactMap { $0 as? Sweeper }.first)
            let folder = application.configuration.dataDirectory + "/staging"
            let live = try await uploadMedia(base)
            // What a crash leaves: a partial upload, a file whose row never came, a published post's file.
            for name in ["0190f5e2-3c4d-7a1b-8c2d-000000000001.png.partial", "0190f5e2-3c4d-7a1b-8c2d-000000000002.png"] {
                #expect(FileManager.default.createFile(atPath: folder + "/" + name, contents: Data([1, 2, 3])))
            }
            // Young files are left for the next pass (an upload may be writing one, or its row may be coming).
            #expect(await sweeper.sweepFiles(olderThan: 600) == [])
            let removed = await sweeper.sweepFiles(olderThan: 0)
            #expect(
                removed.sorted() == ["staging/0190f5e2-3c4d-7a1b-8c2d-000000000001.png.partial", "staging/0190f5e2-3c4d-7a1b-8c2d-000000000002.png"])
            #expect(files(in: folder) == ["\(live).png"])
        }
    }

    @Test func deletingAPostRemovesItsObjectsThenItsRowsAnd409sWhileItsJobIsActive() async throws {
        try await withHerald { base, _, application in
            let directory = application.configuration.dataDirectory
            let (post, media) = try await publishedPost(base)
            #expect(files(in: directory + "/objects/media").count == 2)
            #expect(try await exchange(.DELETE, "\(base)/v1/posts/\(post)").status == .noContent)
            #expect(try await exchange(.GET, "\(base)/v1/posts/\(post)").status == .notFound)
            for id in media { #expect(try await exchange(.GET, "\(base)/v1/media/\(id)").status == .notFound) }
            #expect(files(in: directory + "/objects/media") == [])
            #expect(try await exchange(.DELETE, "\(base)/v1/posts/\(post)").status == .notFound)

            // A queued job: 409 until it is cancelled; then the post and its staged files go.
            #expect(try await exchange(.POST, "\(base)/v1/queue/pause").status == .ok)
            let waiting = try await uploadMedia(base)
            let created = try await createPost(base, ["text": "later", "media_ids": [waiting]], key: "k")
            let (queued, job) = try postAndJob(created.json)
            let queuedID = try #require(queued["id"] as? String)
            let refused = try await exchange(.DELETE, "\(base)/v1/posts/\(queuedID)")
            #expect(refused.status == .conflict)
            #expect(try await exchange(.POST, "\(base)/v1/jobs/\(try #require(job["id"] as? String))/cancel").status == .accepted)
            #expect(try await exchange(.DELETE, "\(base)/v1/posts/\(queuedID)").status == .noContent)
            #expect(files(in: directory + "/staging") == [])
            let report = try await ConsistencyCheck.run(storage: application.storage, store: application.store, staging: .directory(directory))
            #expect(report.problems == [])
        }
    }

    @Test func aDiskWithoutTheReserveAnswers507AndKeepsNothing() async throws {
        try await withHerald(configure: { $0.minFreeDisk = Int.max / 2 }) { base, _, application in
            let refused = try await send(.POST, "\(base)/v1/media", contentType: "image/png", body: pngBytes)
            #expect(refused.status.code == 507)
            #expect(refused.headers.first(name: "Retry-After") == "60")
            #expect(refused.json["status"] as? Int == 507)
            #expect(files(in: application.configuration.dataDirectory + "/staging") == [])
            // Reads keep working.
            #expect(try await exchange(.GET, "\(base)/v1/posts").status == .ok)
            let metrics = try await get("\(base)/metrics")
            #expect(metrics.2.contains("herald_disk_free_bytes"))
        }
    }

    /// ENOSPC for real: a 2 MiB tmpfs as the data directory, where this process may mount one (root in CI).
    @Test func runningOutOfSpaceWhileStagingIs507AndTheServerGoesOn() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("herald-full-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let mount = try runCommand(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", directory])
        guard mount == 0 else {
            // No mount allowed here: the same path through RLIMIT_FSIZE (EFBIG), in the real executable.
            try await fileSizeLimitIs507(directory)
            return
        }
        defer { _ = try? runCommand(["umount", "-l", directory]) }
        try await withHerald(configure: {
            $0.dataDirectory = directory
            $0.minFreeDisk = 0
        }) { base, _, _ in
            let big = pngBytes + [UInt8](repeating: 7, count: 3 << 20)
            let refused = try await send(.POST, "\(base)/v1/media", contentType: "image/png", body: big)
            #expect(refused.status.code == 507)
            #expect(refused.headers.first(name: "Retry-After") == "60")
            // The partial file is gone, no row was written, and the next upload that fits is taken.
            #expect(files(in: directory + "/staging") == [])
            #expect(try await exchange(.GET, "\(base)/v1/posts").status == .ok)
            let small = try await uploadMedia(base)
            #expect(files(in: directory + "/staging") == ["\(small).png"])
        }
    }

    private func fileSizeLimitIs507(_ directory: String) async throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/prlimit")
        process.arguments = ["--fsize=2097152", try heraldExecutable(), "serve", "--port", "0", "--data-dir", directory, "--min-free-disk", "0"]
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        defer {
            process.terminate()
            process.waitUntilExit()
        }
        let listening = try #require(await readLine(from: out.fileHandleForReading, containing: "listening on"))
        let port = try #require(listening.split(separator: ":").last?.prefix { $0.isNumber })
        let key = try #require(
            await readLine(from: err.fileHandleForReading, containing: "hrld_")?.split(separator: " ").first { $0.hasPrefix("hrld_") })
        let base = "http://127.0.0.1:\(port)"
        let big = pngBytes + [UInt8](repeating: 7, count: 3 << 20)
        let refused = try await call(.POST, "\(base)/v1/media", key: String(key), contentType: "image/png", body: big)
        #expect(refused.status.code == 507)
        #expect(files(in: directory + "/staging") == [])
        #expect(try await call(.GET, "\(base)/v1/posts", key: String(key)).status == .ok)
    }

    @Test func oneServerPerDataDirectory() async throws {
        try await withHerald { _, _, application in
            let directory = application.configuration.dataDirectory
            await #expect {
                _ = try await Application.build(
                    configuration: HeraldConfiguration(host: "127.0.0.1", port: 0, dataDirectory: directory), logger: .init(label: "second"),
                    metrics: TestMetrics.registry)
            } throws: { error in
                "\(error)".contains("pid \(getpid())")
            }
            let second = try runHerald(["serve", "--port", "0", "--data-dir", directory])
            #expect(second.status == 2)
            #expect(second.err.contains("pid \(getpid())"), "\(second.err)")
            // `herald keys` never takes the lock: it works beside the server.
            #expect(try runHerald(["keys", "list", "--data-dir", directory]).status == 0)
        }
    }

    @Test func backupWhileServingRestoresTheSamePostsAndCheckFindsProblems() async throws {
        try await withHerald { base, _, application in
            let directory = application.configuration.dataDirectory
            let (post, media) = try await publishedPost(base)
            let copy = FileManager.default.temporaryDirectory.appendingPathComponent("herald-copy-\(UUID().uuidString)").path
            defer { try? FileManager.default.removeItem(atPath: copy) }
            try FileManager.default.createDirectory(atPath: copy, withIntermediateDirectories: true)
            let backup = try runHerald(["backup", "--data-dir", directory, copy + "/herald.sqlite"])
            #expect(backup.status == 0, "\(backup.err)")
            #expect(try runHerald(["backup", "--data-dir", directory, copy + "/herald.sqlite"]).status != 0, "never over a file")
            let restored = try SQLiteStorage.open(directory: copy, logger: .init(label: "restored"))
            let page = try await restored.posts.list(tenant: .default, state: nil, limit: 10, after: nil)
            #expect(page.data.map(\.id.rawValue) == [post])
            #expect(page.data.first?.media.map(\.id.rawValue) == media)

            let clean = try runHerald(["check", "--data-dir", directory])
            #expect(clean.status == 0, "\(clean.out)")
            // An object removed from the store, and a stray staged file.
            #expect(unlink(directory + "/objects/media/\(media[0]).png") == 0)
            #expect(FileManager.default.createFile(atPath: directory + "/staging/stray.png", contents: Data([1])))
            let found = try runHerald(["check", "--data-dir", directory])
            #expect(found.status == 1)
            #expect(found.out.contains("object media/\(media[0]).png is missing from the store"), "\(found.out)")
            #expect(found.out.contains("stray staging file staging/stray.png"), "\(found.out)")
        }
    }
}

/// Runs a command to its end; its exit status.
func runCommand(_ arguments: [String]) throws -> Int32 {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = arguments
    process.standardOutput = FileHandle.nullDevice
    process.standardError = FileHandle.nullDevice
    try process.run()
    process.waitUntilExit()
    return process.terminationStatus
}
