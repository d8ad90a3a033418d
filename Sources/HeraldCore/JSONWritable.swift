/// A value with one JSON form, written by ``JSONWriter`` with its members in the order `openapi.yaml` documents.
///
/// `JSONEncoder` on Linux writes keys in no fixed order; these writers give every answer one stable order and
/// the same members and values as the `Encodable` forms (`APIJSONTests` checks both). Refining `Encodable` keeps
/// that form at hand and makes an overload taking `some JSONWritable` win over one taking `some Encodable`.
public protocol JSONWritable: Encodable {
    /// Writes the value where `writer` stands: the whole text, a member's value or an array's element.
    func write(to writer: inout JSONWriter)
}

extension JSONWritable {
    /// The value as JSON text.
    public var json: [UInt8] {
        var writer = JSONWriter()
        write(to: &writer)
        return writer.bytes
    }
}

extension Media: JSONWritable {
    /// `{"id", "content_type", "size", "sha256", "description", "state", "url", "post_id", "created_at"}`.
    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.key("id")
        writer.string(id)
        writer.key("content_type")
        writer.string(contentType.rawValue)
        writer.key("size")
        writer.int(Int(size))
        writer.key("sha256")
        writer.string(sha256)
        writer.key("description")
        writer.string(description)
        writer.key("state")
        writer.string(state.rawValue)
        writer.key("url")
        writer.string(url)
        writer.key("post_id")
        writer.string(postID)
        writer.key("created_at")
        writer.timestamp(createdAt)
        writer.endObject()
    }
}

extension Post: JSONWritable {
    /// `{"id", "text", "state", "media", "job_id", "priority", "scheduled_at", "created_at", "published_at"}`.
    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.key("id")
        writer.string(id)
        writer.key("text")
        writer.string(text)
        writer.key("state")
        writer.string(state.rawValue)
        writer.key("media")
        writer.beginArray()
        for medium in media { medium.write(to: &writer) }
        writer.endArray()
        writer.key("job_id")
        writer.string(jobID)
        writer.key("priority")
        writer.string(priority.rawValue)
        writer.key("scheduled_at")
        writer.timestamp(scheduledAt)
        writer.key("created_at")
        writer.timestamp(createdAt)
        writer.key("published_at")
        writer.timestamp(publishedAt)
        writer.endObject()
    }
}

extension PostAndJob: JSONWritable {
    /// `{"post", "job"}`.
    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.key("post")
        post.write(to: &writer)
        writer.key("job")
        job.write(to: &writer)
        writer.endObject()
    }
}

extension Page: JSONWritable where Element: JSONWritable {
    /// `{"data": [...], "next_cursor": string|null}`.
    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.key("data")
        writer.beginArray()
        for element in data { element.write(to: &writer) }
        writer.endArray()
        writer.key("next_cursor")
        writer.string(nextCursor?.encoded)
        writer.endObject()
    }
}

extension QueueStatus: JSONWritable {
    /// `{"paused", "workers", "running", "queued", "scheduled"}`.
    public func write(to writer: inout JSONWriter) {
        writer.beginObject()
        writer.key("paused")
        writer.bool(paused)
        writer.key("workers")
        writer.int(workers)
        writer.key("running")
        writer.int(running)
        writer.key("queued")
        writer.int(queued)
        writer.key("scheduled")
        writer.int(scheduled)
        writer.endObject()
    }
}
