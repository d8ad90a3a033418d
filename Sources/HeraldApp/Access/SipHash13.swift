/// SipHash-1-3 (Aumasson and Bernstein): a keyed 64-bit hash of a short input, the function Swift's `Hasher` runs,
/// here under a key the caller draws and in one pass over bytes already in hand.
///
/// Written out because `Hasher` takes its key from the process (a salt combined in costs a round) and buffers
/// its input: the key cache's two hashes of a 48-byte key cost about 1.1k instructions through it, 0.4k here.
struct SipHash13: Sendable {
    private let key: (UInt64, UInt64)

    init(key: (UInt64, UInt64)) {
        self.key = key
    }

    /// A key from the system's random source.
    static func random() -> SipHash13 {
        SipHash13(key: (.random(in: .min ... .max), .random(in: .min ... .max)))
    }

    func hash(_ bytes: UnsafeRawBufferPointer) -> UInt64 {
        var state = State(key: key)
        let whole = bytes.count & ~7
        var offset = 0
        while offset < whole {
            state.compress(UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self)))
            offset += 8
        }
        // The last word: the remaining bytes, little-endian, under the length's low byte.
        var last = UInt64(truncatingIfNeeded: bytes.count) &<< 56
        var shift: UInt64 = 0
        while offset < bytes.count {
            last |= UInt64(bytes[offset]) &<< shift
            shift += 8
            offset += 1
        }
        state.compress(last)
        return state.finalize()
    }

    private struct State {
        var v0: UInt64
        var v1: UInt64
        var v2: UInt64
        var v3: UInt64

        init(key: (UInt64, UInt64)) {
            v0 = 0x736f_6d65_7073_6575 ^ key.0
            v1 = 0x646f_7261_6e64_6f6d ^ key.1
            v2 = 0x6c79_6765_6e65_7261 ^ key.0
            v3 = 0x7465_6462_7974_6573 ^ key.1
        }

        /// One word: one round (the "1" of 1-3).
        mutating func compress(_ word: UInt64) {
            v3 ^= word
            round()
            v0 ^= word
        }

        /// Three rounds (the "3").
        mutating func finalize() -> UInt64 {
            v2 ^= 0xff
            round()
            round()
            round()
            return v0 ^ v1 ^ v2 ^ v3
        }

        private mutating func round() {
            v0 = v0 &+ v1
            v1 = Self.rotate(v1, 13) ^ v0
            v0 = Self.rotate(v0, 32)
            v2 = v2 &+ v3
            v3 = Self.rotate(v3, 16) ^ v2
            v0 = v0 &+ v3
            v3 = Self.rotate(v3, 21) ^ v0
            v2 = v2 &+ v1
            v1 = Self.rotate(v1, 17) ^ v2
            v2 = Self.rotate(v2, 32)
        }

        private static func rotate(_ value: UInt64, _ bits: UInt64) -> UInt64 {
            (value &<< bits) | (value &>> (64 - bits))
        }
    }
}
