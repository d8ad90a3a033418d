#if canImport(Glibc)
    import Glibc
#endif

/// The fuzzer's bytes, read from the front: a few control bytes first, the payload after.
///
/// Reading past the end yields zeros and empty slices, so every input is a valid one.
public struct FuzzInput {
    private let bytes: [UInt8]
    private var offset = 0

    public init(_ start: UnsafeRawPointer, _ count: Int) {
        bytes = Array(UnsafeRawBufferPointer(start: start, count: count))
    }

    /// The next byte, 0 past the end.
    public mutating func byte() -> UInt8 {
        guard offset < bytes.count else { return 0 }
        defer { offset += 1 }
        return bytes[offset]
    }

    /// The next byte, reduced to `0..<bound`.
    public mutating func int(below bound: Int) -> Int {
        Int(byte()) % bound
    }

    /// The next `count` bytes (fewer at the end).
    public mutating func take(_ count: Int) -> ArraySlice<UInt8> {
        let end = min(bytes.count, offset + max(count, 0))
        defer { offset = end }
        return bytes[offset..<end]
    }

    /// What is left.
    public mutating func rest() -> ArraySlice<UInt8> {
        take(bytes.count - offset)
    }
}

/// Traps with `message` when `condition` is false: a violated property is a finding, and libFuzzer saves the input.
public func check(_ condition: @autoclosure () -> Bool, _ message: @autoclosure () -> String, file: StaticString = #file, line: UInt = #line) {
    if !condition() { fatalError("property violated: \(message())", file: file, line: line) }
}

/// `bytes` as `"\x.."`-escaped ASCII, for messages.
public func shown(_ bytes: some Sequence<UInt8>) -> String {
    var text = "\""
    for byte in bytes {
        switch byte {
        case 0x20...0x7E where byte != UInt8(ascii: "\"") && byte != UInt8(ascii: "\\"): text.unicodeScalars.append(Unicode.Scalar(byte))
        default: text += "\\x" + (byte < 16 ? "0" : "") + String(byte, radix: 16)
        }
    }
    return text + "\""
}

/// Whether to pass over inputs that show a finding already reported (see `Fuzz/Crashes/README.md`), so that a fuzzing
/// run explores past it: `run.sh fuzz` sets `FUZZ_SKIP_KNOWN=1`; a replay leaves it unset, so a saved crash still crashes.
public let skippingKnownFindings = getenv("FUZZ_SKIP_KNOWN").map { String(cString: $0) == "1" } ?? false
