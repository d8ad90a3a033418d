import Foundation
import Synchronization
import Testing

/// A `herald` client command running as a process of its own, its output read as it comes.
final class ClientProcess: Sendable {
    private struct Output {
        var stdout = ""
        var stderr = ""
    }

    private let process: Process
    private let output = Mutex(Output())
    /// Complete stdout lines, as they are written.
    let lines: AsyncStream<String>
    /// Complete stderr lines, as they are written.
    let errorLines: AsyncStream<String>
    private let status: AsyncStream<Int32>
    private let stderrEnded: AsyncStream<Void>

    /// Starts `herald ARGUMENTS…` (or another `executable`) with `environment` and a PATH, nothing else of this process's.
    init(_ arguments: [String], environment: [String: String], executable: String? = nil) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try executable ?? heraldExecutable())
        process.arguments = arguments
        process.environment = environment.merging(["PATH": "/usr/bin:/bin"]) { mine, _ in mine }
        let (stdout, stderr) = (Pipe(), Pipe())
        process.standardOutput = stdout
        process.standardError = stderr
        process.standardInput = FileHandle.nullDevice
        let (lines, linesContinuation) = AsyncStream.makeStream(of: String.self)
        let (status, statusContinuation) = AsyncStream.makeStream(of: Int32.self)
        let (errorLines, errorLinesContinuation) = AsyncStream.makeStream(of: String.self)
        let (stderrEnded, stderrContinuation) = AsyncStream.makeStream(of: Void.self)
        self.stderrEnded = stderrEnded
        self.process = process
        self.lines = lines
        self.errorLines = errorLines
        self.status = status
        let pending = Mutex("")
        let pendingError = Mutex("")
        // Each pipe is read to its end by a thread of its own, with blocking reads. Not `readabilityHandler`: the test
        // process died twice in libdispatch's event loop (SIGSEGV in `_dispatch_event_loop_drain`, no frame of ours),
        // most likely on the epoll registration of a pipe closed while a child spawned by another test still held a
        // copy of it; with no dispatch source on a pipe, five full runs in a row passed.
        Self.drain(stdout.fileHandleForReading) { [self] data in
            let text = String(decoding: data, as: UTF8.self)
            output.withLock { $0.stdout += text }
            for line in Self.completeLines(adding: text, to: pending) { linesContinuation.yield(line) }
        } atEnd: {
            linesContinuation.finish()
        }
        Self.drain(stderr.fileHandleForReading) { [self] data in
            let text = String(decoding: data, as: UTF8.self)
            output.withLock { $0.stderr += text }
            for line in Self.completeLines(adding: text, to: pendingError) { errorLinesContinuation.yield(line) }
        } atEnd: {
            errorLinesContinuation.finish()
            stderrContinuation.finish()
        }
        process.terminationHandler = { process in
            statusContinuation.yield(process.terminationStatus)
            statusContinuation.finish()
        }
        try process.run()
    }

    /// Waits for the first stdout line that contains `text`; fails when the output ends first.
    func line(containing text: String) async throws -> String {
        try await first(in: lines, containing: text, of: "stdout")
    }

    /// Waits for the first stderr line that contains `text`; fails when the output ends first.
    func errorLine(containing text: String) async throws -> String {
        try await first(in: errorLines, containing: text, of: "stderr")
    }

    private func first(in stream: AsyncStream<String>, containing text: String, of name: String) async throws -> String {
        for await line in stream where line.contains(text) { return line }
        Issue.record("no \(name) line contains '\(text)'; stdout: \(stdout); stderr: \(stderr)")
        throw CancellationError()
    }

    /// Sends `signal` (SIGINT is Ctrl-C).
    func send(_ signal: Int32) { kill(process.processIdentifier, signal) }

    /// Waits for the process to end, and for its output unless `output` is false (a daemon it started keeps the pipes).
    func exitStatus(output: Bool = true) async -> Int32 {
        let code = await status.first { _ in true } ?? -1
        guard output else { return code }
        // The pipes may still hold the last bytes: wait for both to reach their end.
        for await _ in lines {}
        for await _ in stderrEnded {}
        return code
    }

    /// The lines `text` completes after what `pending` held; keeps the unfinished rest in `pending`.
    private static func completeLines(adding text: String, to pending: borrowing Mutex<String>) -> [String] {
        pending.withLock { pending in
            pending += text
            var parts = pending.components(separatedBy: "\n")
            pending = parts.removeLast()
            return parts
        }
    }

    /// Reads `handle` until its end on a new thread, handing each chunk to `body`, then calls `atEnd`.
    private static func drain(
        _ handle: FileHandle, _ body: @escaping @Sendable (Data) -> Void, atEnd: @escaping @Sendable () -> Void
    ) {
        Thread.detachNewThread {
            while true {
                let data = handle.availableData
                if data.isEmpty { break }
                body(data)
            }
            atEnd()
        }
    }

    var stdout: String { output.withLock { $0.stdout } }
    var stderr: String { output.withLock { $0.stderr } }
}

/// Runs `herald ARGUMENTS…` to its end: exit status, stdout, stderr.
func runClient(
    _ arguments: [String], base: String, key: String?, extra: [String: String] = [:]
) async throws -> (
    status: Int32, stdout: String, stderr: String
) {
    var environment = ["HERALD_URL": base]
    if let key { environment["HERALD_KEY"] = key }
    let process = try ClientProcess(arguments, environment: environment.merging(extra) { _, new in new })
    let status = await process.exitStatus()
    return (status, process.stdout, process.stderr)
}

/// A listening socket on 127.0.0.1 that accepts one connection, reads its request head, and never answers.
final class SilentServer: Sendable {
    let port: Int
    private let descriptor: Int32

    init() throws {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        try #require(bound == 0 && listen(descriptor, 4) == 0)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) } }
        self.descriptor = descriptor
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    /// Returns once a client has connected and sent at least its request head's first bytes.
    func waitForRequest() async {
        let descriptor = self.descriptor
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            // accept(2) and read(2) block: a thread of their own, not the cooperative pool.
            Thread.detachNewThread {
                let client = accept(descriptor, nil, nil)
                var buffer = [UInt8](repeating: 0, count: 1024)
                _ = read(client, &buffer, buffer.count)
                continuation.resume()
            }
        }
    }

    deinit { close(descriptor) }
}
