import CMicroHTTPD
import HTTPTypes
import Platform

/// An `MHD_Connection` pointer that crosses from libmicrohttpd's thread to the handler's task.
///
/// `@unchecked Sendable`: it is only dereferenced by libmicrohttpd calls made under the owning ``Exchange``'s
/// lock, while the connection is suspended (libmicrohttpd neither reads it nor frees it then) or from its own thread.
struct Connection: @unchecked Sendable {
    let pointer: OpaquePointer

    func suspend() { MHD_suspend_connection(pointer) }
    func resume() { MHD_resume_connection(pointer) }

    /// Hands `response` to libmicrohttpd for sending; it keeps its own reference.
    func queue(_ response: OpaquePointer, status: Int) -> Bool {
        MHD_queue_response(pointer, UInt32(status), response) == .YES
    }
}

/// An `MHD_Response` built off the connection's thread, waiting to be queued.
///
/// `@unchecked Sendable`: owned by one exchange at a time; destroyed exactly once, by ``release()``.
struct PreparedResponse: @unchecked Sendable {
    let pointer: OpaquePointer
    let status: Int
    let bodySize: Int?

    func release() { MHD_destroy_response(pointer) }

    /// Builds the libmicrohttpd response for a buffered body (copied) or a stream (read through `sink`), with the
    /// fields every answer carries: its request id, and `Connection: close` when `close`.
    ///
    /// Those two go to libmicrohttpd as they are, not through `response`'s fields (the id is one Herald made or checked:
    /// no field value to validate again); a handler's own of either gives way to them.
    static func make(_ response: Response, stream sink: StreamSink?, requestID: String, close: Bool) -> PreparedResponse? {
        let pointer: OpaquePointer?
        var bodySize: Int?
        if let sink {
            let context = Unmanaged.passRetained(sink).toOpaque()
            pointer = MHD_create_response_from_callback(UInt64.max, 32 << 10, StreamSink.read, context, StreamSink.free)
            if pointer == nil { Unmanaged<StreamSink>.fromOpaque(context).release() }
        } else if case .owned(let bytes) = response.body.storage {
            // libmicrohttpd reads them from where they are until it is done with the response, then lets them go.
            bodySize = bytes.count
            let context = Unmanaged.passRetained(bytes).toOpaque()
            pointer = MHD_create_response_from_buffer_with_free_callback_cls(
                bytes.count, UnsafeMutableRawPointer(mutating: bytes.start), PreparedResponse.release, context)
            if pointer == nil { Unmanaged<OwnedBytes>.fromOpaque(context).release() }
        } else {
            let bytes = response.body.bytes ?? []
            bodySize = bytes.count
            pointer = bytes.withUnsafeBytes { buffer in
                MHD_create_response_from_buffer(buffer.count, UnsafeMutableRawPointer(mutating: buffer.baseAddress), .RESPMEM_MUST_COPY)
            }
        }
        guard let pointer else { return nil }
        for field in response.headerFields where field.name != .requestID && (field.name != .connection || !close) {
            // withCString: a small string is copied to the stack (`utf8CString` would allocate an array for it).
            _ = field.name.rawName.withCString { name in field.value.withCString { MHD_add_response_header(pointer, name, $0) } }
        }
        _ = requestID.withCString { MHD_add_response_header(pointer, "X-Request-Id", $0) }
        if close { _ = MHD_add_response_header(pointer, "Connection", "close") }
        return PreparedResponse(pointer: pointer, status: response.status.code, bodySize: bodySize)
    }

    /// Lets an owned body go, when libmicrohttpd destroys the response that sent it.
    private static let release: MHD_ContentReaderFreeCallback = { context in
        guard let context else { return }
        Unmanaged<OwnedBytes>.fromOpaque(context).release()
    }
}
