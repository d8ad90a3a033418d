import AsyncHTTPClient
import Foundation
import HeraldCore
import HeraldTestSupport
import NIOCore
import NIOHTTP1
import Platform
import Synchronization
import Testing

/// `herald serve` as a child process on a free port, with what it printed at start.
struct ServingProcess {
    let process: Process
    let base: String
    /// The initial admin key, when this start made one.
    let key: String?

    static func start(_ arguments: [String], environment: [String: String] = [:]) async throws -> ServingProcess {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try heraldExecutable())
        // A free port unless the test names one (to start again where its clients are).
        process.arguments = ["serve"] + (arguments.contains("--port") ? [] : ["--port", "0"]) + arguments
        process.environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("HERALD_") }.merging(environment) { $1 }
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        // The initial key (if any) is printed before the server listens; the address once it does.
        let listening = try #require(await readLine(from: out.fileHandleForReading, containing: "listening on"), "the server started")
        let port = try #require(listening.components(separatedBy: "listening on http://127.0.0.1:").last?.prefix { $0.isNumber })
        let stderr = err.fileHandleForReading.availableDataIfAny()
        let key = stderr.split(separator: " ").first { $0.hasPrefix("hrld_") }.map(String.init)
        return ServingProcess(process: process, base: "http://127.0.0.1:\(port)", key: key)
    }
}

extension FileHandle {
    /// What can be read at once without waiting (non-blocking), as text.
    func availableDataIfAny() -> String {
        let descriptor = fileDescriptor
        let flags = fcntl(descriptor, F_GETFL)
        _ = fcntl(descriptor, F_SETFL, flags | O_NONBLOCK)
        defer { _ = fcntl(descriptor, F_SETFL, flags) }
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        let count = Glibc.read(descriptor, &buffer, buffer.count)
        return count > 0 ? String(decoding: buffer.prefix(count), as: UTF8.self) : ""
    }
}

@Suite("Crash and restart", .serialized, .timeLimit(.minutes(2)))
struct CrashResumeTests {
    /// SIGKILL with an upload in flight, then a restart: the job resumes at once (the lock says no other process can
    /// be running it), not after its 30-second lease, and the post is published once.
    @Test func aJobLeftRunningByACrashResumesAtOnce() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("herald-crash-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let puts = Atomic(0)
        try await FakeS3.with(react: { request in
            guard request.method == "PUT" else { return .respond(status: 200) }
            // The first PUT hangs: the upload is in flight when the process dies. Later ones succeed.
            return puts.add(1, ordering: .relaxed).newValue == 1 ? .hang : .respond(status: 200)
        }) { fake in
            let arguments = ["--data-dir", directory, "--store", "s3://bucket?endpoint=\(fake.endpoint)&region=us-east-1"]
            let credentials = ["AWS_ACCESS_KEY_ID": "AKIDTEST", "AWS_SECRET_ACCESS_KEY": "secret"]
            let first = try await ServingProcess.start(arguments, environment: credentials)
            let key = try #require(first.key)
            let media = try await call(.POST, "\(first.base)/v1/media", key: key, contentType: "image/png", body: pngBytes)
            let mediaID = try #require((try JSONSerialization.jsonObject(with: Data(media.body.utf8)) as? [String: Any])?["id"] as? String)
            let body = Array(try JSONSerialization.data(withJSONObject: ["text": "crash", "media_ids": [mediaID]]))
            let created = try await call(.POST, "\(first.base)/v1/posts", key: key, contentType: "application/json", body: body)
            let job = try postAndJob(try #require(try JSONSerialization.jsonObject(with: Data(created.body.utf8)) as? [String: Any])).job
            let jobID = try #require(job["id"] as? String)
            await fake.waitForRequests(1) { $0.method == "PUT" }

            kill(first.process.processIdentifier, SIGKILL)
            first.process.waitUntilExit()
            let restarted = ContinuousClock.now
            let second = try await ServingProcess.start(arguments, environment: credentials)
            defer {
                second.process.terminate()
                second.process.waitUntilExit()
            }
            #expect(second.key == nil, "the key made by the first start is still there")
            await fake.waitForRequests(2) { $0.method == "PUT" }
            let resumedAfter = ContinuousClock.now - restarted
            // Within a second of the restart (plus this debug binary's start), far from the 30-second lease.
            #expect(resumedAfter < .seconds(5), "resumed after \(resumedAfter)")
            let done = try await call(.GET, "\(second.base)/v1/jobs/\(jobID)?wait=20", key: key)
            let answer = try #require(try JSONSerialization.jsonObject(with: Data(done.body.utf8)) as? [String: Any])
            #expect(answer["state"] as? String == "succeeded")
            #expect(answer["attempt"] as? Int == 2)
            print("resumed \(resumedAfter) after the restart")
        }
    }

    /// SIGKILL while a `POST /v1/media` body streams leaves `staging/<id>.<ext>.partial`; the restart removes it
    /// before it listens.
    @Test func anUploadCutByACrashLeavesNoPartialFileAfterTheRestart() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("herald-partial-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let first = try await ServingProcess.start(["--data-dir", directory, "--min-free-disk", "0"])
        let key = try #require(first.key)
        let staging = directory + "/staging"
        let upload = Task {
            var request = HTTPClientRequest(url: "\(first.base)/v1/media")
            request.method = .POST
            request.headers.add(name: "Authorization", value: "Bearer \(key)")
            request.headers.add(name: "Content-Type", value: "image/png")
            // A megabyte declared, a quarter of it sent before the body stops coming: the upload is in flight.
            request.body = .stream(
                StalledBody(head: pngBytes + [UInt8](repeating: 0, count: (256 << 10) - pngBytes.count)), length: .known(Int64(1 << 20)))
            _ = try? await HTTPClient.shared.execute(request, timeout: .seconds(60))
        }
        defer { upload.cancel() }
        // The staging write has no event a test can await from outside the process: look until the file has bytes.
        var partial: String?
        for _ in 0..<500 where partial == nil {
            partial = files(in: staging).first { $0.hasSuffix(".partial") && fileSize(staging + "/" + $0) > 0 }
            if partial == nil { try await Task.sleep(for: .milliseconds(20)) }
        }
        let name = try #require(partial, "the upload reached staging")

        kill(first.process.processIdentifier, SIGKILL)
        first.process.waitUntilExit()
        #expect(files(in: staging).contains(name), "the crash left the partial file")
        let second = try await ServingProcess.start(["--data-dir", directory, "--min-free-disk", "0"])
        defer {
            second.process.terminate()
            second.process.waitUntilExit()
        }
        #expect(!files(in: staging).contains(name), "removed at start, before the server listened: \(files(in: staging))")
        // The server goes on staging as before.
        let media = try await call(.POST, "\(second.base)/v1/media", key: key, contentType: "image/png", body: pngBytes)
        #expect(media.status == .created, "\(media.body)")
    }
}

/// The size of the file at `path`, 0 when there is none.
func fileSize(_ path: String) -> Int {
    ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? Int) ?? 0
}

/// A request body that sends `head`, then never sends more (until its task is cancelled).
struct StalledBody: AsyncSequence, Sendable {
    let head: [UInt8]

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(head: head) }

    struct AsyncIterator: AsyncIteratorProtocol {
        var head: [UInt8]?

        mutating func next() async throws -> ByteBuffer? {
            if let bytes = head {
                head = nil
                return ByteBuffer(bytes: bytes)
            }
            try await Task.sleep(for: .seconds(3600))
            return nil
        }
    }
}
