import CSQLite

/// SQLite's process-wide settings, applied once, before the first database opens (``SQLiteStorage/open(directory:logger:)``).
enum SQLiteLibrary {
    /// Whether the settings took; false when SQLite was in use in the process before (a test's own database opened
    /// first): they can no longer change then, and SQLite works as it did.
    ///
    /// Memory statistics off: with them on (the default), every allocation and free of SQLite's takes one
    /// process-wide mutex to count it, about 40 lock pairs a status poll. Herald reads no statistic and sets no heap
    /// limit, which are what they serve.
    static let configured: Bool = herald_sqlite3_disable_memory_statistics() == SQLITE_OK
}
