#!/usr/bin/env python3
"""Fair share between tenants (issue 32), on SQLite (the default) and on PostgreSQL, in one run.

    python3 Benchmarks/fairshare.py [--herald BIN] [--baseline BIN] [--backlog 10000] [--tenants 100] [--rounds 5]
                                    (`make bench-fair`: a release build first; writes Benchmarks/out/fairshare.md and its part of BENCHMARKS.md)

  1. Claim throughput: `--backlog` text-only posts over `--tenants` tenants (round robin), queued while paused, then
     resumed with 8 workers: jobs claimed and finished a second until the queue is empty; the median of `--rounds`.
  2. B's wait: tenant A's 40 posts of one medium each, with 2 workers and a store whose PUTs each take 0.4 s (the S3
     fake's latency), then tenant B's one post: from B's post to B's job started (server times), beside one job's time.
`--baseline` runs the same against another binary (say, a build from before fair share) after it, in the same run,
for the ratio. Every load loop is bounded in count and time.
"""
import argparse
import json
import os
import statistics
import sys
import time
from http.client import HTTPConnection

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
import run  # noqa: E402 (the measurements' helpers; it puts scripts/ on the path)
import replicas  # noqa: E402 (serve, stop)
from herald_support.fake_s3 import CREDENTIALS, FakeS3  # noqa: E402
from herald_support.postgres import Postgres  # noqa: E402

JOB_SECONDS = 0.4


def call(herald, key, method, path, body=None, content_type="application/json"):
    """One request with `key`: the decoded JSON answer (raises on a status of 300 or more)."""
    connection = HTTPConnection("127.0.0.1", herald.port, timeout=40)
    try:
        headers = {"Authorization": f"Bearer {key}"}
        if body is not None:
            headers["Content-Type"] = content_type
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        data = response.read()
        if response.status >= 300:
            raise RuntimeError(f"{method} {path}: {response.status} {data[:300]!r}")
        return json.loads(data) if data else None
    finally:
        connection.close()


def tenant_keys(herald, count):
    admin = run.KEYS[herald.port]
    body = lambda index: json.dumps({"name": f"t{index}", "tenant": f"t{index:03}"}).encode()  # noqa: E731
    return [call(herald, admin, "POST", "/v1/keys", body(index))["key"] for index in range(count)]


def wait_empty(herald, limit):
    """Seconds until the queue has nothing queued or running (bounded by `limit`)."""
    started = time.monotonic()
    while time.monotonic() - started < limit:
        queue = json.loads(run.http("GET", herald.url("/v1/queue"))[1])
        if queue["queued"] == 0 and queue["running"] == 0:
            return time.monotonic() - started
        time.sleep(0.02)
    raise RuntimeError(f"the queue was not empty within {limit} s")


def claim_throughput(binary, database, backlog, tenants, limit=600):
    herald = replicas.serve(binary, "fair-claims", database, "--workers", "8")
    try:
        keys = tenant_keys(herald, tenants)
        run.http("POST", herald.url("/v1/queue/pause"))
        run.log(f"claim throughput: queueing {backlog} posts over {tenants} tenants (not timed)")

        def client(number, clients=8):
            for index in range(number, backlog, clients):
                call(herald, keys[index % tenants], "POST", "/v1/posts", json.dumps({"text": "queued"}).encode())

        run.in_threads(client, 8, limit, "queueing the backlog")
        run.log("claim throughput: resumed, timed")
        run.http("POST", herald.url("/v1/queue/resume"))
        return backlog / wait_empty(herald, limit)
    finally:
        replicas.stop(herald)


def b_wait(binary, database, backlog=40):
    fake = FakeS3(None, bucket="fair", latency=JOB_SECONDS).start()
    herald = replicas.serve(binary, "fair-wait", database, "--workers", "2", "--store", fake.store_url, env=CREDENTIALS)
    try:
        a, b = tenant_keys(herald, 2)
        media = [call(herald, a, "POST", "/v1/media", run.small_png(index), "image/png")["id"] for index in range(backlog)]
        medium = call(herald, b, "POST", "/v1/media", run.small_png(backlog), "image/png")["id"]
        run.log(f"B's wait: A's {backlog} posts, then B's one")
        for index in range(backlog):
            call(herald, a, "POST", "/v1/posts", json.dumps({"text": "a", "media_ids": [media[index]]}).encode())
        job = call(herald, b, "POST", "/v1/posts", json.dumps({"text": "b", "media_ids": [medium]}).encode())["job"]["id"]
        for _ in range(40):  # ?wait= holds up to 30 s
            answer = call(herald, b, "GET", f"/v1/jobs/{job}?wait=30")
            if answer["done"]:
                break
        started, created = run.timestamp(answer["started_at"]), run.timestamp(answer["created_at"])
        wait_empty(herald, 120)
        return started - created
    finally:
        replicas.stop(herald)
        fake.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--herald", default=os.path.join(run.ROOT, ".build-release", "release", "herald"))
    parser.add_argument("--baseline", help="another herald binary to measure beside it (before fair share)")
    parser.add_argument("--backlog", type=int, default=10000)
    parser.add_argument("--tenants", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    builds = [("fair share", args.herald)] + ([("baseline", args.baseline)] if args.baseline else [])
    os.makedirs(run.OUT, exist_ok=True)
    rows = {}
    claims = {}
    with Postgres(durable=True) as postgres:
        # The claim rounds alternate the builds, so that a slower minute of the machine falls on both.
        for _ in range(args.rounds):
            for store in ("SQLite", "PostgreSQL"):
                for name, binary in builds:
                    database = postgres.database() if store == "PostgreSQL" else None
                    claims.setdefault((name, store), []).append(claim_throughput(binary, database, args.backlog, args.tenants))
        for name, binary in builds:
            for store in ("SQLite", "PostgreSQL"):
                rows[(name, store, "claims")] = statistics.median(claims[(name, store)])
                database = postgres.database() if store == "PostgreSQL" else None
                rows[(name, store, "wait")] = b_wait(binary, database)
    lines = [f"# Fair share between tenants ({time.strftime('%Y-%m-%d')}, {run.machine()})", "",
             f"Claim throughput: {args.backlog:,} queued text-only jobs over {args.tenants} tenants, 8 workers, the median "
             f"of {args.rounds} rounds (builds alternating). B's wait: A's 40 posts (one medium each, {JOB_SECONDS} s a PUT), "
             "2 workers, then B's one post.", "",
             "| build | database | jobs/s (rounds) | B's post to B's job started |", "|---|---|---|---|"]
    for name, _ in builds:
        for store in ("SQLite", "PostgreSQL"):
            each = ", ".join(f"{value:,.0f}" for value in claims[(name, store)])
            lines.append(f"| {name} | {store} | **{rows[(name, store, 'claims')]:,.0f}** ({each}) | {rows[(name, store, 'wait')]:.2f} s "
                         f"({rows[(name, store, 'wait')] / JOB_SECONDS:.1f} jobs' time) |")
    if args.baseline:
        lines.append("")
        for store in ("SQLite", "PostgreSQL"):
            ratio = rows[("fair share", store, "claims")] / rows[("baseline", store, "claims")]
            lines.append(f"{store}: fair claim / baseline claim **{ratio:.2f}×** (medians; goal ≥ 0.8×).")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(run.OUT, "fairshare.md"), "w") as out:
        out.write(text)
    run.write_section("fairshare", text)
    print(text)


if __name__ == "__main__":
    main()
