import Foundation
import HeraldCore
import HeraldTestSupport
import Testing

@testable import HeraldApp

/// Files for the client tests: two small PNGs, a GIF (the paced store refuses it) and a PNG big enough to hang.
struct ClientFiles: ~Copyable {
    let directory: String
    var small: String { directory + "/first.png" }
    var second: String { directory + "/second.png" }
    var refused: String { directory + "/refused.gif" }
    var hanging: String { directory + "/big.png" }

    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("herald-cli-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try Data(pngBytes).write(to: URL(fileURLWithPath: small))
        try Data(pngBytes + Array(repeating: 7, count: 20_000)).write(to: URL(fileURLWithPath: second))
        try Data(Array("GIF89a".utf8) + Array(repeating: 1, count: 2000)).write(to: URL(fileURLWithPath: refused))
        try Data(pngBytes + Array(repeating: 0, count: TestStore.hangingSize)).write(to: URL(fileURLWithPath: hanging))
    }

    deinit { try? FileManager.default.removeItem(atPath: directory) }
}

/// The `herald` executable's client commands against a live Herald, output piped (not a terminal).
@Suite("herald publish, jobs, posts: piped", .serialized, .timeLimit(.minutes(2)))
struct CLITests {
    @Test func publishPrintsALinePerEventAndExitsZeroWhenPublished() async throws {
        let files = try ClientFiles()
        let (small, second) = (files.small, files.second)
        try await withHerald(store: TestStore.paced()) { base, _, application in
            let key = try #require(application.initialKey?.secret)
            let run = try await runClient(["publish", small, second, "--text", "from the CLI"], base: base, key: key)
            #expect(run.status == 0, "stderr: \(run.stderr)")
            let lines = run.stdout.split(separator: "\n").map(String.init)
            // The two upload at once: either may finish first.
            #expect(lines.prefix(2).contains { $0.hasPrefix("uploaded first.png (4.9 KiB) as media ") }, "\(lines)")
            #expect(lines.prefix(2).contains { $0.hasPrefix("uploaded second.png (24.4 KiB) as media ") }, "\(lines)")
            let created = try #require(lines.first { $0.hasPrefix("created post ") })
            #expect(lines.contains { $0.contains(" running: 0 of 2 uploaded") })
            // Byte progress shows while the store takes the bytes: a running line with some bytes sent but not all.
            #expect(
                lines.contains { $0.contains(" running: ") && !$0.contains("(0 B of") && !$0.contains("uploaded, 100%") },
                "byte progress shows: \(lines)")
            let last = try #require(lines.last)
            #expect(last.contains(" succeeded: post ") && last.hasSuffix(" published"))
            #expect(!run.stdout.contains("\u{1B}["), "no colour codes when piped")
            // The post is there, published, with both media in the order given.
            let postID = String(created.split(separator: " ")[2].dropLast())
            let shown = try await runClient(["posts", "show", postID, "--json"], base: base, key: key)
            let post = try #require(try JSONSerialization.jsonObject(with: Data(shown.stdout.utf8)) as? [String: Any])
            #expect(post["state"] as? String == "published")
            #expect((post["media"] as? [[String: Any]])?.map { $0["size"] as? Int } == [pngBytes.count, pngBytes.count + 20_000])
            #expect(post["text"] as? String == "from the CLI")
        }
    }

    @Test func jsonPrintsTheServersObjectsOneALine() async throws {
        let files = try ClientFiles()
        let small = files.small
        try await withHerald(store: TestStore.paced()) { base, _, application in
            let key = try #require(application.initialKey?.secret)
            let run = try await runClient(["publish", small, "--text", "json", "--json", "--priority", "high"], base: base, key: key)
            #expect(run.status == 0, "stderr: \(run.stderr)")
            let objects = try run.stdout.split(separator: "\n").map {
                try #require(try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])
            }
            #expect(objects.count >= 4, "the medium, the post and job, then the job's snapshots")
            #expect(objects[0]["state"] as? String == "staged" && objects[0]["content_type"] as? String == "image/png")
            let job = try #require(objects[1]["job"] as? [String: Any])
            #expect(job["priority"] as? String == "high")
            #expect(objects.dropFirst(2).allSatisfy { $0["id"] as? String == job["id"] as? String })
            #expect(objects.last?["state"] as? String == "succeeded")
            let ids = objects.dropFirst(2).compactMap { ($0["uploads"] as? [[String: Any]])?.first?["bytes_sent"] as? Int }
            #expect(ids == ids.sorted(), "bytes only grow")
        }
    }

    @Test func aFailedJobExitsOneAndSaysWhy() async throws {
        let files = try ClientFiles()
        let (small, refused) = (files.small, files.refused)
        try await withHerald(store: TestStore.paced()) { base, _, application in
            let key = try #require(application.initialKey?.secret)
            let run = try await runClient(["publish", small, refused, "--text", "doomed"], base: base, key: key)
            #expect(run.status == 1, "stdout: \(run.stdout) stderr: \(run.stderr)")
            #expect(run.stdout.split(separator: "\n").last?.contains(" failed: upload_failed: ") == true, "\(run.stdout)")
        }
    }

    @Test func ctrlCCancelsTheJobWaitsForItsEndAndExitsThree() async throws {
        let files = try ClientFiles()
        let (small, hanging) = (files.small, files.hanging)
        try await withHerald(store: TestStore.paced()) { base, _, application in
            let key = try #require(application.initialKey?.secret)
            let process = try ClientProcess(
                ["publish", small, hanging, "--text", "to cancel"], environment: ["HERALD_URL": base, "HERALD_KEY": key])
            let created = try await process.line(containing: "created post ")
            _ = try await process.line(containing: "running: 1 of 2 uploaded")
            process.send(SIGINT)
            let status = await process.exitStatus()
            #expect(status == 3, "stdout: \(process.stdout) stderr: \(process.stderr)")
            #expect(process.stderr.contains("cancelling job "))
            #expect(process.stdout.split(separator: "\n").last?.hasSuffix(" cancelled") == true, "\(process.stdout)")
            let words = created.split(separator: " ")
            let jobID = String(words[try #require(words.firstIndex(of: "job")) + 1])
            let job = try await runClient(["jobs", "show", jobID, "--json"], base: base, key: key)
            #expect(job.stdout.contains(#""state":"cancelled""#))
            // Watching a job that ended says how: cancelled is 3.
            #expect(try await runClient(["jobs", "watch", jobID], base: base, key: key).status == 3)
        }
    }

    /// The first Ctrl-C's cancel goes to a server that has stopped answering (SIGSTOP): the second still leaves at once.
    @Test func aSecondCtrlCLeavesAtOnceWhileTheServerDoesNotAnswer() async throws {
        let files = try ClientFiles()
        let directory = files.directory + "/data"
        // The upload hangs in the store: the job is running when the client is interrupted.
        try await FakeS3.with(react: { $0.method == "PUT" ? .hang : .respond(status: 200) }) { fake in
            let server = try await ServingProcess.start(
                ["--data-dir", directory, "--shutdown-grace", "1", "--store", "s3://bucket?endpoint=\(fake.endpoint)&region=us-east-1"],
                environment: ["AWS_ACCESS_KEY_ID": "AKIDTEST", "AWS_SECRET_ACCESS_KEY": "secret"])
            defer {
                kill(server.process.processIdentifier, SIGCONT)
                server.process.terminate()
                server.process.waitUntilExit()
            }
            let process = try ClientProcess(
                ["publish", files.small, "--text", "stopped server"],
                environment: ["HERALD_URL": server.base, "HERALD_KEY": try #require(server.key)])
            _ = try await process.line(containing: "created post ")
            await fake.waitForRequests(1) { $0.method == "PUT" }
            kill(server.process.processIdentifier, SIGSTOP)
            process.send(SIGINT)
            _ = try await process.errorLine(containing: "cancelling job ")
            process.send(SIGINT)
            // Before the fix the second Ctrl-C waited behind the cancel request, which the stopped server never answers.
            let status = await withTaskGroup(of: Int32?.self) { group in
                group.addTask { await process.exitStatus(output: false) }
                group.addTask {
                    try? await Task.sleep(for: .seconds(10))
                    return nil
                }
                defer { group.cancelAll() }
                return await group.next() ?? nil
            }
            if status == nil { process.send(SIGKILL) }
            #expect(status == 130, "stdout: \(process.stdout) stderr: \(process.stderr)")
            #expect(process.stderr.contains("herald: left without waiting; job "), "\(process.stderr)")
        }
    }

    @Test func ctrlCBeforeThereIsAJobStopsTheUploadAndExits130() async throws {
        let files = try ClientFiles()
        // A server that takes the connection and never answers: the CLI stays in its upload.
        let silent = try SilentServer()
        let process = try ClientProcess(["publish", files.small, "--text", "never"], environment: ["HERALD_URL": "http://127.0.0.1:\(silent.port)"])
        await silent.waitForRequest()
        process.send(SIGINT)
        let status = await process.exitStatus()
        #expect(status == 130)
        #expect(process.stderr.contains("herald: interrupted"), "\(process.stderr)")
    }

    @Test func aFileHeraldWouldRefuseIsRefusedBeforeAnythingIsUploaded() async throws {
        let files = try ClientFiles()
        let (small, directory) = (files.small, files.directory)
        try await withHerald(store: TestStore.paced()) { base, _, application in
            let key = try #require(application.initialKey?.secret)
            let text = directory + "/notes.txt"
            try Data("not a picture".utf8).write(to: URL(fileURLWithPath: text))
            let run = try await runClient(["publish", small, text, "--text", "x"], base: base, key: key)
            #expect(run.status == 2)
            #expect(run.stderr.contains("notes.txt: not an image or video Herald accepts"), "\(run.stderr)")
            let missing = try await runClient(["publish", directory + "/missing.png"], base: base, key: key)
            #expect(missing.status == 2 && missing.stderr.contains("No such file"))
            let posts = try await runClient(["posts", "list", "--json"], base: base, key: key)
            #expect(posts.stdout.contains(#""data":[]"#), "nothing was published")
        }
    }

    @Test func jobsAndPostsCommandsListShowCancel() async throws {
        let files = try ClientFiles()
        let (small, hanging) = (files.small, files.hanging)
        try await withHerald(store: TestStore.paced()) { base, _, application in
            let key = try #require(application.initialKey?.secret)
            let done = try await runClient(["publish", small, "--text", "first post"], base: base, key: key)
            #expect(done.status == 0)
            let detached = try await runClient(["publish", hanging, "--text", "second post", "--detach", "--json"], base: base, key: key)
            #expect(detached.status == 0, "--detach exits once the post exists")
            let answer = try #require(
                try JSONSerialization.jsonObject(with: Data((detached.stdout.split(separator: "\n").last ?? "").utf8)) as? [String: Any])
            let jobID = try #require((answer["job"] as? [String: Any])?["id"] as? String)
            let postID = try #require((answer["post"] as? [String: Any])?["id"] as? String)

            let jobs = try await runClient(["jobs", "list"], base: base, key: key)
            #expect(jobs.status == 0)
            let rows = jobs.stdout.split(separator: "\n")
            #expect(rows.first?.hasPrefix("JOB ") == true)
            #expect(rows.count == 3 && rows[1].hasPrefix(jobID), "newest first: \(jobs.stdout)")
            #expect(rows[2].contains("succeeded"))
            let limited = try await runClient(["jobs", "list", "--limit", "1", "--state", "succeeded"], base: base, key: key)
            #expect(limited.stdout.split(separator: "\n").count == 2)

            let shown = try await runClient(["jobs", "show", jobID], base: base, key: key)
            #expect(shown.stdout.hasPrefix("job \(jobID) "), "\(shown.stdout)")
            #expect(shown.stdout.contains("  post      \(postID)"))
            let cancelled = try await runClient(["jobs", "cancel", jobID], base: base, key: key)
            #expect(cancelled.status == 0)
            #expect(cancelled.stdout.contains("cancel requested") || cancelled.stdout.contains("cancelled"))
            #expect(try await runClient(["jobs", "watch", jobID], base: base, key: key).status == 3)
            let again = try await runClient(["jobs", "cancel", jobID], base: base, key: key)
            #expect(again.status == 0, "cancelling a cancelled job is no error (200)")

            let posts = try await runClient(["posts", "list", "--state", "cancelled"], base: base, key: key)
            #expect(posts.stdout.split(separator: "\n").count == 2 && posts.stdout.contains("second post"))
            let post = try await runClient(["posts", "show", postID], base: base, key: key)
            #expect(post.stdout.hasPrefix("post \(postID) cancelled"))
            #expect(post.stdout.contains("  text       second post"))
        }
    }

    @Test func refusalsAndUnreachableServersExitTwoWithTheReason() async throws {
        let files = try ClientFiles()
        let small = files.small
        try await withHerald(store: TestStore.paced()) { base, _, _ in
            let wrongKey = try await runClient(["jobs", "list"], base: base, key: "hrld_wrong")
            #expect(wrongKey.status == 2)
            #expect(wrongKey.stderr.contains("401"), "\(wrongKey.stderr)")
            let unknown = try await runClient(["jobs", "show", "no-such-job"], base: base, key: nil)
            #expect(unknown.status == 2)
        }
        let nobody = try await runClient(["publish", small, "--text", "x"], base: "http://127.0.0.1:9", key: "hrld_x")
        #expect(nobody.status == 2)
        #expect(nobody.stderr.contains("cannot reach http://127.0.0.1:9"), "\(nobody.stderr)")
        let usage = try await runClient(["publish"], base: "http://127.0.0.1:9", key: nil)
        #expect(usage.status == 64, "nothing to publish is a usage error")
    }
}
