/// A stored row holds a value this version of Herald cannot read (an unknown state, a malformed timestamp), or a write
/// found the rows in a shape the schema allows but Herald never makes. Either is a bug: a 500. Every backend's.
package struct UnreadableRow: Error, CustomStringConvertible {
    package let table: String
    package let id: String
    package let reason: String

    package init(table: String, id: String, reason: String = "holds a value this version cannot read") {
        self.table = table
        self.id = id
        self.reason = reason
    }

    package var description: String { "UnreadableRow: \(table) \(id) \(reason)" }
}
