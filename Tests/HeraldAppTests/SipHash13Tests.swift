import Testing

@testable import HeraldApp

@Suite("SipHash-1-3")
struct SipHash13Tests {
    /// The reference implementation's vectors (key 00 01 … 0f, input 00 01 … of each length), as the Swift standard
    /// library's own tests of `Hasher` list them: every tail length, a whole word, two, and eight less one byte.
    @Test(
        "reference vectors",
        arguments: [
            (0, 0xabac_0158_050f_c4dc), (1, 0xc9f4_9bf3_7d57_ca93), (2, 0x82cb_9b02_4dc7_d44d), (3, 0x8bf8_0ab8_e7dd_f7fb),
            (4, 0xcf75_5760_88d3_8328), (5, 0xdef9_d52f_4953_3b67), (6, 0xc50d_2b50_c59f_22a7), (7, 0xd392_7d98_9bb1_1140),
            (8, 0x3690_9511_8d29_9a8e), (9, 0x25a4_8eb3_6c06_3de4), (15, 0xd320_d86d_2a51_9956), (16, 0xcc4f_dd1a_7d90_8b66),
            (17, 0x9cf2_6890_63db_d80c), (48, 0x9f31_43f8_df07_4c46), (63, 0x9d19_9062_b7bb_b3a8),
        ] as [(Int, UInt64)])
    func referenceVectors(length: Int, expected: UInt64) {
        let function = SipHash13(key: (0x0706_0504_0302_0100, 0x0f0e_0d0c_0b0a_0908))
        let input = (0..<length).map { UInt8($0) }
        #expect(input.withUnsafeBytes { function.hash($0) } == expected)
    }

    @Test("a key changes every hash")
    func keyed() {
        let input = Array("hrld_0123456789abcdefghijklmnopqrstuvwxyzABCDEFG".utf8)
        let one = SipHash13(key: (1, 2))
        let other = SipHash13(key: (1, 3))
        #expect(input.withUnsafeBytes { one.hash($0) } != input.withUnsafeBytes { other.hash($0) })
    }
}
