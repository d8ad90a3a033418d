public import HTTPTypes

/// A request's header fields as they arrived, in order: names as swift-http-types names them, values as sent
/// (libmicrohttpd has trimmed them, and refuses line breaks in them).
///
/// Swift-http-types' `HTTPFields` is made only when asked for (``httpFields``): it checks every value byte by byte and
/// indexes the fields, which cost a status poll more than the rest of its head, while most requests read one or two
/// fields.
public struct RequestFields: Sendable, Equatable {
    /// One field, repeated names kept apart.
    public struct Field: Sendable, Equatable {
        public let name: HTTPField.Name
        public let value: String

        public init(name: HTTPField.Name, value: String) {
            self.name = name
            self.value = value
        }
    }

    /// Every field, in the order sent.
    public private(set) var all: [Field]

    public init(_ fields: [Field] = []) { all = fields }

    /// The fields of `fields`, in order.
    public init(_ fields: HTTPFields) { all = fields.map { Field(name: $0.name, value: $0.value) } }

    /// Adds a field after the others.
    public mutating func append(_ name: HTTPField.Name, _ value: String) { all.append(Field(name: name, value: value)) }

    /// Room for `count` fields, so that a usual head is not reallocated as it grows.
    mutating func reserveCapacity(_ count: Int) { all.reserveCapacity(count) }

    /// The value of `name`, repeated fields joined as `HTTPFields` joins them (`, `, or `; ` for `Cookie`); nil when
    /// absent.
    public subscript(name: HTTPField.Name) -> String? {
        var joined: String?
        for field in all where field.name == name {
            if let previous = joined {
                joined = previous + (name == .cookie ? "; " : ", ") + field.value
            } else {
                joined = field.value
            }
        }
        return joined
    }

    /// The first value of `name`, not joined with the others.
    public func first(_ name: HTTPField.Name) -> String? {
        for field in all where field.name == name { return field.value }
        return nil
    }

    /// Every value of `name`, in order.
    public func values(_ name: HTTPField.Name) -> [String] {
        all.compactMap { $0.name == name ? $0.value : nil }
    }

    /// As swift-http-types' fields (values it finds illegal made legal, as it does).
    public var httpFields: HTTPFields { HTTPFields(all.map { HTTPField(name: $0.name, value: $0.value) }) }
}

/// The field names most requests carry, found by their bytes in any case: no string made for the name, no token check
/// or lowercasing again (a name swift-http-types made once).
enum CommonFieldNames {
    /// A common name: what the daemon notes a field by as it arrives.
    enum Known: Int, CaseIterable {
        case host, authorization, accept, acceptEncoding, userAgent, contentType, contentLength, transferEncoding, connection
        case requestID, forwardedFor

        var name: HTTPField.Name {
            switch self {
            case .host: .hostField
            case .authorization: .authorization
            case .accept: .accept
            case .acceptEncoding: .acceptEncoding
            case .userAgent: .userAgent
            case .contentType: .contentType
            case .contentLength: .contentLength
            case .transferEncoding: .transferEncoding
            case .connection: .connection
            case .requestID: .requestID
            case .forwardedFor: .forwardedFor
            }
        }
    }

    private static let names = Known.allCases.map(\.name)
    /// Each name's lowercase bytes, apart from the names: scanned without copying a name's strings.
    private static let lowercase: [[UInt8]] = names.map { Array($0.canonicalName.utf8) }

    /// The name `bytes` spell, if a common one, and which it is.
    static func find(_ bytes: UnsafeRawBufferPointer) -> (name: HTTPField.Name, known: Known)? {
        for index in lowercase.indices where lowercase[index].count == bytes.count {
            let same = lowercase[index].withUnsafeBufferPointer { expected in
                for offset in 0..<expected.count {
                    let byte = bytes[offset]
                    // ASCII letters to lowercase; any other byte as it is.
                    if expected[offset] != (byte &- UInt8(ascii: "A") < 26 ? byte | 0x20 : byte) { return false }
                }
                return true
            }
            // The table is `Known.allCases` in order, so an index is a raw value.
            if same { return (names[index], Known(rawValue: index)!) }
        }
        return nil
    }
}
