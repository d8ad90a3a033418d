import JSONText
import Platform

/// Writes JSON text straight into bytes, for the hottest responses: `JSONEncoder` costs tens of µs for a job.
///
/// It writes what it is told, in order: callers write each key once and keep objects balanced. The text goes into one
/// buffer it owns, grown when a value needs more room: an `Array` append per token cost more than the JSON.
public struct JSONWriter: ~Copyable {
    private var start: UnsafeMutablePointer<UInt8>
    private var capacity: Int
    private var count = 0
    /// Whether the next member or element needs a comma before it.
    private var needsComma = false

    public init(capacity: Int = 1024) {
        self.capacity = max(capacity, 64)
        start = Self.allocate(self.capacity)
    }

    deinit { free(start) }

    /// `count` bytes from `malloc`: `UnsafeMutablePointer.allocate` asks for its alignment through `posix_memalign`,
    /// which cost a status poll six times `malloc`'s instructions.
    private static func allocate(_ count: Int) -> UnsafeMutablePointer<UInt8> {
        guard let memory = malloc(count) else { fatalError("out of memory") }
        return memory.assumingMemoryBound(to: UInt8.self)
    }

    /// The text written so far.
    public var bytes: [UInt8] { Array(UnsafeBufferPointer(start: start, count: count)) }

    /// The text written, handed over in the writer's own buffer: no copy (a response body goes to libmicrohttpd as it is).
    public consuming func finish() -> OwnedBytes {
        let text = OwnedBytes(taking: start, count: count)
        discard self
        return text
    }

    public mutating func beginObject() {
        open(UInt8(ascii: "{"))
    }

    public mutating func endObject() {
        close(UInt8(ascii: "}"))
    }

    public mutating func beginArray() {
        open(UInt8(ascii: "["))
    }

    public mutating func endArray() {
        close(UInt8(ascii: "]"))
    }

    /// A member's key; its value comes next.
    public mutating func key(_ key: StaticString) {
        plainKey(UnsafeBufferPointer(start: key.utf8Start, count: key.utf8CodeUnitCount))
    }

    /// An object member's key (its name needs no escaping); its value comes next.
    public mutating func key(_ member: some JSONMember) {
        var name = member.rawValue
        name.withUTF8 { plainKey($0) }
    }

    /// A key as written, `"name":` (``JSONKeys``); its value comes next.
    mutating func key(written: UnsafeBufferPointer<UInt8>) {
        reserve(written.count + 1)
        separate()
        put(written)
        needsComma = false
    }

    /// A member's key that is not known at compile time (a log line's metadata), escaped as any string; its value comes next.
    ///
    /// Named apart from ``key(_:)``: given the same name, a literal key would pick this overload (`String` is the
    /// default literal type) and be checked for escapes at every write.
    public mutating func key(escaping key: String) {
        string(key)
        reserve(1)
        put(UInt8(ascii: ":"))
        needsComma = false
    }

    public mutating func string(_ value: String) {
        var value = value
        value.withUTF8 { string(utf8: $0) }
    }

    /// A string of UTF-8 bytes (a column read in place), escaped where needed.
    public mutating func string(utf8: UnsafeBufferPointer<UInt8>) {
        // Ids, states and timestamps need no escaping: one copy of the whole string.
        let plain = Self.needsNoEscape(utf8)
        reserve((plain ? 1 : 6) * utf8.count + 3)
        separate()
        put(UInt8(ascii: "\""))
        if plain {
            put(utf8)
        } else {
            for byte in utf8 { escape(byte) }
        }
        put(UInt8(ascii: "\""))
        needsComma = true
    }

    public mutating func string(_ value: String?) {
        if let value { string(value) } else { null() }
    }

    /// An id, as its text.
    public mutating func string<Entity>(_ id: ID<Entity>) {
        string(id.rawValue)
    }

    /// An id, or `null`.
    public mutating func string<Entity>(_ id: ID<Entity>?) {
        string(id?.rawValue)
    }

    /// A timestamp in its fixed-width RFC 3339 form, as a string.
    public mutating func timestamp(_ value: Timestamp) {
        reserve(Timestamp.rfc3339Width + 3)
        separate()
        put(UInt8(ascii: "\""))
        value.writeRFC3339(to: UnsafeMutableBufferPointer(start: start + count, count: Timestamp.rfc3339Width))
        count += Timestamp.rfc3339Width
        put(UInt8(ascii: "\""))
        needsComma = true
    }

    /// A timestamp's text already in the fixed-width form (``TimestampText``), as a string.
    mutating func timestamp(text: UnsafeBufferPointer<UInt8>) {
        reserve(text.count + 3)
        separate()
        put(UInt8(ascii: "\""))
        put(text)
        put(UInt8(ascii: "\""))
        needsComma = true
    }

    public mutating func timestamp(_ value: Timestamp?) {
        if let value { timestamp(value) } else { null() }
    }

    public mutating func int(_ value: Int) {
        reserve(DecimalDigits.maximumCount + 1)
        separate()
        // Most of an answer's numbers (attempts, counts) are one digit.
        if (0..<10).contains(value) {
            put(UInt8(truncatingIfNeeded: value) &+ UInt8(ascii: "0"))
            needsComma = true
            return
        }
        count += DecimalDigits.write(value, to: start + count)
        needsComma = true
    }

    public mutating func bool(_ value: Bool) {
        literal(value ? "true" : "false")
    }

    public mutating func null() {
        literal("null")
    }

    private mutating func plainKey(_ name: UnsafeBufferPointer<UInt8>) {
        reserve(name.count + 4)
        separate()
        put(UInt8(ascii: "\""))
        put(name)
        put(UInt8(ascii: "\""))
        put(UInt8(ascii: ":"))
        needsComma = false
    }

    private mutating func literal(_ text: StaticString) {
        reserve(text.utf8CodeUnitCount + 1)
        separate()
        put(UnsafeBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
        needsComma = true
    }

    private mutating func open(_ bracket: UInt8) {
        reserve(2)
        separate()
        put(bracket)
        needsComma = false
    }

    private mutating func close(_ bracket: UInt8) {
        reserve(1)
        put(bracket)
        needsComma = true
    }

    private mutating func escape(_ byte: UInt8) {
        JSONEscaping.escape(byte) { put($0) }
    }

    /// Whether `utf8` holds no byte JSON escapes (a control character, `"` or `\`), checked eight bytes at a time.
    static func needsNoEscape(_ utf8: UnsafeBufferPointer<UInt8>) -> Bool {
        guard let base = UnsafeRawPointer(utf8.baseAddress) else { return true }
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highs: UInt64 = 0x8080_8080_8080_8080
        var index = 0
        while index + 8 <= utf8.count {
            let word = base.loadUnaligned(fromByteOffset: index, as: UInt64.self)
            // The word tests of "Bit Twiddling Hacks": nonzero exactly when some byte is below 0x20, or is 0.
            // `~word` leaves bytes of 0x80 and above (UTF-8 beyond ASCII) out of every test.
            let control = (word &- ones &* 0x20) & ~word & highs
            let quote = ((word ^ (ones &* 0x22)) &- ones) & ~(word ^ (ones &* 0x22)) & highs
            let backslash = ((word ^ (ones &* 0x5C)) &- ones) & ~(word ^ (ones &* 0x5C)) & highs
            if control | quote | backslash != 0 { return false }
            index += 8
        }
        while index < utf8.count {
            let byte = utf8[index]
            if byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") { return false }
            index += 1
        }
        return true
    }

    /// A comma if one is due; callers have reserved room for it.
    private mutating func separate() {
        if needsComma { put(UInt8(ascii: ",")) }
    }

    /// Room for `more` bytes after the text.
    private mutating func reserve(_ more: Int) {
        if count + more > capacity { grow(toHold: more) }
    }

    /// A larger buffer: out of line, so that every write's room check stays a comparison.
    @inline(never)
    private mutating func grow(toHold more: Int) {
        let grown = max(capacity * 2, count + more)
        let buffer = Self.allocate(grown)
        buffer.update(from: start, count: count)
        free(start)
        start = buffer
        capacity = grown
    }

    private mutating func put(_ byte: UInt8) {
        start[count] = byte
        count += 1
    }

    private mutating func put(_ bytes: UnsafeBufferPointer<UInt8>) {
        guard let base = bytes.baseAddress else { return }
        let target = UnsafeMutableRawPointer(start + count)
        let source = UnsafeRawPointer(base)
        // Keys, ids and timestamps are 8 to 36 bytes: words copied in line (the last one overlapping), not a call to
        // memcpy for each. Callers reserved the room.
        if bytes.count >= 8, bytes.count <= 32 {
            var offset = 0
            while offset + 8 < bytes.count {
                target.storeBytes(of: source.loadUnaligned(fromByteOffset: offset, as: UInt64.self), toByteOffset: offset, as: UInt64.self)
                offset += 8
            }
            let last = bytes.count - 8
            target.storeBytes(of: source.loadUnaligned(fromByteOffset: last, as: UInt64.self), toByteOffset: last, as: UInt64.self)
        } else {
            (start + count).update(from: base, count: bytes.count)
        }
        count += bytes.count
    }
}
