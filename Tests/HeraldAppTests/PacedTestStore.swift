import HeraldTestSupport
import Publishing

extension TestStore {
    /// An object this size or larger hangs in ``paced(_:)``'s store.
    static let hangingSize = 1 << 20

    /// A store paced like a slow network, for the client tests (the CLI, the dashboard in a browser), by what is uploaded:
    ///
    /// - an object under 1 MiB takes about `duration`, taking its bytes in eight steps (progress events to watch);
    /// - an object of 1 MiB or more takes half its bytes, then waits until its job is cancelled (a job to cancel);
    /// - a GIF is refused for good (a job that fails).
    static func paced(_ duration: Duration = .milliseconds(800)) -> TestStore {
        let store = TestStore(default: .paced(over: duration))
        store.behave(.halfThenHang) { $0.size >= hangingSize }
        store.behave(.failPermanently) { $0.contentType == "image/gif" }
        return store
    }
}
