import Platform

/// Errors thrown by a storage backend itself (a database's own failures arrive as its driver's errors).
///
/// A struct with a private code enum rather than an enum, so that new cases do not break
/// callers that switch over it (swift-service-lifecycle's `ServiceGroupError` does the same).
public struct StorageError: Error, Hashable, Sendable {
    /// What went wrong, without the details.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum _Code: Hashable, Sendable {
            case cannotCreateDirectory
            case backupTargetExists
        }

        private var code: _Code

        private init(code: _Code) {
            self.code = code
        }

        /// A short description of the code.
        public var description: String {
            switch self.code {
            case .cannotCreateDirectory:
                return "The data directory cannot be created."
            case .backupTargetExists:
                return "The backup's file exists already."
            }
        }

        /// The data directory (or one of its parents) could not be created, or is not a directory.
        public static let cannotCreateDirectory = Code(code: .cannotCreateDirectory)
        /// A backup is never written over an existing file.
        public static let backupTargetExists = Code(code: .backupTargetExists)
    }

    /// A class, so the error stays one pointer wide however much context it carries.
    private final class Backing: Hashable, Sendable {
        let errorCode: Code
        let message: String
        let file: String
        let line: Int

        init(errorCode: Code, message: String, file: String, line: Int) {
            self.errorCode = errorCode
            self.message = message
            self.file = file
            self.line = line
        }

        static func == (lhs: Backing, rhs: Backing) -> Bool {
            lhs.errorCode == rhs.errorCode && lhs.message == rhs.message
        }

        func hash(into hasher: inout Hasher) {
            hasher.combine(self.errorCode)
            hasher.combine(self.message)
        }
    }

    private let backing: Backing

    /// The kind of failure; compare it with the static members of ``Code``.
    public var errorCode: Code { self.backing.errorCode }

    /// The details: the path involved and the operating system's explanation.
    public var message: String { self.backing.message }

    private init(_ backing: Backing) {
        self.backing = backing
    }

    /// The directory at `path` could not be created: `errno` is the C error code, reported with its message.
    public static func cannotCreateDirectory(
        path: String,
        errno code: Int32,
        file: String = #fileID,
        line: Int = #line
    ) -> Self {
        Self(
            Backing(
                errorCode: .cannotCreateDirectory,
                message: "\(path): \(String(cString: strerror(code))) (errno \(code))",
                file: file,
                line: line
            )
        )
    }
}

extension StorageError {
    /// `herald backup` was given a file that exists: it is not overwritten.
    public static func backupTargetExists(path: String, file: String = #fileID, line: Int = #line) -> Self {
        Self(Backing(errorCode: .backupTargetExists, message: "\(path) exists; a backup writes a new file", file: file, line: line))
    }
}

extension StorageError: CustomStringConvertible {
    /// The code, the details and where the error was made.
    public var description: String {
        "StorageError: \(self.backing.errorCode) \(self.backing.message) (\(self.backing.file):\(self.backing.line))"
    }
}
