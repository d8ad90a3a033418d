#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The tus 1.0.0 request headers Herald reads (tus.io/protocols/resumable-upload), parsed strictly: what a client
/// sends wrong is refused (400), never guessed at.
public enum TusHeaders {
    /// The protocol version Herald speaks, in `Tus-Resumable` and `Tus-Version`.
    public static let version = "1.0.0"

    /// `Upload-Length` or `Upload-Offset`: a non-negative decimal integer (digits only, at most 18 of them), or nil.
    public static func integer(_ text: String) -> Int64? {
        let bytes = text.utf8
        guard !bytes.isEmpty, bytes.count <= 18, bytes.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else {
            return nil
        }
        return Int64(text)
    }

    /// Why an `Upload-Metadata` value is refused.
    public enum MetadataProblem: Error, Equatable {
        case emptyKey
        case invalidKey(String)
        case duplicateKey(String)
        case invalidValue(key: String)
    }

    /// `Upload-Metadata`: comma-separated pairs of a key and its base64 value (the value may be left out, then it is
    /// empty). Keys are non-empty ASCII without spaces or commas and are unique; values are decoded to UTF-8 text.
    public static func metadata(_ text: String) throws(MetadataProblem) -> [String: String] {
        var pairs: [String: String] = [:]
        if text.allSatisfy({ $0 == " " }) { return pairs }
        for pair in text.split(separator: ",", omittingEmptySubsequences: false) {
            let parts = pair.trimmingSpaces.split(separator: " ", omittingEmptySubsequences: true)
            guard let key = parts.first.map(String.init) else { throw .emptyKey }
            guard parts.count <= 2, key.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else { throw .invalidKey(key) }
            var value = ""
            if parts.count == 2 {
                guard let data = Data(base64Encoded: String(parts[1])), let text = String(validating: data, as: UTF8.self) else {
                    throw .invalidValue(key: key)
                }
                value = text
            }
            guard pairs.updateValue(value, forKey: key) == nil else { throw .duplicateKey(key) }
        }
        return pairs
    }

    /// `Upload-Metadata` of `pairs`, in their order: what ``metadata(_:)`` reads back as them (keys as it takes them).
    public static func metadataText(_ pairs: [(key: String, value: String)]) -> String {
        pairs.map { $0.value.isEmpty ? $0.key : "\($0.key) \(Data($0.value.utf8).base64EncodedString())" }.joined(separator: ",")
    }

    /// A checksum algorithm of the `checksum` extension.
    public enum ChecksumAlgorithm: String, Sendable, CaseIterable {
        case sha1, sha256

        /// The digest's length in bytes.
        public var digestLength: Int { self == .sha1 ? 20 : 32 }
    }

    /// Why an `Upload-Checksum` value is refused.
    public enum ChecksumProblem: Error, Equatable {
        case malformed
        case unsupportedAlgorithm(String)
    }

    /// `Upload-Checksum`: an algorithm's name, a space, and the body's digest in base64.
    public static func checksum(_ text: String) throws(ChecksumProblem) -> (algorithm: ChecksumAlgorithm, digest: [UInt8]) {
        let parts = text.split(separator: " ", omittingEmptySubsequences: false)
        guard parts.count == 2 else { throw .malformed }
        guard let algorithm = ChecksumAlgorithm(rawValue: String(parts[0])) else { throw .unsupportedAlgorithm(String(parts[0])) }
        guard let digest = Data(base64Encoded: String(parts[1])), digest.count == algorithm.digestLength else { throw .malformed }
        return (algorithm, Array(digest))
    }
}

extension Substring {
    /// Without the spaces at either end.
    fileprivate var trimmingSpaces: Substring {
        var text = self
        while text.first == " " { text.removeFirst() }
        while text.last == " " { text.removeLast() }
        return text
    }
}
