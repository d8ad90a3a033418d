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
public protocol JSONMember: CodingKey, CaseIterable, RawRepresentable, Sendable where RawValue == String {}

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
        for member in Member.allCases where including(member) {
            key(member)
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
