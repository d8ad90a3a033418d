import Foundation
import HeraldCore
import NIOHTTP1
import Testing

@testable import HeraldApp

/// The `herald` executable this test run built, beside the test bundle.
func heraldExecutable() throws -> String {
    let directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
    let candidates = [directory, directory.deletingLastPathComponent()].map { $0.appendingPathComponent("herald").path }
    return try #require(candidates.first { FileManager.default.isExecutableFile(atPath: $0) }, "herald built beside the tests")
}

/// Runs `herald` with `arguments` to the end: exit status, stdout, stderr.
func runHerald(_ arguments: [String], environment: [String: String] = [:]) throws -> (status: Int32, out: String, err: String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: try heraldExecutable())
    process.arguments = arguments
    process.environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("HERALD_") }.merging(environment) { $1 }
    let out = Pipe()
    let err = Pipe()
    process.standardOutput = out
    process.standardError = err
    process.standardInput = FileHandle.nullDevice
    try process.run()
    let output = out.fileHandleForReading.readDataToEndOfFile()
    let errors = err.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: output, as: UTF8.self), String(decoding: errors, as: UTF8.self))
}

@Suite("herald keys, and what serve prints about keys", .serialized, .timeLimit(.minutes(2)))
struct KeysCommandTests {
    @Test func createListRevokeWorkOnTheDataDirectoryWhileTheServerRuns() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("herald-keys-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // No database yet: `keys create` makes and migrates it.
        let created = try runHerald(["keys", "create", "--name", "reporting", "--tenant", "t1", "--scope", "read", "--data-dir", directory])
        #expect(created.status == 0, "\(created.err)")
        let lines = created.out.split(separator: "\n")
        let secret = try #require(lines.first.map(String.init))
        #expect(KeySecret.isWellFormed(secret[...]))
        let id = try #require(lines.dropFirst().first?.split(separator: " ").first { $0.hasPrefix("id=") }?.dropFirst(3)).description
        #expect(!created.err.contains("hrld_"))

        try await withHerald(configure: { $0.dataDirectory = directory }) { base, _, application in
            // A key exists: no initial admin key is made.
            #expect(application.initialKey == nil)
            let read = try await call(.GET, "\(base)/v1/jobs", key: secret)
            #expect(read.status == .ok)
            let write = try await call(.POST, "\(base)/v1/posts", key: secret, contentType: "application/json", body: Array(#"{"text":"x"}"#.utf8))
            #expect(write.status == .forbidden)

            // Made from another process while this one serves.
            let other = try runHerald(["keys", "create", "--name", "second", "--data-dir", directory])
            #expect(other.status == 0)
            let second = try #require(other.out.split(separator: "\n").first.map(String.init))
            let served = try await call(.GET, "\(base)/v1/queue", key: second)
            #expect(served.status == .ok)

            let listed = try runHerald(["keys", "list", "--data-dir", directory])
            #expect(listed.status == 0)
            #expect(listed.out.contains(id) && listed.out.contains("reporting") && listed.out.contains("t1") && listed.out.contains("second"))
            #expect(!listed.out.contains("hrld_"))

            let revoked = try runHerald(["keys", "revoke", id, "--data-dir", directory])
            #expect(revoked.status == 0, "\(revoked.err)")
            #expect(
                try runHerald(["keys", "list", "--data-dir", directory]).out.split(separator: "\n").first { $0.contains(id) }?.hasSuffix("Z") == true)
        }
        let unknown = try runHerald(["keys", "revoke", "0190f5e2-3c4d-7a1b-8c2d-1234567890ab", "--data-dir", directory])
        #expect(unknown.status == 1)
        let bad = try runHerald(["keys", "create", "--name", "x", "--scope", "root", "--data-dir", directory])
        #expect(bad.status != 0)
        #expect(bad.err.contains("scope"))
        #expect(bad.out.isEmpty)
    }

    @Test func authOffOnAPublicHostExits2WithOneLine() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("herald-off-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let refused = try runHerald(["serve", "--auth", "off", "--host", "0.0.0.0", "--port", "0", "--data-dir", directory])
        #expect(refused.status == 2)
        #expect(refused.err.split(separator: "\n").count == 1, "\(refused.err)")
        #expect(refused.err.contains("--auth off"))
    }

    @Test func serveAnnouncesTheInitialKeyOnceOnStderr() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("herald-first-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        for round in 0..<2 {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: try heraldExecutable())
            process.arguments = ["serve", "--port", "0", "--data-dir", directory, "--log-level", "debug"]
            process.environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("HERALD_") }
            let out = Pipe()
            let err = Pipe()
            process.standardOutput = out
            process.standardError = err
            try process.run()
            // The server prints where it listens once it is up: read stdout until then, then stop it.
            let listening = await readLine(from: out.fileHandleForReading, containing: "listening on")
            #expect(listening != nil)
            process.terminate()
            let rest = out.fileHandleForReading.readDataToEndOfFile()
            let errors = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            #expect(process.terminationStatus == 0)
            let stdout = (listening ?? "") + String(decoding: rest, as: UTF8.self)
            #expect(!stdout.contains("hrld_"))
            let keyLines = errors.split(separator: "\n").filter { $0.contains("hrld_") }
            if round == 0 {
                #expect(keyLines.count == 1, "\(errors)")
                let tokens = keyLines.first?.split(separator: " ").filter { $0.hasPrefix("hrld_") } ?? []
                #expect(tokens.count == 1 && KeySecret.isWellFormed(tokens[0]))
                #expect(keyLines.first?.contains("herald keys create") == true)
            } else {
                // The database holds a key now: nothing is printed again.
                #expect(keyLines.isEmpty)
            }
        }
    }
}

/// Reads `handle` on a thread of its own until a line containing `marker` (returned with what came before), or the end.
func readLine(from handle: FileHandle, containing marker: String) async -> String? {
    await withCheckedContinuation { continuation in
        Thread.detachNewThread {
            var text = ""
            while true {
                let chunk = handle.availableData
                if chunk.isEmpty { return continuation.resume(returning: nil) }
                text += String(decoding: chunk, as: UTF8.self)
                if text.contains(marker) { return continuation.resume(returning: text) }
            }
        }
    }
}
