public import HeraldCore
import HeraldStorage
public import NIOCore
public import PostgresNIO

// How Herald's values bind and read on PostgreSQL.

/// A timestamp is `timestamptz`, exactly: the binary format's microseconds since 2000-01-01, from and to whole
/// milliseconds (Foundation's `Date` goes through a `Double`, which can move a millisecond).
extension Timestamp: PostgresNonThrowingEncodable, PostgresDecodable {
    /// 2000-01-01T00:00:00Z, PostgreSQL's epoch, in Unix milliseconds.
    private static let postgresEpoch: Int64 = 946_684_800_000

    public static var psqlType: PostgresDataType { .timestamptz }
    public static var psqlFormat: PostgresFormat { .binary }

    public func encode<JSONEncoder: PostgresJSONEncoder>(into byteBuffer: inout ByteBuffer, context: PostgresEncodingContext<JSONEncoder>) {
        byteBuffer.writeInteger((millisecondsSinceEpoch - Self.postgresEpoch) * 1000)
    }

    public init<JSONDecoder: PostgresJSONDecoder>(
        from buffer: inout ByteBuffer, type: PostgresDataType, format: PostgresFormat, context: PostgresDecodingContext<JSONDecoder>
    ) throws {
        guard type == .timestamptz || type == .timestamp else { throw PostgresDecodingError.Code.typeMismatch }
        guard format == .binary, buffer.readableBytes == 8, let microseconds = buffer.readInteger(as: Int64.self) else {
            throw PostgresDecodingError.Code.failure
        }
        // Floor division: an instant before the epoch rounds down, as everywhere else in Timestamp.
        let (quotient, remainder) = microseconds.quotientAndRemainder(dividingBy: 1000)
        self.init(millisecondsSinceEpoch: (remainder < 0 ? quotient - 1 : quotient) + Self.postgresEpoch)
    }
}

/// An id is its text.
extension ID: PostgresNonThrowingEncodable, PostgresDecodable {
    public static var psqlType: PostgresDataType { .text }
    public static var psqlFormat: PostgresFormat { .binary }

    public func encode<JSONEncoder: PostgresJSONEncoder>(into byteBuffer: inout ByteBuffer, context: PostgresEncodingContext<JSONEncoder>) {
        byteBuffer.writeString(rawValue)
    }

    public init<JSONDecoder: PostgresJSONDecoder>(
        from buffer: inout ByteBuffer, type: PostgresDataType, format: PostgresFormat, context: PostgresDecodingContext<JSONDecoder>
    ) throws {
        self.init(rawValue: try String(from: &buffer, type: type, format: format, context: context))
    }
}

/// A row read by column name.
struct Columns {
    let row: PostgresRandomAccessRow

    init(_ row: PostgresRow) { self.row = row.makeRandomAccess() }

    /// The column's value; a NULL, a missing column or another type throws (an Optional type reads NULL as nil).
    func callAsFunction<T: PostgresDecodable>(_ name: String, as type: T.Type = T.self) throws -> T {
        guard row.contains(name) else { throw UnreadableRow(table: "?", id: name, reason: "is not a column of the result") }
        return try row[name].decode(T.self)
    }
}

/// A `jobs` row for the shared mapping (``HeraldCore/Job/init(columns:uploads:)``).
struct JobRow: JobColumns {
    let columns: Columns

    func text(_ column: JobColumn) -> String? { (try? columns(column.name, as: String?.self)) ?? nil }
    func int(_ column: JobColumn) -> Int? { (try? columns(column.name, as: Int?.self)) ?? nil }
    func flag(_ column: JobColumn) -> Bool? { (try? columns(column.name, as: Bool?.self)) ?? nil }

    func timestamp(_ column: JobColumn) -> (value: Timestamp?, isReadable: Bool) {
        do {
            return (try columns(column.name, as: Timestamp?.self), true)
        } catch {
            return (nil, false)
        }
    }
}

/// Timestamps bind as arrays too (`unnest` of several rows' values).
extension Timestamp: PostgresArrayEncodable {
    public static var psqlArrayType: PostgresDataType { .timestamptzArray }
}
