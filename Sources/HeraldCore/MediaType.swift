/// One of the content types Herald accepts for media; its raw value is the canonical lowercase type.
public enum MediaType: String, Codable, Sendable, CaseIterable {
    /// `image/jpeg`.
    case jpeg = "image/jpeg"
    /// `image/png`.
    case png = "image/png"
    /// `image/gif`.
    case gif = "image/gif"
    /// `image/webp`.
    case webp = "image/webp"
    /// `video/mp4`.
    case mp4 = "video/mp4"
    /// `video/quicktime`.
    case quickTime = "video/quicktime"
    /// `video/webm`.
    case webm = "video/webm"

    /// The type named by a `Content-Type` value, ignoring case, parameters and surrounding blanks; nil when not accepted.
    ///
    /// `Image/PNG; charset=x` is ``png``: media types are case-insensitive (RFC 9110 section 8.3.1), and
    /// no parameter changes what the bytes are.
    public init?(contentType: String) {
        var essence = contentType[...]
        if let semicolon = essence.firstIndex(of: ";") { essence = essence[..<semicolon] }
        // Optional whitespace (RFC 9110 section 5.6.3) is spaces and tabs.
        while let first = essence.first, first == " " || first == "\t" { essence = essence.dropFirst() }
        while let last = essence.last, last == " " || last == "\t" { essence = essence.dropLast() }
        self.init(rawValue: essence.lowercased())
    }

    /// How many leading bytes ``matches(signature:)`` needs to recognise any of the types.
    public static let signatureLength = 12

    /// The file name extension used for the stored object, without the dot.
    public var fileExtension: String {
        switch self {
        case .jpeg: "jpg"
        case .png: "png"
        case .gif: "gif"
        case .webp: "webp"
        case .mp4: "mp4"
        case .quickTime: "mov"
        case .webm: "webm"
        }
    }

    /// Whether the file's first bytes (its "magic bytes") are this type's signature.
    ///
    /// Pass at least ``signatureLength`` bytes when the file has that many; a shorter prefix simply
    /// fails for the types whose signature is longer. Extra bytes are ignored.
    public func matches(signature prefix: some Collection<UInt8>) -> Bool {
        let bytes = Array(prefix.prefix(Self.signatureLength))
        func has(_ expected: [UInt8], at offset: Int) -> Bool {
            bytes.count >= offset + expected.count && bytes[offset..<offset + expected.count].elementsEqual(expected)
        }

        switch self {
        case .jpeg:
            return has([0xFF, 0xD8, 0xFF], at: 0)
        case .png:
            return has([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A], at: 0)
        case .gif:
            return has(Array("GIF87a".utf8), at: 0) || has(Array("GIF89a".utf8), at: 0)
        case .webp:
            return has(Array("RIFF".utf8), at: 0) && has(Array("WEBP".utf8), at: 8)
        case .mp4:
            // An ISO base media file with a brand other than QuickTime's; the box size at 0 varies.
            return has(Self.fileType, at: 4) && bytes.count >= 12 && !has(Self.quickTimeBrand, at: 8)
        case .quickTime:
            // Newer QuickTime files have an `ftyp` box with brand `qt  `; older ones start with a bare atom.
            if has(Self.fileType, at: 4) { return has(Self.quickTimeBrand, at: 8) }
            return Self.quickTimeAtoms.contains { has($0, at: 4) }
        case .webm:
            // WebM is Matroska, an EBML document.
            return has([0x1A, 0x45, 0xDF, 0xA3], at: 0)
        }
    }

    private static let fileType = Array("ftyp".utf8)
    private static let quickTimeBrand = Array("qt  ".utf8)
    private static let quickTimeAtoms = ["moov", "mdat", "wide", "free"].map { Array($0.utf8) }
}
