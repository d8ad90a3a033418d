#!/usr/bin/env python3
"""The test suites under ThreadSanitizer or AddressSanitizer, each in its own scratch path; 0 reports to pass.

    python3 Reliability/sanitizers.py thread  [--suites MicroHTTPTests,SQLiteStorageTests,PublishingTests,HeraldAppTests] [--json-out PATH]
    python3 Reliability/sanitizers.py address [--suites MicroHTTPTests] [--json-out PATH]

Builds the tests with `swift build --build-tests --sanitize=KIND --scratch-path .build-tsan|.build-asan` (a cold
build compiles NIO and BoringSSL again: about 15 minutes here), runs the chosen test modules, counts the sanitizer's
reports and the failed tests. The TSan build defines HERALD_TSAN: Synchronization.Mutex locks with futex calls inside
the uninstrumented Swift runtime, which TSan cannot see, so there every module's `Mutex` is Locking.TSanMutex, a
pthread mutex TSan intercepts (see Sources/Locking). One suppression, a known false positive in swift-nio's
`EventLoopFuture.get()` (Reliability/tsan-suppressions.txt says why); the suppressed reports are counted apart.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SCRATCH = {"thread": ".build-tsan", "address": ".build-asan"}
DEFAULT_SUITES = {"thread": "MicroHTTPTests,SQLiteStorageTests,PublishingTests,HeraldAppTests", "address": "MicroHTTPTests"}
SUPPRESSIONS = REPO_ROOT / "Reliability" / "tsan-suppressions.txt"
SUPPRESSED = re.compile(r"ThreadSanitizer: Matched (\d+) suppressions")
REPORT = {"thread": re.compile(r"WARNING: ThreadSanitizer: (.*?) \(pid="),
          "address": re.compile(r"ERROR: (?:AddressSanitizer|LeakSanitizer): ([\w-]+)")}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=["thread", "address"])
    parser.add_argument("--suites", help="comma-separated test modules (default: %s)" % DEFAULT_SUITES)
    parser.add_argument("--json-out")
    args = parser.parse_args()
    scratch = SCRATCH[args.kind]
    suites = (args.suites or DEFAULT_SUITES[args.kind]).split(",")

    started = time.monotonic()
    # Under TSan every module locks with Locking.TSanMutex, which TSan can see (Sources/Locking explains why).
    defines = ["-Xswiftc", "-DHERALD_TSAN"] if args.kind == "thread" else []
    # Without the OTLP trait: Swift 6.3 refuses to compile swift-otel 1.6.0 under -sanitize=thread (a "sending 'logger'
    # risks causing data races" error in its log processor, which the normal builds accept); no suite run here traces.
    build = subprocess.run(["swift", "build", "--build-tests", f"--sanitize={args.kind}", "--disable-default-traits", *defines,
                            "--scratch-path", scratch],
                           cwd=REPO_ROOT, capture_output=True, text=True)
    build_seconds = time.monotonic() - started
    if build.returncode != 0:
        print(build.stdout[-4000:] + build.stderr[-4000:])
        sys.exit(f"the {args.kind} sanitizer build failed")

    env = dict(os.environ)
    if args.kind == "thread":
        env["TSAN_OPTIONS"] = f"halt_on_error=0 history_size=4 suppressions={SUPPRESSIONS} print_suppressions=1"
    else:
        env["ASAN_OPTIONS"] = "detect_leaks=1 halt_on_error=0"
    binary = REPO_ROOT / scratch / "debug" / "heraldPackageTests.xctest"
    # One module at a time: a sanitized build runs several times slower, and every module's tests at once on two
    # cores pushed tests that wait on the cooperative pool past their time limits.
    outputs, tests, passed, exit_codes = [], 0, True, []
    started = time.monotonic()
    for suite in suites:
        # Swift Testing's filter is a regular expression over `Module.Suite/test()`.
        run = subprocess.run([str(binary), "--testing-library", "swift-testing", "--filter", "^%s\\." % suite],
                             cwd=REPO_ROOT, capture_output=True, text=True, env=env, timeout=3600)
        output = run.stdout + run.stderr
        outputs.append(output)
        exit_codes.append(run.returncode)
        plain = re.sub(r"\x1b\[[0-9;]*m", "", output)
        summary = re.search(r"Test run with (\d+) tests? in (\d+) suites? (passed|failed)", plain)
        tests += int(summary.group(1)) if summary else 0
        if not summary or summary.group(3) != "passed":
            passed = False
            # What failed, where CI shows it (the whole log stays in the scratch path).
            print("\n".join(line for line in plain.splitlines() if line.startswith("\u2718")) or plain[-2000:])
    test_seconds = time.monotonic() - started
    output = "".join(outputs)
    log = REPO_ROOT / scratch / f"{args.kind}-sanitizer.log"
    log.write_text(output)
    reports = REPORT[args.kind].findall(output)
    result = {
        "sanitizer": args.kind,
        "suites": suites,
        "tests": tests,
        "tests_passed": passed,
        "reports": len(reports),
        "suppressed": sum(int(count) for count in SUPPRESSED.findall(output)),
        "report_kinds": sorted(set(reports)),
        "build_seconds": round(build_seconds),
        "test_seconds": round(test_seconds),
        "log": str(log.relative_to(REPO_ROOT)),
    }
    print(json.dumps(result, indent=2))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=2) + "\n")
    sys.exit(0 if result["tests_passed"] and not reports and not any(exit_codes) else 1)


if __name__ == "__main__":
    main()
