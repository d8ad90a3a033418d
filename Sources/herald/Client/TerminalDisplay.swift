import ConsoleKitTerminal
import HeraldClient
import HeraldCore
import Synchronization

/// Progress bars redrawn in place on a terminal (console-kit's activity indicator): one per file while uploading, then
/// one per upload of the job until it is done. Fitted to the terminal's width at every redraw.
final class TerminalDisplay: Display {
    private struct State {
        var indicator: ActivityIndicator<TransferBoard>?
        var board = TransferBoard(title: [], lines: [], notes: [], colour: false)
        var files: [FileToUpload] = []
        var fileMeters: [TransferMeter] = []
        var fileDone: Set<Int> = []
        /// Media ids to the names of the files they came from (`herald publish`), else a short id.
        var names: [String: String] = [:]
        var uploadMeters: [String: TransferMeter] = [:]
    }

    private let terminal = Terminal()
    private let state: Mutex<State>
    private let colour = colourEnabled

    init() {
        state = Mutex(State())
    }

    func uploading(_ files: [FileToUpload]) {
        state.withLock { state in
            state.files = files
            state.fileMeters = files.map { TransferMeter(total: $0.size) }
            state.board = TransferBoard(
                title: [ConsoleTextFragment(string: "uploading \(files.count) file(s)")], lines: [], notes: [], colour: colour)
            redrawFiles(&state)
            let indicator = state.board.newActivity(for: terminal)
            indicator.start(refreshRate: 100)
            state.indicator = indicator
        }
    }

    func uploadProgress(_ index: Int, bytes: Int) {
        state.withLock { state in
            guard state.fileMeters.indices.contains(index) else { return }
            state.fileMeters[index].record(bytes, at: .now)
            redrawFiles(&state)
        }
    }

    func uploaded(_ index: Int, _ media: APIClient.Answer<Media>) {
        state.withLock { state in
            guard state.files.indices.contains(index) else { return }
            state.fileMeters[index].record(state.files[index].size, at: .now)
            state.fileDone.insert(index)
            state.names[media.value.id.rawValue] = state.files[index].name
            redrawFiles(&state)
        }
    }

    func created(_ answer: APIClient.Answer<PostAndJob>) {
        stopIndicator()
        terminal.output("created post \(answer.value.post.id), job \(answer.value.job.id)".consoleText())
    }

    func job(_ answer: APIClient.Answer<Job>) {
        let job = answer.value
        let finished = state.withLock { state -> Bool in
            let now = ContinuousClock.now
            var lines: [ProgressLine] = []
            for upload in job.uploads {
                let id = upload.mediaID.rawValue
                var meter = state.uploadMeters[id] ?? TransferMeter(total: upload.size)
                meter.record(upload.state == .uploaded ? upload.size : upload.bytesSent, at: now)
                state.uploadMeters[id] = meter
                let outcome: String? =
                    switch upload.state {
                    case .uploaded: "done"
                    case .failed: "failed"
                    case .cancelled: "cancelled"
                    case .pending, .uploading: job.done ? upload.state.rawValue : nil
                    }
                lines.append(
                    ProgressLine(
                        name: state.names[id] ?? String(id.suffix(12)), fraction: meter.fraction, bytes: (meter.done, upload.size),
                        bytesPerSecond: meter.bytesPerSecond, secondsLeft: meter.secondsLeft, outcome: outcome))
            }
            var title: ConsoleText = [
                ConsoleTextFragment(string: "job \(job.id) "),
                ConsoleTextFragment(string: job.state.rawValue, style: colour ? Self.style(job.state) : .plain),
            ]
            if job.cancelRequested && !job.done { title += " (cancelling)".consoleText() }
            title += "  \(job.progress.uploaded) of \(job.progress.total) uploaded, \(job.progress.percent)%".consoleText()
            state.board.title = title
            state.board.lines = lines
            if let indicator = state.indicator {
                indicator.activity = state.board
            } else if !job.done {
                let indicator = state.board.newActivity(for: terminal)
                indicator.start(refreshRate: 100)
                state.indicator = indicator
            }
            return job.done
        }
        if finished {
            if !stopIndicator() {
                // Done at the first snapshot: draw the board once, as it ended.
                let board = state.withLock { $0.board }
                board.outputActivityIndicator(to: terminal, state: .success)
            }
            // The title above names the job: the last line says only how it ended, short enough not to wrap.
            let outcome =
                switch job.state {
                case .succeeded: "published post \(job.postID)"
                case .failed: "failed" + (job.error.map { ": \($0.message)" } ?? "")
                default: job.state.rawValue
                }
            terminal.output(outcome.consoleText(colour ? Self.style(job.state) : .plain))
        }
    }

    func note(_ text: String) {
        state.withLock { state in
            state.board.notes.append(text)
            state.indicator?.activity = state.board
        }
    }

    func end() { stopIndicator() }

    /// Stops the redraws, leaving the board drawn as it is; false when none was running.
    @discardableResult
    private func stopIndicator() -> Bool {
        // Taken out of the lock first: succeed() waits for the redraw queue.
        let indicator = state.withLock { state in
            defer { state.indicator = nil }
            state.indicator?.activity = state.board
            return state.indicator
        }
        indicator?.succeed()
        return indicator != nil
    }

    private func redrawFiles(_ state: inout State) {
        state.board.lines = state.files.indices.map { index in
            let meter = state.fileMeters[index]
            let done = state.fileDone.contains(index)
            return ProgressLine(
                name: state.files[index].name, fraction: meter.fraction, bytes: (meter.done, meter.total),
                bytesPerSecond: meter.bytesPerSecond, secondsLeft: meter.secondsLeft, outcome: done ? "done" : nil)
        }
        state.indicator?.activity = state.board
    }

    private static func style(_ state: JobState) -> ConsoleStyle {
        switch state {
        case .succeeded: .success
        case .failed: .error
        case .cancelled: .warning
        case .running: .info
        case .queued, .scheduled: .plain
        }
    }
}

/// What the terminal display draws: a title line, a progress line per transfer, and notes (`cancelling …`).
struct TransferBoard: ActivityIndicatorType {
    var title: ConsoleText
    var lines: [ProgressLine]
    var notes: [String]
    var colour: Bool

    func outputActivityIndicator(to console: any Console, state: ActivityIndicatorState) {
        let width = console.size.width > 0 ? console.size.width : 80
        let nameWidth = lines.map(\.name.count).max()
        if !title.fragments.isEmpty { console.output(Self.fitted(title, width: width)) }
        for var line in lines {
            line.nameWidth = nameWidth
            let parts = line.parts(width: width)
            let barStyle: ConsoleStyle =
                switch line.outcome {
                case nil: .info
                case "done": .success
                case "failed": .error
                default: .warning
                }
            var text: ConsoleText = [
                ConsoleTextFragment(string: parts.name + " "), ConsoleTextFragment(string: parts.bar, style: colour ? barStyle : .plain),
            ]
            text += " \(parts.status)".consoleText()
            if !parts.figures.isEmpty { text += "  \(parts.figures)".consoleText() }
            console.output(text)
        }
        for note in notes { console.output(Self.fitted(note.consoleText(colour ? .warning : .plain), width: width)) }
    }

    /// `text` cut to fit `width - 1` columns, so that it never wraps (the redraw counts lines).
    static func fitted(_ text: ConsoleText, width: Int) -> ConsoleText {
        var room = max(width - 1, 10)
        var fragments: [ConsoleTextFragment] = []
        for fragment in text.fragments {
            guard room > 0 else { break }
            var fragment = fragment
            if fragment.string.count > room { fragment.string = String(fragment.string.prefix(room - 1)) + "…" }
            room -= fragment.string.count
            fragments.append(fragment)
        }
        return ConsoleText(fragments: fragments)
    }
}
