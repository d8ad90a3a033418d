/// A value with one JSON form, written by ``JSONWriter`` with its members in the order `openapi.yaml` documents them.
///
/// `JSONEncoder` on Linux writes keys in no fixed order, and costs tens of µs for a job; these writers give every answer
/// one stable order. An object's members are its ``JSONMember`` list: the writer walks it, and the decoder (where
/// Herald reads the object back, in its client) reads by it.
public protocol JSONWritable {
    /// Writes the value where `writer` stands: the whole text, a member's value or an array's element.
    func write(to writer: inout JSONWriter)
}

/// The members of one API object, in the order `openapi.yaml` documents them (`APIObjectTests` checks the two agree):
/// the one list its JSON is written from and decoded by, so a member added to an object cannot be left out of either.
public protocol JSONMember: CodingKey, CaseIterable, RawRepresentable, Sendable where RawValue == String {
    /// Every member's key as written (`"name":`), in ``allCases`` order, made once: the objects written on hot paths
    /// (a status poll writes 45 keys) keep one (`static let keys = JSONKeys(Self.self)`); nil writes each from its name.
    static var keys: JSONKeys? { get }
}

extension JSONMember {
    public static var keys: JSONKeys? { nil }
}

/// The keys of one object's members as written, `"name":` each, in one buffer made once and kept for the process
/// (held by a `static let`, never freed: a plain value, so reading it counts no references).
///
/// `@unchecked Sendable`: its buffers are written only by `init`, then only read.
public struct JSONKeys: @unchecked Sendable {
    /// `"name":` of every member in order; `ends[i]` is where the `i`th ends.
    private let text: UnsafeMutableBufferPointer<UInt8>
    private let ends: UnsafeMutableBufferPointer<Int>

    public init<Member: JSONMember>(_ members: Member.Type) {
        let names = Member.allCases.map { Array($0.rawValue.utf8) }
        text = .allocate(capacity: names.reduce(0) { $0 + $1.count + 3 })
        ends = .allocate(capacity: names.count)
        var end = 0
        for (index, name) in names.enumerated() {
            for byte in [UInt8(ascii: "\"")] + name + [UInt8(ascii: "\""), UInt8(ascii: ":")] {
                text[end] = byte
                end += 1
            }
            ends[index] = end
        }
    }

    /// The `index`th member's key as written.
    func key(_ index: Int) -> UnsafeBufferPointer<UInt8> {
        let start = index == 0 ? 0 : ends[index - 1]
        return UnsafeBufferPointer(rebasing: text[start..<ends[index]])
    }
}

extension JSONWritable {
    /// The value as JSON text.
    public var json: [UInt8] {
        var writer = JSONWriter()
        write(to: &writer)
        return writer.bytes
    }
}

extension JSONWriter {
    /// An object of `Member`'s members in their order (those `including` keeps): each key, then the value `value` writes.
    public mutating func object<Member: JSONMember>(
        _ members: Member.Type, including: (Member) -> Bool = { _ in true }, _ value: (Member, inout JSONWriter) -> Void
    ) {
        beginObject()
        let keys = Member.keys
        for (index, member) in Member.allCases.enumerated() where including(member) {
            if let keys { key(written: keys.key(index)) } else { key(member) }
            value(member, &self)
        }
        endObject()
    }

    /// An array of `elements`, each written as its own JSON.
    public mutating func array(_ elements: [some JSONWritable]) {
        beginArray()
        for element in elements { element.write(to: &self) }
        endArray()
    }

    /// `value`'s JSON, or `null`.
    public mutating func value(_ value: (some JSONWritable)?) {
        if let value { value.write(to: &self) } else { null() }
    }
}
