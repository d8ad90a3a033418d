public import HTTPTypes
public import HeraldCore
public import MicroHTTP

extension Response {
    /// A JSON response of `value`, written by ``JSONWriter`` with its members in the documented order.
    public static func json(_ value: some JSONWritable, status: HTTPResponse.Status = .ok, headerFields: HTTPFields = [:]) -> Response {
        var fields = headerFields
        fields[.contentType] = "application/json"
        return Response(status: status, headerFields: fields, body: .bytes(value.json))
    }
}
