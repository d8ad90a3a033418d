import Foundation
import Platform

/// The exclusive `flock` on `<data-dir>/herald.lock` that makes one `herald serve` the only one on its directory.
///
/// The lock lives as long as this object (the descriptor stays open); the kernel drops it when the process dies,
/// however it dies, so a crash never leaves a stale lock. The file holds the holder's PID, for the message a
/// second server prints.
public final class DataDirectoryLock: Sendable {
    /// The lock file's name inside the data directory.
    public static let fileName = "herald.lock"

    private let descriptor: Int32

    /// Takes the lock on `directory` (which must exist), or throws ``DataDirectoryLockError/held(pid:path:)``.
    public init(directory: String) throws(DataDirectoryLockError) {
        let path = directory + "/" + Self.fileName
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw .cannotOpen(path: path, errno: errno) }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            let code = errno
            var buffer = [UInt8](repeating: 0, count: 32)
            let count = pread(descriptor, &buffer, buffer.count, 0)
            close(descriptor)
            guard code == EWOULDBLOCK else { throw .cannotOpen(path: path, errno: code) }
            let text = String(decoding: buffer.prefix(max(count, 0)), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            throw .held(pid: Int32(text), path: path)
        }
        // Ours now: the PID replaces whatever an earlier holder wrote.
        let pid = Array("\(getpid())\n".utf8)
        _ = ftruncate(descriptor, 0)
        _ = pwrite(descriptor, pid, pid.count, 0)
        self.descriptor = descriptor
    }

    deinit {
        close(descriptor)
    }
}

/// Why the data directory's lock was not taken.
public enum DataDirectoryLockError: Error, CustomStringConvertible {
    /// Another process holds it (its PID as it wrote it, if readable).
    case held(pid: Int32?, path: String)
    case cannotOpen(path: String, errno: Int32)

    public var description: String {
        switch self {
        case .held(let pid, let path):
            "another herald (pid \(pid.map(String.init) ?? "unknown")) holds \(path): one server per data directory"
        case .cannotOpen(let path, let code):
            "cannot lock \(path): \(String(cString: strerror(code)))"
        }
    }
}
