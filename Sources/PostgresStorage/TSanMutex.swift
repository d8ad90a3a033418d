#if HERALD_TSAN
    // Exported so that every file of the module sees TSanMutex's members (MemberImportVisibility) without importing it.
    @_exported import Locking

    /// In a ThreadSanitizer build, a lock TSan can see stands in for `Synchronization.Mutex` (see `Locking`).
    typealias Mutex<Value> = TSanMutex<Value>
#endif
