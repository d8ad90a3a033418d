// The system's C library, for every module that calls it: `import Platform` instead of a block of `#if canImport`
// per file. Re-exported so that its functions and types (and their members) are visible where this is imported.
#if canImport(Glibc)
    @_exported import Glibc
#elseif canImport(Musl)
    @_exported import Musl
#elseif canImport(Darwin)
    @_exported import Darwin
#endif
