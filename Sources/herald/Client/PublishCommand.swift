import ArgumentParser
import HeraldClient
import HeraldCore

/// `herald publish FILE… --text T`: uploads the files, creates the post, follows its job to the end.
struct Publish: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Upload photos and videos and publish them as a post, following its job until it is done.",
        discussion: """
            Progress bars (bytes, rate, time left) on a terminal; one line per event otherwise; --json prints the \
            server's JSON objects, one a line. Ctrl-C cancels the job and waits for its end; a second Ctrl-C leaves at once.
            Exit status: 0 published, 1 the job failed, 3 cancelled, 2 the request failed or was refused, 130 interrupted.
            """
    )

    @OptionGroup var client: ClientOptions
    @Argument(help: "Photos and videos to attach, in this order.") var files: [String] = []
    @Option(help: "The post's text.") var text = ""
    @Option(help: "When to publish, RFC 3339 (2026-12-01T09:00:00Z); default now.") var schedule: String?
    @Option(help: "low, normal or high. [default normal]") var priority: String?
    @Flag(help: "Exit once the post is created, without following its job.") var detach = false
    @Option(help: "Files above this many bytes go through /v1/uploads (tus), resumed after a dropped connection.")
    var resumableAbove = APIClient.resumableThreshold
    @Option(help: ArgumentHelp("Bytes a PATCH of a resumable upload sends.", visibility: .hidden))
    var chunkSize = APIClient.resumableChunk

    func validate() throws {
        if files.isEmpty && text.isEmpty { throw ValidationError("Give the post some text (--text) or at least one file.") }
        if let priority, Priority(rawValue: priority) == nil { throw ValidationError("--priority is low, normal or high.") }
        if resumableAbove < 0 || chunkSize < 1 { throw ValidationError("--resumable-above is 0 or more bytes, --chunk-size 1 or more.") }
    }

    func run() async throws {
        try await withAPIClient(client) { api in
            let display = makeDisplay(client.output)
            // Refuse before uploading anything: a missing file, an empty one, a type Herald does not take.
            let sizes = try files.map { try APIClient.inspect(path: $0).size }
            let uploads = zip(files, sizes).map { FileToUpload(name: String($0.split(separator: "/").last ?? Substring($0)), size: $1) }
            let session = Session()
            let (files, text, schedule, priority, detach) = (files, text, schedule, priority, detach)
            let resumable = Resumable(above: resumableAbove, chunkSize: chunkSize)
            return try await handlingInterrupts(session: session, api: api, display: display) {
                display.uploading(uploads)
                let mediaIDs = try await Self.upload(files, resumable: resumable, api: api, display: display, session: session)
                let created = try await Self.createPost(
                    api: api, text: text, mediaIDs: mediaIDs, scheduledAt: schedule, priority: priority, session: session)
                // Before the line that says so: a Ctrl-C once "created post" shows must find the job to cancel.
                await session.follow(jobID: created.value.job.id.rawValue)
                display.created(created)
                if detach {
                    display.end()
                    return ExitStatus.succeeded
                }
                let job = try await api.follow(jobID: created.value.job.id.rawValue) { display.job($0) }
                display.end()
                return exitStatus(of: job.state.rawValue)
            }
        }
    }

    /// Uploads `files`, at most four at once; returns their media ids in order. On a failure the others stop and
    /// what was staged is deleted.
    private static func upload(
        _ files: [String], resumable: Resumable, api: APIClient, display: any Display, session: Session
    ) async throws -> [String] {
        var ids = [String?](repeating: nil, count: files.count)
        do {
            try await withThrowingTaskGroup(of: (Int, APIClient.Answer<Media>).self) { group in
                var next = 0
                func start() {
                    let index = next
                    next += 1
                    group.addTask {
                        let progress = { @Sendable (bytes: Int) in display.uploadProgress(index, bytes: bytes) }
                        if try APIClient.inspect(path: files[index]).size > resumable.above {
                            return (index, try await api.uploadResumable(path: files[index], chunkSize: resumable.chunkSize, progress: progress))
                        }
                        return (index, try await api.uploadMedia(path: files[index], progress: progress))
                    }
                }
                while next < min(4, files.count) { start() }
                while let (index, media) = try await group.next() {
                    ids[index] = media.value.id.rawValue
                    await session.staged(media.value.id.rawValue)
                    display.uploaded(index, media)
                    if next < files.count { start() }
                }
            }
        } catch {
            display.end()
            for id in await session.staged { try? await api.deleteMedia(id: id) }
            throw error
        }
        return ids.compactMap { $0 }
    }

    /// When a file goes through `/v1/uploads`, and in what pieces.
    private struct Resumable: Sendable {
        var above: Int
        var chunkSize: Int
    }

    /// Creates the post, asking again (with the same Idempotency-Key, so at most one post) while the server is unreachable.
    private static func createPost(
        api: APIClient, text: String, mediaIDs: [String], scheduledAt: String?, priority: String?, session: Session
    ) async throws -> APIClient.Answer<PostAndJob> {
        let key = Identifier.generate()
        var attempt = 1
        while true {
            do {
                return try await api.createPost(text: text, mediaIDs: mediaIDs, scheduledAt: scheduledAt, priority: priority, idempotencyKey: key)
            } catch ClientError.unreachable(let url, let reason) where attempt < 3 {
                _ = (url, reason)
                attempt += 1
                try await Task.sleep(for: .seconds(attempt))
            } catch {
                for id in await session.staged { try? await api.deleteMedia(id: id) }
                throw error
            }
        }
    }
}
