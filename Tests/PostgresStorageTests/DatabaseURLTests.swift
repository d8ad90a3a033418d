import PostgresStorage
import Testing

/// `--database`: what is accepted, what is refused, and that the password is never shown.
@Suite("--database URLs")
struct DatabaseURLTests {
    @Test("a full URL: user, password (percent-decoded), host, port, database, sslmode")
    func full() throws {
        let url = try DatabaseURL(parsing: "postgresql://herald:s%40cret@db.internal:6543/posts?sslmode=require")
        #expect(url.user == "herald" && url.password == "s@cret" && url.host == "db.internal" && url.port == 6543)
        #expect(url.database == "posts" && url.tls == .require && url.socketDirectory == nil)
        #expect(url.description == "postgres://herald:***@db.internal:6543/posts?sslmode=require")
        #expect(!url.description.contains("s@cret") && !url.description.contains("s%40cret"))
    }

    @Test("defaults: port 5432, sslmode prefer; a Unix socket directory instead of a host")
    func defaultsAndSocket() throws {
        let plain = try DatabaseURL(parsing: "postgres://herald@localhost/herald")
        #expect(plain.port == 5432 && plain.tls == .prefer && plain.password == nil)
        let socket = try DatabaseURL(parsing: "postgres://herald@/herald?host=/var/run/postgresql")
        #expect(socket.socketDirectory == "/var/run/postgresql" && socket.host.isEmpty)
        #expect(!socket.description.contains("sslmode"))
    }

    @Test(
        "what is refused says why in a line, without the password",
        arguments: [
            ("mysql://u:pw@h/db", "scheme"),
            ("postgres://h/db", "no user"),
            ("postgres://u:pw@h", "no database"),
            ("postgres://u:pw@h/a/b", "no database"),
            ("postgres://u:pw@h/db?sslmode=verify-full", "sslmode"),
            ("postgres://u:pw@h/db?host=relative", "host="),
            ("postgres://u:pw@h/db?application_name=x", "unknown parameter"),
            ("postgres://u:pw@/db", "no host"),
            ("not a url", "not a URL"),
        ])
    func refused(text: String, reason: String) {
        #expect {
            try DatabaseURL(parsing: text)
        } throws: { error in
            let message = "\(error)"
            return message.hasPrefix("--database: ") && message.contains(reason) && !message.contains("pw")
        }
    }
}
