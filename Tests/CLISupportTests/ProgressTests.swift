import XCTest
import CLISupport

final class ProgressTests: XCTestCase {
    func testETAFromAFreshStart() {
        // 10 of 100 steps in 20 s: 90 steps left at 2 s each.
        XCTAssertEqual(ProgressPrinter.remainingSeconds(step: 10, total: 100, firstStep: 0, elapsed: 20), 180)
    }

    func testETAAfterResumeCountsOnlyThisRunsSteps() {
        // Resumed after step 500 of 750; 25 steps in 100 s: 225 left at 4 s each, not at 100/525 s.
        XCTAssertEqual(ProgressPrinter.remainingSeconds(step: 525, total: 750, firstStep: 500, elapsed: 100), 900)
    }

    func testDurationFormatting() {
        XCTAssertEqual(ProgressPrinter.duration(59), "59s")
        XCTAssertEqual(ProgressPrinter.duration(900), "15m00s")
        XCTAssertEqual(ProgressPrinter.duration(3725), "1h02m")
        XCTAssertEqual(ProgressPrinter.duration(.nan), "?")
    }
}
