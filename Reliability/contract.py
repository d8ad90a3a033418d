#!/usr/bin/env python3
"""The contract fuzzed: Schemathesis 4 (every check, all phases, stateful links) against a fresh Herald.

Starts `herald serve` on a loopback port with a new data directory and an admin key (auth on, so the auth checks
run), runs Schemathesis with Reliability/schemathesis.toml and Reliability/schemathesis_hooks.py, and fails when
it reports any failure or error. `--json-out` writes the figures for RELIABILITY.md.

    python3 Reliability/contract.py [--herald PATH] [--max-time SECONDS] [--seed N] [--json-out PATH] [--postgres]

With `--postgres` Herald keeps its rows in a PostgreSQL 15 of the run's own (`--database`), its media staged in the store.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import harness  # noqa: E402 (it puts scripts/ on the path, for herald_support)
from harness import HOST, REPO_ROOT  # noqa: E402
from herald_support import Herald, create_key  # noqa: E402
from herald_support.postgres import Postgres  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--herald", default=str(harness.DEFAULT_HERALD))
    parser.add_argument("--max-time", type=int, default=240, help="seconds Schemathesis may spend (fuzzing and stateful repeat until then)")
    parser.add_argument("--seed", type=int, help="a fixed seed makes the run reproducible")
    parser.add_argument("--json-out")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (data, log, reports)")
    parser.add_argument("--postgres", action="store_true", help="Herald on a PostgreSQL of this run (--database)")
    args = parser.parse_args()
    if shutil.which("schemathesis") is None:
        sys.exit("schemathesis is not installed: python3 -m pip install 'schemathesis>=4,<5'")
    if args.postgres:
        with Postgres(durable=False) as postgres:
            fuzz(args, postgres.database())
    else:
        fuzz(args, None)


def fuzz(args, database):
    """Schemathesis against one Herald (on `database` if given); exits 1 when it failed."""

    work = Path(tempfile.mkdtemp(prefix="herald-contract-"))
    data = work / "data"
    key = create_key(args.herald, data, "schemathesis", database)
    # No rate limits (Schemathesis sends thousands of requests with one key); everything else as users run it.
    server = Herald(args.herald, data, "--rate-limit", "0", "--auth-failure-limit", "0", "--log-level", "warning",
                    *(["--database", database] if database else []), log_path=work / "herald.log")
    try:
        server.start(timeout=30)
    except RuntimeError:
        sys.exit(f"herald did not become ready; see {work / 'herald.log'}")
    port = server.port
    try:
        junit = work / "junit.xml"
        command = ["schemathesis", "--no-color", "--config-file", str(HERE / "schemathesis.toml"), "run",
                   str(REPO_ROOT / "openapi.yaml"), "--url", f"http://{HOST}:{port}",
                   "--checks", "all", "--max-time", str(args.max_time), "--workers", "1",
                   "--report", "junit", "--report-junit-path", str(junit), "--generation-database", "none"]
        if args.seed is not None:
            command += ["--seed", str(args.seed)]
        env = dict(os.environ, HERALD_KEY=key, SCHEMATHESIS_HOOKS="schemathesis_hooks",
                   PYTHONPATH=os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))
        started = time.monotonic()
        run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=args.max_time + 600)
        duration = time.monotonic() - started
        (work / "schemathesis.txt").write_text(run.stdout + run.stderr)
        alive = server.alive()
    finally:
        exit_code = server.stop(timeout=30)

    output = run.stdout
    summary = re.search(r"(\d+) generated, (\d+) found (\d+) unique failures?", output)
    generated = int(summary.group(1)) if summary else None
    unique_failures = int(summary.group(3)) if summary else 0
    if summary is None and re.search(r"(\d+) generated", output):
        generated = int(re.search(r"(\d+) generated", output).group(1))
    seed = re.search(r"Seed: (\d+)", output)
    operations = re.search(r"Tested: (\d+)", output)
    failing = sorted({case.get("name") for case in ElementTree.parse(junit).iter("testcase")
                      if case.find("failure") is not None or case.find("error") is not None}) if junit.exists() else []
    result = {
        "operations_tested": int(operations.group(1)) if operations else None,
        "test_cases": generated,
        "unique_failures": unique_failures,
        "failing_operations": failing,
        "seed": seed.group(1) if seed else None,
        "max_time": args.max_time,
        "duration_seconds": round(duration, 1),
        "schemathesis_exit": run.returncode,
        "server_alive_throughout": alive,
        "server_exit": exit_code,
    }
    print(output[-6000:])
    print(json.dumps(result, indent=2))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=2) + "\n")
    ok = run.returncode == 0 and alive and exit_code == 0
    if args.keep or not ok:
        print(f"work directory kept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
