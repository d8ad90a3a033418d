// The C calls that types with their own `write` and `close` (WritableFile, the log's line writer) shadow.

/// `write(2)`, from the platform's C library.
public func systemWrite(_ descriptor: Int32, _ buffer: UnsafeRawPointer, _ count: Int) -> Int {
    #if canImport(Glibc)
        Glibc.write(descriptor, buffer, count)
    #elseif canImport(Musl)
        Musl.write(descriptor, buffer, count)
    #elseif canImport(Darwin)
        Darwin.write(descriptor, buffer, count)
    #endif
}

/// `close(2)`, from the platform's C library.
@discardableResult
public func systemClose(_ descriptor: Int32) -> Int32 {
    #if canImport(Glibc)
        Glibc.close(descriptor)
    #elseif canImport(Musl)
        Musl.close(descriptor)
    #elseif canImport(Darwin)
        Darwin.close(descriptor)
    #endif
}
