import ArgumentParser
import HeraldClient
import HeraldCore

/// `herald posts list|show`.
struct Posts: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "List and show posts.", subcommands: [List.self, Show.self])

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "The posts of the key's tenant, newest first.")
        @OptionGroup var client: ClientOptions
        @OptionGroup var page: PageOptions

        func validate() throws {
            if let state = page.state, PostState(rawValue: state) == nil {
                throw ValidationError("--state is one of \(PostState.allCases.map(\.rawValue).joined(separator: ", ")).")
            }
        }

        func run() async throws {
            try await withAPIClient(client) { api in
                let answer = try await api.posts(state: page.state, limit: page.limit, cursor: page.cursor)
                guard client.output != .json else {
                    printLine(answer.json)
                    return ExitStatus.succeeded
                }
                Table.print(
                    header: ["POST", "STATE", "MEDIA", "CREATED", "TEXT"],
                    rows: answer.value.data.map { post in
                        [post.id.rawValue, post.state.rawValue, "\(post.media.count)", "\(post.createdAt)", Self.excerpt(post.text)]
                    })
                if let next = answer.value.nextCursor { printLine("more: --cursor \(next.encoded)") }
                return ExitStatus.succeeded
            }
        }

        /// The text's first line, at most 40 characters.
        static func excerpt(_ text: String) -> String {
            let line = text.split(whereSeparator: \.isNewline).first.map(String.init) ?? ""
            return line.count > 40 ? String(line.prefix(39)) + "…" : line
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "One post: its state, text, media and job.")
        @OptionGroup var client: ClientOptions
        @Argument(help: "The post's id.") var id: String

        func run() async throws {
            try await withAPIClient(client) { api in
                let answer = try await api.post(id: id)
                guard client.output != .json else {
                    printLine(answer.json)
                    return ExitStatus.succeeded
                }
                let post = answer.value
                printLine("post \(post.id) \(post.state.rawValue)")
                printLine("  job        \(post.jobID), priority \(post.priority.rawValue)")
                if let scheduledAt = post.scheduledAt { printLine("  scheduled  \(scheduledAt)") }
                if let publishedAt = post.publishedAt { printLine("  published  \(publishedAt)") }
                for media in post.media {
                    printLine(
                        "  media      \(media.id) \(media.contentType.rawValue) \(HumanReadable.bytes(Int(media.size))) \(media.url ?? media.state.rawValue)"
                    )
                }
                printLine("  text       " + post.text.split(separator: "\n", omittingEmptySubsequences: false).joined(separator: "\n             "))
                return ExitStatus.succeeded
            }
        }
    }
}
