#!/usr/bin/env python3
"""The profile release builds are optimized with (issue 35): counts of Herald's code under a load of uploads, publishes
and status polls, written to Sources/herald/herald.profdata, which `make release` (the Dockerfile's build too) uses.

    python3 Benchmarks/pgo.py [--seconds 10] [--skip-swift-build]
                              (`make pgo`: then the release build is made again with the new profile, and `make layout`)

Herald is built instrumented (LLVM's IR instrumentation of every Swift module, the dependencies' too, in .build-pgo),
then serves, at `herald serve`'s defaults (info: the access log on) with a key whose rate limit the load never
reaches: 80 small PNGs uploaded by 8 clients, 20 posts of 4 of them published and long-polled to done (P7's
workload, smaller), then `--seconds` of status polls of one of their jobs (P1's: wrk -t1 -c32). It is stopped with
SIGTERM, as a service is; every Herald process the run starts (the key's creation too) writes its counts at exit, and
llvm-profdata (the toolchain's) merges them.

The profile is a build input SwiftPM does not track: a build made before it changed keeps the old one until Herald's
sources are compiled again (`make pgo` touches them all). Functions changed since it was taken get no counts: they are
compiled as without a profile, so a stale one costs speed, never correctness.
"""
import argparse
import glob
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
import run  # noqa: E402 (the benchmarks' helpers: servers, keys, uploads, the publish workload)

PROFILE = os.path.join(run.ROOT, "Sources", "herald", "herald.profdata")
SCRATCH = ".build-pgo"
MEDIA = 80
POSTS = MEDIA // run.PUBLISH_MEDIA_PER_POST


def toolchain_tool(name):
    """A tool of the Swift toolchain's own LLVM (the system's may read another profile format version)."""
    swiftc = shutil.which("swiftc")
    if swiftc is None:
        raise SystemExit("swiftc is not on PATH")
    tool = os.path.join(os.path.dirname(os.path.realpath(swiftc)), name)
    if not os.access(tool, os.X_OK):
        raise SystemExit(f"{tool} is missing: the Swift toolchain's {name} is needed")
    return tool


def touch_swift_sources(*folders):
    """Marks every Swift source under `folders` (package manifests aside) as changed."""
    for folder in folders:
        for directory, _, files in os.walk(folder):
            for name in files:
                if name.endswith(".swift") and not name.startswith("Package"):
                    os.utime(os.path.join(directory, name))


def build():
    """The instrumented release build of every Swift module (the dependencies' too, as `make release` optimizes them
    all): its binary's path."""
    # LLVM's IR instrumentation, a frontend flag (the driver drops it given alone); every link, the build plugin's tool's
    # too, gets LLVM's profile runtime, which writes the counts at exit (to $LLVM_PROFILE_FILE).
    resources = json.loads(subprocess.run(["swiftc", "-print-target-info"], check=True, capture_output=True, text=True,
                                          timeout=60).stdout)["paths"]["runtimeResourcePath"]
    runtime = os.path.join(resources, "clang", "lib", "linux", f"libclang_rt.profile-{platform.machine()}.a")
    if not os.path.exists(runtime):
        raise SystemExit(f"{runtime} is missing: the Swift toolchain's LLVM profile runtime is needed")
    command = ["swift", "build", "-c", "release", "--product", "herald", "--static-swift-stdlib", "--scratch-path", SCRATCH,
               "-Xswiftc", "-Xfrontend", "-Xswiftc", "-ir-profile-generate",
               "-Xswiftc", "-Xfrontend", "-Xswiftc", "-disable-incremental-llvm-codegen",
               "-Xlinker", runtime, "-Xlinker", "-u__llvm_profile_runtime"]
    # A module compiled before without the instrumentation would be kept: SwiftPM does not compile a module again for a
    # changed flag, and the frontend keeps an object file whose IR, before LLVM's passes, has not changed. Every Swift
    # source is touched, and the frontend told to run LLVM anyway.
    touch_swift_sources(os.path.join(run.ROOT, "Sources"), os.path.join(run.ROOT, SCRATCH, "checkouts"))
    run.run(command, timeout=3600)
    path = subprocess.run(command + ["--show-bin-path"], cwd=run.ROOT, check=True, capture_output=True, text=True,
                          timeout=600).stdout.strip()
    return os.path.join(path, "herald")


def train(herald, seconds):
    """The load, on a fresh data directory; raises if any of it fails."""
    binaries = {"herald": herald}
    data = tempfile.mkdtemp(prefix="herald-pgo-")
    try:
        server = run.herald_serve(binaries, "herald-pgo", data, log_level="info", rate_limit=run.POLL_RATE_LIMIT)
        try:
            media = run.upload_small(server, MEDIA)
            _, jobs = run.publish_workload(server, media, POSTS)
            path = f"/v1/jobs/{jobs[0]['id']}"
            polls = run.wrk(server, path, seconds, "pgo-training")
            if polls["non2xx"]:
                raise RuntimeError(f"{polls['non2xx']} of the training polls were not answered 2xx")
            run.log(f"trained: {MEDIA} uploads, {POSTS} posts published, {polls['rate']:,.0f} polls a second for {seconds} s")
        finally:
            code = server.stop()
        if code != 0:
            raise RuntimeError(f"the instrumented Herald exited with {code}: its counts are written only at a clean exit")
    finally:
        shutil.rmtree(data, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=10, choices=range(1, 61), metavar="1..60", help="of status polls")
    parser.add_argument("--skip-swift-build", action="store_true", help=f"use the instrumented binary in {SCRATCH}")
    args = parser.parse_args()
    profdata = toolchain_tool("llvm-profdata")
    herald = build() if not args.skip_swift_build else os.path.join(run.ROOT, SCRATCH, "release", "herald")
    if not os.access(herald, os.X_OK):
        raise SystemExit(f"no instrumented Herald at {herald}: run without --skip-swift-build")
    counts = tempfile.mkdtemp(prefix="herald-pgo-counts-")
    try:
        # Every Herald process started from here on writes its counts into `counts` as it exits.
        os.environ["LLVM_PROFILE_FILE"] = os.path.join(counts, "herald-%p.profraw")
        train(herald, args.seconds)
        raw = sorted(glob.glob(os.path.join(counts, "*.profraw")))
        if not raw:
            raise SystemExit("no counts were written: is the binary instrumented?")
        subprocess.run([profdata, "merge", "--sparse", "-o", PROFILE] + raw, check=True, timeout=600)
    finally:
        shutil.rmtree(counts, ignore_errors=True)
    summary = subprocess.run([profdata, "show", PROFILE], check=True, capture_output=True, text=True, timeout=600).stdout
    functions = next((line.split(":")[1].strip() for line in summary.splitlines() if line.startswith("Total functions")), "?")
    run.log(f"wrote {os.path.relpath(PROFILE, run.ROOT)}: {functions} functions counted, {os.path.getsize(PROFILE):,} bytes, "
            f"from {len(raw)} processes")


if __name__ == "__main__":
    main()
