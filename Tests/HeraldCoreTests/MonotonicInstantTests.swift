import Platform
import Testing

@Suite("The monotonic clock the request path times with")
struct MonotonicInstantTests {
    @Test func durationsConvertToWholeNanoseconds() {
        #expect(Duration.milliseconds(1500).wholeNanoseconds == 1_500_000_000)
        #expect(Duration.nanoseconds(7).wholeNanoseconds == 7)
        #expect(Duration.seconds(-2).wholeNanoseconds == -2_000_000_000)
        // Below a nanosecond: rounded toward zero.
        #expect((Duration.nanoseconds(3) + .init(secondsComponent: 0, attosecondsComponent: 999_999_999)).wholeNanoseconds == 3)
    }

    @Test func instantsAddDurationsAndSubtractToThem() {
        let start = MonotonicInstant(nanoseconds: 5_000_000_000)
        let later = start + .milliseconds(250)
        #expect(later.nanoseconds == 5_250_000_000)
        #expect(start.nanoseconds(to: later) == 250_000_000)
        #expect(later.nanoseconds(to: start) == -250_000_000)
        #expect(later - start == .milliseconds(250))
        #expect(start < later && !(later < start) && start <= start)
    }

    @Test func theClockDoesNotGoBack() {
        var previous = MonotonicInstant.now
        for _ in 0..<1000 {
            let now = MonotonicInstant.now
            #expect(previous <= now)
            previous = now
        }
    }
}
