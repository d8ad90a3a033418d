import Publishing

/// A store paced like a slow network, for the client tests (the CLI, the dashboard in a browser), by what is uploaded:
///
/// - an object under 1 MiB takes about `duration`, taking its bytes in eight steps (progress events to watch);
/// - an object of 1 MiB or more takes half its bytes, then waits until its job is cancelled (a job to cancel);
/// - a GIF is refused for good after its first step (a job that fails).
final class PacedStore: MediaStore {
    static let hangingSize = 1 << 20
    let duration: Duration

    init(duration: Duration = .milliseconds(800)) {
        self.duration = duration
    }

    func put(_ object: MediaObject, progress: @escaping BytesTaken) async throws -> String {
        if object.size >= Self.hangingSize {
            progress(object.size / 2)
            try await Task.sleep(for: .seconds(3600))
        }
        for step in 1...8 {
            try await Task.sleep(for: duration / 8)
            if object.contentType == "image/gif" { throw MediaStoreError.permanent("the paced store refuses GIFs") }
            progress(object.size * step / 8)
        }
        return url(for: object.key)
    }

    func delete(key: String) async throws {}
    func url(for key: String) -> String { "paced://\(key)" }
    func exists(key: String) async throws -> Bool { false }
}
