import HeraldClient
import HeraldCore
import Rainbow
import Synchronization

/// What `herald publish` and `herald jobs watch` tell the person or script running them, as it happens.
protocol Display: Sendable {
    /// The files about to be uploaded, in order.
    func uploading(_ files: [FileToUpload])
    /// File `index` has sent `bytes`.
    func uploadProgress(_ index: Int, bytes: Int)
    /// File `index` is staged as `media`.
    func uploaded(_ index: Int, _ media: APIClient.Answer<Media>)
    /// The post and its job exist.
    func created(_ answer: APIClient.Answer<PostAndJob>)
    /// A snapshot of the job followed (the first, each change, the last).
    func job(_ job: APIClient.Answer<Job>)
    /// Something the person should know (`cancelling …`), never part of `--json`'s output.
    func note(_ text: String)
    /// Stops drawing; nothing is shown after this.
    func end()
}

/// A file named on the command line, with its size.
struct FileToUpload: Sendable {
    var name: String
    var size: Int
}

/// Makes the display for `mode`.
func makeDisplay(_ mode: OutputMode) -> any Display {
    switch mode {
    case .terminal: TerminalDisplay()
    case .lines: LineDisplay()
    case .json: JSONDisplay()
    }
}

/// The words and colours of states, shared by the text displays.
enum StateText {
    /// A job's state coloured as a person reads it: green done, red failed, yellow cancelled (Rainbow honours `NO_COLOR`).
    static func job(_ state: JobState) -> String {
        switch state {
        case .succeeded: state.rawValue.green
        case .failed: state.rawValue.red
        case .cancelled: state.rawValue.yellow
        case .running: state.rawValue.cyan
        case .queued, .scheduled: state.rawValue
        }
    }

    /// `1 of 2 uploaded, 45% (11.1 KiB of 24.6 KiB)`.
    static func progress(_ job: Job) -> String {
        let progress = job.progress
        var text = "\(progress.uploaded) of \(progress.total) uploaded"
        if progress.failed > 0 { text += ", \(progress.failed) failed" }
        text += ", \(progress.percent)%"
        if progress.bytesTotal > 0 { text += " (\(HumanReadable.bytes(progress.bytesUploaded)) of \(HumanReadable.bytes(progress.bytesTotal)))" }
        return text
    }

    /// The line that says how a job ended.
    static func outcome(_ job: Job) -> String {
        switch job.state {
        case .succeeded: "job \(job.id) \(self.job(job.state)): post \(job.postID) published"
        case .failed:
            "job \(job.id) \(self.job(job.state))" + (job.error.map { ": \($0.code.rawValue): \($0.message)" } ?? "")
        default: "job \(job.id) \(self.job(job.state))"
        }
    }
}

/// One plain line per event, for pipes and logs.
final class LineDisplay: Display {
    private let files = Mutex<[FileToUpload]>([])

    func uploading(_ files: [FileToUpload]) { self.files.withLock { $0 = files } }
    func uploadProgress(_ index: Int, bytes: Int) {}
    func uploaded(_ index: Int, _ media: APIClient.Answer<Media>) {
        let name = files.withLock { $0.indices.contains(index) ? $0[index].name : "file \(index + 1)" }
        say("uploaded \(name) (\(HumanReadable.bytes(Int(media.value.size)))) as media \(media.value.id)")
    }
    func created(_ answer: APIClient.Answer<PostAndJob>) {
        say("created post \(answer.value.post.id), job \(answer.value.job.id) \(answer.value.job.state.rawValue)")
    }
    func job(_ job: APIClient.Answer<Job>) {
        let job = job.value
        say(job.done ? StateText.outcome(job) : "job \(job.id) \(StateText.job(job.state)): \(StateText.progress(job))")
    }
    func note(_ text: String) { printError(text) }
    func end() {}

    private func say(_ line: String) { printLine(line) }
}

/// The server's JSON objects, one a line: each medium as uploaded, `{"post", "job"}`, then each job snapshot.
final class JSONDisplay: Display {
    func uploading(_ files: [FileToUpload]) {}
    func uploadProgress(_ index: Int, bytes: Int) {}
    func uploaded(_ index: Int, _ media: APIClient.Answer<Media>) { say(media.json) }
    func created(_ answer: APIClient.Answer<PostAndJob>) { say(answer.json) }
    func job(_ job: APIClient.Answer<Job>) { say(job.json) }
    func note(_ text: String) { printError(text) }
    func end() {}

    private func say(_ json: String) {
        // The server's bytes, on one line (its JSON has no raw line breaks: they are escaped in strings).
        printLine(json.filter { $0 != "\n" && $0 != "\r" })
    }
}
