import Testing

@testable import HeraldClient

@Suite("Progress figures: rate, time left, sizes")
struct ProgressFiguresTests {
    @Test func rateIsBytesOverTheWindowAndTimeLeftFollowsIt() {
        let start = ContinuousClock.now
        var meter = TransferMeter(total: 10_000, window: .seconds(3))
        #expect(meter.bytesPerSecond == nil)
        #expect(meter.secondsLeft == nil)
        meter.record(0, at: start)
        meter.record(1000, at: start + .seconds(1))
        meter.record(2000, at: start + .seconds(2))
        #expect(meter.bytesPerSecond == 1000)
        #expect(meter.secondsLeft == 8)
        #expect(meter.fraction == 0.2)
        // The window forgets the slow start: 2,000 B/s over the last 3 s.
        meter.record(4000, at: start + .seconds(3))
        meter.record(6000, at: start + .seconds(4))
        meter.record(8000, at: start + .seconds(5))
        #expect(meter.bytesPerSecond == 2000)
        #expect(meter.secondsLeft == 1)
    }

    @Test func countsNeverGoBackNorPastTheTotal() {
        let start = ContinuousClock.now
        var meter = TransferMeter(total: 100)
        meter.record(60, at: start)
        meter.record(40, at: start + .milliseconds(10))
        #expect(meter.done == 60)
        meter.record(500, at: start + .milliseconds(20))
        #expect(meter.done == 100)
        #expect(meter.secondsLeft == 0)
    }

    @Test func stalledTransferHasNoTimeLeft() {
        let start = ContinuousClock.now
        var meter = TransferMeter(total: 100)
        meter.record(10, at: start)
        meter.record(10, at: start + .seconds(1))
        #expect(meter.bytesPerSecond == 0)
        #expect(meter.secondsLeft == nil)
    }

    @Test(arguments: [
        (0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"), (10_485_760, "10.0 MiB"), (1_073_741_824, "1.0 GiB"),
    ])
    func bytes(count: Int, text: String) {
        #expect(HumanReadable.bytes(count) == text)
    }

    @Test func durations() {
        #expect(HumanReadable.duration(seconds: 5) == "0:05")
        #expect(HumanReadable.duration(seconds: 125) == "2:05")
        #expect(HumanReadable.duration(seconds: 3725) == "1:02:05")
    }

    @Test func pathSegmentsAreEncoded() {
        #expect(APIClient.segment("0193a-b_c.d~") == "0193a-b_c.d~")
        #expect(APIClient.segment("a/b c%") == "a%2Fb%20c%25")
        #expect(APIClient.query(state: "running", limit: 5, cursor: "x=") == "?state=running&limit=5&cursor=x%3D")
    }
}

@Suite("Progress lines fitted to the terminal")
struct ProgressLineTests {
    static let line = ProgressLine(
        name: "holiday-video.mp4", fraction: 0.45, bytes: (5_872_025, 12_897_484), bytesPerSecond: 3_355_443, secondsLeft: 2)

    @Test func wideTerminalShowsEverything() {
        #expect(Self.line.text(width: 120) == "holiday-video.mp4 [=============                 ]  45%  5.6 MiB of 12.3 MiB  3.2 MiB/s  0:02 left")
    }

    /// Narrower and narrower: the line never takes the last column, and loses the time left, then the rate, then the bytes.
    @Test(arguments: Array(stride(from: 20, through: 120, by: 1)))
    func neverWiderThanTheTerminal(width: Int) {
        let text = Self.line.text(width: width)
        #expect(text.count <= max(width - 1, 20), "\(width): \(text)")
        #expect(text.contains("%"), "the percentage stays")
    }

    @Test func whatGoesFirstWhenNarrow() {
        // The bar gives up cells first (to 10), then the time left goes, the rate, the bytes; last the name is cut.
        #expect(Self.line.text(width: 80) == "holiday-video.mp4 [====       ]  45%  5.6 MiB of 12.3 MiB  3.2 MiB/s  0:02 left")
        #expect(Self.line.text(width: 70) == "holiday-video.mp4 [=====       ]  45%  5.6 MiB of 12.3 MiB  3.2 MiB/s")
        #expect(Self.line.text(width: 40) == "holiday-video.mp4 [======        ]  45%")
        #expect(Self.line.text(width: 30) == "holiday-vi… [====      ]  45%")
    }

    @Test func outcomeReplacesThePercentageAndTheRate() {
        var done = Self.line
        done.fraction = 1
        done.bytes = (12_897_484, 12_897_484)
        done.outcome = "done"
        #expect(done.text(width: 100) == "holiday-video.mp4 [==============================] done  12.3 MiB")
    }

    @Test func namesAlignToACommonWidth() {
        var short = ProgressLine(name: "a.png", fraction: 0)
        short.nameWidth = 10
        #expect(short.text(width: 100).hasPrefix("a.png      ["))
    }
}
