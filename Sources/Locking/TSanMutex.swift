#if HERALD_TSAN
    #if canImport(Glibc)
        import Glibc
    #elseif canImport(Darwin)
        import Darwin
    #endif

    /// `Synchronization.Mutex`'s `withLock`, over a pthread mutex: what every module locks with in a ThreadSanitizer
    /// build (`-Xswiftc -DHERALD_TSAN`, see `Reliability/sanitizers.py`), through its `Mutex` alias.
    ///
    /// `Synchronization.Mutex` on Linux locks with futex calls inside the Swift runtime, which is not built with TSan:
    /// TSan sees no acquire or release, and reports accesses made under one Mutex as races (a 15-line program with
    /// four threads and a `Mutex<[Int: Int]>` gets three reports; with a pthread mutex, none). TSan intercepts
    /// pthread, so under this lock it checks the same code with the ordering it really has.
    ///
    /// `@unchecked Sendable`: the value is only reached inside `withLock`, under the mutex.
    public final class TSanMutex<Value>: @unchecked Sendable {
        private var value: Value
        private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)

        public init(_ value: Value) {
            self.value = value
            pthread_mutex_init(mutex, nil)
        }

        deinit {
            pthread_mutex_destroy(mutex)
            mutex.deallocate()
        }

        public func withLock<Result, E: Error>(_ body: (inout Value) throws(E) -> Result) throws(E) -> Result {
            pthread_mutex_lock(mutex)
            defer { pthread_mutex_unlock(mutex) }
            return try body(&value)
        }
    }
#endif
