public import HeraldStorage
public import Publishing

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// `herald check`: the database against itself (its integrity and foreign-key checks), against the staging
/// folder, and against the media store. Reads only; every problem is one readable line.
public enum ConsistencyCheck {
    /// What was checked and what was found.
    public struct Report: Sendable {
        public var problems: [String]
        public var mediaChecked: Int
        public var stagedFiles: Int

        public var isClean: Bool { problems.isEmpty }
    }

    /// - Parameter staging: where the staged bytes are (the data directory with SQLite, the store with PostgreSQL).
    public static func run(storage: any Storage, store: any MediaStore, staging: StagedBytes) async throws -> Report {
        var problems = try await storage.integrityProblems()
        let holdings = try await storage.media.holdings()
        let files = Set(try await StagingArea(place: staging, store: store).entries().map(\.key))
        var needed = Set<String>()
        for holding in holdings {
            let owner = holding.postID.map { "post \($0)" } ?? "no post"
            if holding.published {
                guard let key = holding.objectKey else {
                    problems.append("media \(holding.mediaID) (\(owner), published) has no stored object key")
                    continue
                }
                if try await !store.exists(key: key) {
                    problems.append("media \(holding.mediaID) (\(owner), published): object \(key) is missing from the store")
                }
            } else {
                needed.insert(holding.stagingPath)
                if !files.contains(holding.stagingPath) {
                    problems.append("media \(holding.mediaID) (\(owner)): staged file \(holding.stagingPath) is missing")
                }
            }
        }
        for file in files.subtracting(needed).sorted() {
            problems.append("stray staging file \(file): no medium that is not yet published names it")
        }
        return Report(problems: problems, mediaChecked: holdings.count, stagedFiles: files.count)
    }
}
