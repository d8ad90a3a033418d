import ArgumentParser
import HeraldClient
import HeraldCore

/// `herald jobs list|show|watch|cancel`.
struct Jobs: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List, show, follow and cancel publish jobs.",
        subcommands: [List.self, Show.self, Watch.self, Cancel.self]
    )

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "The jobs of the key's tenant, newest first.")
        @OptionGroup var client: ClientOptions
        @OptionGroup var page: PageOptions

        func validate() throws {
            if let state = page.state, JobState(rawValue: state) == nil {
                throw ValidationError("--state is one of \(JobState.allCases.map(\.rawValue).joined(separator: ", ")).")
            }
        }

        func run() async throws {
            try await withAPIClient(client) { api in
                let answer = try await api.jobs(state: page.state, limit: page.limit, cursor: page.cursor)
                guard client.output != .json else {
                    printLine(answer.json)
                    return ExitStatus.succeeded
                }
                Table.print(
                    header: ["JOB", "STATE", "PROGRESS", "CREATED", "POST"],
                    rows: answer.value.data.map { job in
                        [
                            job.id.rawValue, StateText.job(job.state), "\(job.progress.uploaded)/\(job.progress.total) \(job.progress.percent)%",
                            "\(job.createdAt)", job.postID.rawValue,
                        ]
                    })
                if let next = answer.value.nextCursor { printLine("more: --cursor \(next.encoded)") }
                return ExitStatus.succeeded
            }
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "One job: its state, progress and uploads.")
        @OptionGroup var client: ClientOptions
        @Argument(help: "The job's id.") var id: String

        func run() async throws {
            try await withAPIClient(client) { api in
                let answer = try await api.job(id: id)
                guard client.output != .json else {
                    printLine(answer.json)
                    return ExitStatus.succeeded
                }
                describe(answer.value)
                return ExitStatus.succeeded
            }
        }
    }

    struct Watch: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Follow a job's events until it is done.",
            discussion: """
                Ctrl-C cancels the job and waits for its end; a second Ctrl-C leaves at once.
                Exit status: 0 succeeded, 1 failed, 3 cancelled, 2 the request failed, 130 left.
                """
        )
        @OptionGroup var client: ClientOptions
        @Argument(help: "The job's id.") var id: String

        func run() async throws {
            try await withAPIClient(client) { api in
                let display = makeDisplay(client.output)
                let session = Session()
                await session.follow(jobID: id)
                return try await handlingInterrupts(session: session, api: api, display: display) { [id] in
                    let job = try await api.follow(jobID: id) { display.job($0) }
                    display.end()
                    return exitStatus(of: job.state.rawValue)
                }
            }
        }
    }

    struct Cancel: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Cancel a job: at once when queued or scheduled; a running one stops its uploads (watch it to see the end).")
        @OptionGroup var client: ClientOptions
        @Argument(help: "The job's id.") var id: String

        func run() async throws {
            try await withAPIClient(client) { api in
                let answer = try await api.cancel(jobID: id)
                if client.output == .json {
                    printLine(answer.json)
                } else {
                    let job = answer.value
                    printLine(job.done ? "job \(job.id) \(StateText.job(job.state))" : "job \(job.id) \(StateText.job(job.state)), cancel requested")
                }
                return ExitStatus.succeeded
            }
        }
    }
}

/// `--state`, `--limit`, `--cursor` of the list commands.
struct PageOptions: ParsableArguments {
    @Option(help: "Only this state.") var state: String?
    @Option(help: "At most this many (1 to 100). [default 20]") var limit: Int?
    @Option(help: "Where the previous page said to go on.") var cursor: String?
}

/// A job as lines of text: state, progress, each upload, the error.
func describe(_ job: Job) {
    printLine("job \(job.id) \(StateText.job(job.state))\(job.cancelRequested && !job.done ? " (cancel requested)" : "")")
    printLine("  post      \(job.postID)")
    printLine("  priority  \(job.priority.rawValue), attempt \(job.attempt), run at \(job.runAt)")
    printLine("  progress  \(StateText.progress(job))")
    for upload in job.uploads {
        let size = HumanReadable.bytes(upload.size)
        printLine(
            "  upload    \(upload.mediaID) \(upload.state.rawValue) \(HumanReadable.bytes(upload.bytesSent)) of \(size)"
                + (upload.error.map { ": \($0)" } ?? ""))
    }
    if let error = job.error { printLine("  error     \(error.code.rawValue): \(error.message)") }
    printLine("  created   \(job.createdAt)" + (job.finishedAt.map { ", finished \($0)" } ?? ""))
}

/// Columns aligned with two spaces between them; colour codes do not count towards a cell's width.
enum Table {
    static func print(header: [String], rows: [[String]]) {
        let all = [header] + rows
        let widths = header.indices.map { column in all.map { visibleWidth($0[column]) }.max() ?? 0 }
        for row in all {
            var line = ""
            for (column, cell) in row.enumerated() {
                let last = column == row.count - 1
                line += cell + (last ? "" : String(repeating: " ", count: widths[column] - visibleWidth(cell) + 2))
            }
            printLine(line)
        }
    }

    private static func visibleWidth(_ text: String) -> Int {
        var width = 0
        var escaping = false
        for scalar in text.unicodeScalars {
            if escaping {
                if scalar == "m" { escaping = false }
            } else if scalar == "\u{1B}" {
                escaping = true
            } else {
                width += 1
            }
        }
        return width
    }
}
