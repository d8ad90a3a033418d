/// Where published media go: the embedded file store (``FileMediaStore``) or an object store.
///
/// A publish job uploads each of a post's media with ``put(_:progress:)``; when the job fails or is
/// cancelled it removes what it had uploaded with ``delete(key:)``.
///
/// Every implementation must honour task cancellation promptly: a cancelled ``put(_:)`` aborts its
/// transfer (closes the connection, stops the file copy) instead of finishing it, throws
/// `CancellationError`, and leaves no partial object behind. Object keys are deterministic per
/// media (``MediaObject/key(mediaID:fileExtension:)``), so a re-run of the same upload overwrites the
/// same object: uploads are idempotent.
///
/// Failures other than cancellation are thrown as ``MediaStoreError``; its
/// ``MediaStoreError/isTransient`` tells a retry loop whether trying again can help.
public protocol MediaStore: Sendable {
    /// Uploads the staged file of `object` under `object.key`, replacing any object already stored
    /// there, and returns the object's URL (``url(for:)``).
    ///
    /// The object becomes visible only once it is complete: a failed or cancelled call leaves
    /// nothing behind (not even a partial object). `progress` is told how many of the bytes the store
    /// has taken so far, as it takes them (a count that grows, up to `object.size`).
    func put(_ object: MediaObject, progress: @escaping BytesTaken) async throws -> String

    /// Writes `chunks` as the object under `key` and returns how many bytes it holds: how accepted media are staged in a
    /// store that every replica reads (under `staging/`).
    ///
    /// Visible only once complete. An error thrown by `chunks` (a body refused part way), a failure or a cancellation
    /// leaves nothing behind (S3: the multipart upload is aborted); an error of `chunks` is rethrown as it came.
    func write<Chunks: AsyncSequence>(_ chunks: Chunks, key: String, contentType: String) async throws -> Int
    where Chunks.Element == [UInt8]

    /// Stores the object staged in this store under `stagedKey` (by ``write(_:key:contentType:)``) as `object.key`,
    /// without its bytes passing through Herald (S3: a server-side copy; the file store: a link), and returns its URL.
    ///
    /// The same promises as ``put(_:progress:)``: complete or nothing, cancellable, idempotent; `progress` is told
    /// `object.size` once done. A missing staged object is ``MediaStoreError/stagedFileMissing(_:file:line:)``.
    func copy(_ object: MediaObject, fromStaged stagedKey: String, progress: @escaping BytesTaken) async throws -> String

    /// The objects whose keys start with `prefix`, each with when it was written (the staging sweep's listing).
    func list(prefix: String) async throws -> [StoredEntry]

    /// Removes the object stored under `key`. Deleting a key that holds no object succeeds.
    ///
    /// This is the clean-up step of a failed or cancelled job, so it is often called from a task
    /// that is already cancelled: implementations should complete it anyway (``FileMediaStore``
    /// does) rather than throw `CancellationError`.
    func delete(key: String) async throws

    /// Removes the objects stored under `keys`, with the promises of ``delete(key:)``; throws the first failure once
    /// every key has been tried. (S3: one `DeleteObjects` request a thousand keys; other stores, one key at a time.)
    func delete(keys: [String]) async throws

    /// The URL under which the object stored under `key` is (or would be) published.
    func url(for key: String) -> String

    /// Whether an object is stored under `key`: the store side of a consistency check against the rows.
    func exists(key: String) async throws -> Bool

    /// Why the store cannot take uploads now, in words (for `/readyz` and the log); `nil` when it can.
    var availabilityProblem: String? { get }
}

/// Told how many bytes of an upload a store has taken so far; called from the uploading task, so it must be quick.
public typealias BytesTaken = @Sendable (_ bytes: Int) -> Void

extension MediaStore {
    /// A store that has nothing to check is always available.
    public var availabilityProblem: String? { nil }

    /// Uploads `object` without reporting its bytes.
    public func put(_ object: MediaObject) async throws -> String {
        try await put(object, progress: { _ in })
    }

    public func delete(keys: [String]) async throws {
        var failure: (any Error)?
        for key in keys {
            do {
                try await delete(key: key)
            } catch {
                failure = failure ?? error
            }
        }
        if let failure { throw failure }
    }
}

/// An object found by ``MediaStore/list(prefix:)``.
public struct StoredEntry: Sendable, Hashable {
    public var key: String
    /// When it was written, in seconds since 1970.
    public var modified: Double

    public init(key: String, modified: Double) {
        self.key = key
        self.modified = modified
    }
}

/// One media file to upload: where it is staged and what it must be.
public struct MediaObject: Sendable, Hashable {
    /// The object's key in the store, `media/<mediaID>.<ext>` (see ``key(mediaID:fileExtension:)``).
    public var key: String
    /// The absolute path of the staged file whose bytes are uploaded.
    public var stagedFile: String
    /// The staged file's size in bytes, as recorded at ingest. A store checks it.
    public var size: Int
    /// The SHA-256 of the bytes in lowercase hex, computed at ingest.
    public var sha256: String
    /// The media type, such as `image/jpeg`.
    public var contentType: String

    public init(key: String, stagedFile: String, size: Int, sha256: String, contentType: String) {
        self.key = key
        self.stagedFile = stagedFile
        self.size = size
        self.sha256 = sha256
        self.contentType = contentType
    }

    /// A media object whose key is derived from the media's id and file extension.
    public init(
        mediaID: String,
        fileExtension: String,
        stagedFile: String,
        size: Int,
        sha256: String,
        contentType: String
    ) {
        self.init(
            key: Self.key(mediaID: mediaID, fileExtension: fileExtension),
            stagedFile: stagedFile,
            size: size,
            sha256: sha256,
            contentType: contentType
        )
    }

    /// The deterministic key of a media's object: `media/<mediaID>.<ext>`.
    ///
    /// A leading dot on `fileExtension` is ignored (`"jpg"` and `".jpg"` give the same key); an empty
    /// extension gives `media/<mediaID>`.
    public static func key(mediaID: String, fileExtension: String) -> String {
        let ext = fileExtension.drop(while: { $0 == "." })
        return ext.isEmpty ? "media/\(mediaID)" : "media/\(mediaID).\(ext)"
    }
}

/// Why a media store operation failed, and whether trying again can help.
///
/// A struct with a private code enum rather than an enum, so that new cases do not break callers
/// that switch over it (swift-service-lifecycle's `ServiceGroupError` does the same). Cancellation
/// is not one of these: a cancelled operation throws `CancellationError`.
public struct MediaStoreError: Error, Hashable, Sendable {
    /// What went wrong, without the details.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum _Code: Hashable, Sendable {
            case transient
            case permanent
            case stagedFileMissing
            case sizeMismatch
            case checksumMismatch
            case timedOut
            case invalidKey
            case insufficientStorage
        }

        private var code: _Code

        private init(code: _Code) {
            self.code = code
        }

        /// A short description of the code.
        public var description: String {
            switch self.code {
            case .transient:
                return "A transient failure: trying again may succeed."
            case .permanent:
                return "A permanent failure: trying again will fail the same way."
            case .stagedFileMissing:
                return "The staged file to upload does not exist."
            case .sizeMismatch:
                return "The number of bytes is not the media's recorded size."
            case .checksumMismatch:
                return "The bytes' SHA-256 is not the media's recorded one."
            case .timedOut:
                return "The operation did not finish in time."
            case .invalidKey:
                return "The object key is not a valid key."
            case .insufficientStorage:
                return "The store's disk is full."
            }
        }

        /// Whether failures of this kind may succeed when tried again.
        public var isTransient: Bool {
            switch self.code {
            case .transient, .timedOut, .insufficientStorage:
                return true
            case .permanent, .stagedFileMissing, .sizeMismatch, .checksumMismatch, .invalidKey:
                return false
            }
        }

        /// A failure that may go away: a connection error, a 5xx, a 429 or S3's `SlowDown`, a local I/O error.
        public static let transient = Code(code: .transient)
        /// A failure that will not go away by itself: a 4xx other than 429, a permission error.
        public static let permanent = Code(code: .permanent)
        /// The staged file is gone (permanent).
        public static let stagedFileMissing = Code(code: .stagedFileMissing)
        /// The staged file's size is not the recorded one, or changed during the upload (permanent).
        public static let sizeMismatch = Code(code: .sizeMismatch)
        /// The bytes' SHA-256 is not the recorded one (permanent).
        public static let checksumMismatch = Code(code: .checksumMismatch)
        /// The operation took longer than it was allowed to (transient).
        public static let timedOut = Code(code: .timedOut)
        /// The key would leave the store's namespace, or is empty (permanent).
        public static let invalidKey = Code(code: .invalidKey)
        /// The store's filesystem is full or over quota (transient: space can come back).
        public static let insufficientStorage = Code(code: .insufficientStorage)
    }

    /// A class, so the error stays one pointer wide however much context it carries.
    private final class Backing: Hashable, Sendable {
        let errorCode: Code
        let message: String
        let statusCode: Int?
        let file: String
        let line: Int

        init(errorCode: Code, message: String, statusCode: Int?, file: String, line: Int) {
            self.errorCode = errorCode
            self.message = message
            self.statusCode = statusCode
            self.file = file
            self.line = line
        }

        static func == (lhs: Backing, rhs: Backing) -> Bool {
            lhs.errorCode == rhs.errorCode && lhs.message == rhs.message && lhs.statusCode == rhs.statusCode
        }

        func hash(into hasher: inout Hasher) {
            hasher.combine(self.errorCode)
            hasher.combine(self.message)
            hasher.combine(self.statusCode)
        }
    }

    private let backing: Backing

    private init(_ code: Code, _ message: String, statusCode: Int? = nil, file: String, line: Int) {
        self.backing = Backing(errorCode: code, message: message, statusCode: statusCode, file: file, line: line)
    }

    /// The kind of failure; compare it with the static members of ``Code``.
    public var errorCode: Code { self.backing.errorCode }

    /// The cause in words: the path or key involved, the system's or the server's explanation
    /// (for S3, its error code such as `SlowDown` or `AccessDenied`).
    public var message: String { self.backing.message }

    /// The HTTP status of the answer that failed, when the store speaks HTTP and got an answer.
    public var statusCode: Int? { self.backing.statusCode }

    /// Whether trying again may succeed (connection errors, timeouts, 5xx, 429); `false` for
    /// failures that will repeat (4xx, a missing staged file, a size or checksum mismatch).
    public var isTransient: Bool { self.backing.errorCode.isTransient }

    /// A failure that may go away when tried again: a connection error, a 5xx, a 429, an I/O error.
    public static func transient(
        _ message: String,
        statusCode: Int? = nil,
        file: String = #fileID,
        line: Int = #line
    ) -> Self {
        Self(.transient, message, statusCode: statusCode, file: file, line: line)
    }

    /// A failure that will repeat when tried again: a 4xx other than 429, a permission error.
    public static func permanent(
        _ message: String,
        statusCode: Int? = nil,
        file: String = #fileID,
        line: Int = #line
    ) -> Self {
        Self(.permanent, message, statusCode: statusCode, file: file, line: line)
    }

    /// A failed HTTP answer, classified by its status: 429 and 5xx are transient, every other status
    /// (4xx in particular) is permanent. `message` should name the server's error code.
    public static func httpStatus(
        _ statusCode: Int,
        _ message: String,
        file: String = #fileID,
        line: Int = #line
    ) -> Self {
        let transient = statusCode == 429 || (500...599).contains(statusCode)
        return Self(
            transient ? .transient : .permanent,
            "HTTP \(statusCode): \(message)",
            statusCode: statusCode,
            file: file,
            line: line
        )
    }

    /// The staged file at `path` does not exist (permanent).
    public static func stagedFileMissing(_ path: String, file: String = #fileID, line: Int = #line) -> Self {
        Self(.stagedFileMissing, "The staged file '\(path)' does not exist.", file: file, line: line)
    }

    /// The staged bytes for `key` are `actual` bytes long instead of `expected` (permanent).
    public static func sizeMismatch(
        key: String,
        expected: Int,
        actual: Int,
        file: String = #fileID,
        line: Int = #line
    ) -> Self {
        Self(
            .sizeMismatch,
            "The staged file for '\(key)' has \(actual) bytes, expected \(expected).",
            file: file,
            line: line
        )
    }

    /// The SHA-256 of the bytes for `key` is `actual` instead of `expected` (permanent).
    public static func checksumMismatch(
        key: String,
        expected: String,
        actual: String,
        file: String = #fileID,
        line: Int = #line
    ) -> Self {
        Self(
            .checksumMismatch,
            "The SHA-256 of '\(key)' is \(actual), expected \(expected).",
            file: file,
            line: line
        )
    }

    /// The operation did not finish within `timeout` (transient).
    public static func timedOut(after timeout: Duration, file: String = #fileID, line: Int = #line) -> Self {
        Self(.timedOut, "The operation did not finish within \(timeout).", file: file, line: line)
    }

    /// The store's filesystem has no room: `message` says where (transient).
    public static func insufficientStorage(_ message: String, file: String = #fileID, line: Int = #line) -> Self {
        Self(.insufficientStorage, message, file: file, line: line)
    }

    /// `key` is not a valid object key: `reason` says why (permanent).
    public static func invalidKey(_ key: String, reason: String, file: String = #fileID, line: Int = #line) -> Self {
        Self(.invalidKey, "Invalid object key '\(key)': \(reason).", file: file, line: line)
    }
}

extension MediaStoreError: CustomStringConvertible {
    /// The kind, the cause, the status if any, and where the error was made.
    public var description: String {
        let status = self.backing.statusCode.map { " (status \($0))" } ?? ""
        let kind = self.isTransient ? "transient" : "permanent"
        return "MediaStoreError (\(kind)): \(self.backing.message)\(status) (\(self.backing.file):\(self.backing.line))"
    }
}
