import Foundation
import HeraldCore
import HeraldTestSupport
import Testing

@testable import HeraldApp

/// `herald publish` in a real terminal (tmux): the bars draw, move, fit the width, and finish.
@Suite("herald publish in a terminal", .serialized, .timeLimit(.minutes(2)))
struct CLITerminalTests {
    /// A tmux server of its own (`-L`), so the test touches no one else's sessions.
    struct Terminal: ~Copyable {
        typealias Spawn = CLITerminalTests
        let socket = "herald-test-\(UUID().uuidString.prefix(8))"

        /// Runs a tmux command to its end; its stdout.
        func run(_ arguments: [String]) async throws -> String {
            let output = FileManager.default.temporaryDirectory.appendingPathComponent("\(socket)-\(UUID().uuidString).out").path
            defer { try? FileManager.default.removeItem(atPath: output) }
            let status = await Spawn.spawnAndWait("/usr/bin/tmux", ["tmux", "-L", socket] + arguments, stdout: output)
            try #require(status == 0, "tmux \(arguments) exited \(status)")
            return (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
        }

        /// Starts `command` in a detached window `width` × `height`; the pane stays open after it ends.
        func start(_ command: String, width: Int, height: Int) async throws {
            _ = try await run(["new-session", "-d", "-s", "cli", "-x", "\(width)", "-y", "\(height)", command + "; echo EXIT=$?; sleep 120"])
        }

        /// What the window shows now; with `escapes`, colour codes included.
        func screen(escapes: Bool = false) async throws -> String {
            try await run(["capture-pane", "-p", "-t", "cli"] + (escapes ? ["-e"] : []))
        }

        /// Samples the screen every 50 ms until it shows `EXIT=` (at most 30 s): every distinct frame seen, in order.
        func frames() async throws -> [String] {
            var frames: [String] = []
            let deadline = ContinuousClock.now + .seconds(30)
            while ContinuousClock.now < deadline {
                let screen = try await screen()
                if frames.last != screen { frames.append(screen) }
                if screen.contains("EXIT=") { break }
                // Sampling what a person would see: the screen has no event to await.
                try await Task.sleep(for: .milliseconds(50))
            }
            return frames
        }

        /// Ends the tmux server and what runs in it.
        consuming func close() async {
            _ = try? await run(["kill-server"])
        }
    }

    /// Runs `path` with `arguments` (argv, its name first), stdout to the file `stdout`, and waits for it on a thread of
    /// its own. Not Foundation's `Process`: the tmux server a command starts would inherit the descriptor by which
    /// `Process` learns that its child ended, and hold it open until the server ends.
    static func spawnAndWait(_ path: String, _ arguments: [String], stdout: String) async -> Int32 {
        await withCheckedContinuation { continuation in
            Thread.detachNewThread {
                var actions = posix_spawn_file_actions_t()
                posix_spawn_file_actions_init(&actions)
                posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
                posix_spawn_file_actions_addopen(&actions, 1, stdout, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
                posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
                var argv = arguments.map { strdup($0) } + [nil]
                var environment: [UnsafeMutablePointer<CChar>?] = [strdup("PATH=/usr/bin:/bin"), nil]
                // Signals back to their defaults and none blocked: tmux's panes inherit them, and a SIGHUP this test
                // process ignores would leave kill-server waiting for the pane forever.
                var attributes = posix_spawnattr_t()
                posix_spawnattr_init(&attributes)
                var all = sigset_t()
                var none = sigset_t()
                sigfillset(&all)
                sigemptyset(&none)
                posix_spawnattr_setsigdefault(&attributes, &all)
                posix_spawnattr_setsigmask(&attributes, &none)
                posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))
                var pid: pid_t = 0
                let spawned = posix_spawn(&pid, path, &actions, &attributes, &argv, &environment)
                posix_spawnattr_destroy(&attributes)
                for pointer in argv + environment { free(pointer) }
                posix_spawn_file_actions_destroy(&actions)
                var status: Int32 = 0
                guard spawned == 0, waitpid(pid, &status, 0) == pid else { return continuation.resume(returning: -1) }
                continuation.resume(returning: (status & 0x7f) == 0 ? (status >> 8) & 0xff : -1)
            }
        }
    }

    static func command(_ arguments: String, base: String, key: String, extra: String = "") -> String {
        "env -i PATH=/usr/bin:/bin TERM=xterm-256color HERALD_URL=\(base) HERALD_KEY=\(key) \(extra) \(try! heraldExecutable()) \(arguments)"
    }

    @Test func barsDrawMoveAndFinishInColour() async throws {
        let files = try ClientFiles()
        let (small, second) = (files.small, files.second)
        try await withHerald(store: TestStore.paced(.seconds(2))) { base, _, application in
            let key = try #require(application.initialKey?.secret)
            let terminal = Terminal()
            try await terminal.start(Self.command("publish \(small) \(second) --text terminal", base: base, key: key), width: 100, height: 30)
            let frames = try await terminal.frames()
            let coloured = try await terminal.screen(escapes: true)
            await terminal.close()
            let last = try #require(frames.last)
            #expect(last.contains("EXIT=0"), "\(last)")
            // While the job ran, a frame showed a bar part way, with its bytes, rate and time left.
            let moving = frames.filter { frame in
                frame.split(separator: "\n").contains {
                    $0.contains("second.png") && $0.contains("of 24.4 KiB") && $0.contains("/s") && $0.contains(" left")
                }
            }
            #expect(!moving.isEmpty, "no frame showed a moving bar: \(frames.joined(separator: "\n----\n"))")
            #expect(frames.contains { $0.contains(" running  ") }, "the job's line showed it running")
            // At the end: each file's bar full and done, the job succeeded, nothing left half drawn.
            let lines = last.split(separator: "\n")
            let doneBars = lines.filter { $0.contains("[==============================] done") }
            #expect(doneBars.count == 4, "two upload bars, then two job bars: \(last)")
            #expect(lines.contains { $0.hasPrefix("published post ") })
            #expect(!lines.contains { $0.contains("]") && $0.contains("%") }, "no bar is left part way: \(last)")
            #expect(coloured.contains("\u{1B}[32m"), "done bars are green")
        }
    }

    @Test func aNarrowTerminalGetsShorterLinesAndNO_COLORNoColour() async throws {
        let files = try ClientFiles()
        let second = files.second
        try await withHerald(store: TestStore.paced(.seconds(1))) { base, _, application in
            let key = try #require(application.initialKey?.secret)
            let terminal = Terminal()
            try await terminal.start(
                Self.command("publish \(second) --text narrow", base: base, key: key, extra: "NO_COLOR=1"), width: 40, height: 30)
            let frames = try await terminal.frames()
            let coloured = try await terminal.screen(escapes: true)
            await terminal.close()
            let last = try #require(frames.last)
            #expect(last.contains("EXIT=0"), "\(last)")
            // Every bar line fits on one row: name, whole bar and status together.
            for frame in frames {
                for line in frame.split(separator: "\n") where line.contains("[") && !line.contains("EXIT") {
                    #expect(line.contains("]"), "a bar line wrapped: \(frame)")
                    #expect(line.count <= 39)
                }
            }
            #expect(!coloured.contains("\u{1B}[3"), "NO_COLOR: no colour codes: \(coloured)")
        }
    }
}
