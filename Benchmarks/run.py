#!/usr/bin/env python3
"""`make bench`: Herald measured side by side with the limit and with a Hummingbird 2 peer; writes BENCHMARKS.md.

Every pair is run alternately (A B C A B C ...) for --rounds rounds on this machine, loopback only; the
table gives medians with min and max, and ratios of medians. Release builds use their own scratch paths.

  1. HTTP status poll: wrk on GET /v1/jobs/{id} (a job with 4 uploads) against Herald at its default log level
     (info: access log on, to a file) and at --log-level warning (a second server on a copy of its data), the Hummingbird
     baseline (Benchmarks/hummingbird-baseline) reading the same database, a C libmicrohttpd server doing the
     same read and JSON (Benchmarks/c-status, its body checked byte for byte against Herald's), the same server
     doing Herald's per-request product work too (`status --product`: the key, the rate limits, the request id,
     the access log, the metrics; issue 35's P1 is judged against it), and the C libmicrohttpd limit (Benchmarks/c-hello) answering the same bytes as a constant body; and, in C, the SQLite
     read Herald does for a poll (Benchmarks/sqlite-read), the floor any server reading the job per request adds
     to the limit.
  2. Post creation: wrk POST /v1/posts (text only, durable commit) against the raw sqlite3 insert rate of the
     same rows with the same pragmas (Benchmarks/sqlite-insert).
  3. Parallel publish: 8 media per post to a local S3-compatible server (in this process) that answers each
     PUT after 300 ms; job wall time / slowest upload at --upload-concurrency 1, 4 and 8; then 200 posts x 4
     media end to end.
  4. Cancellation latency: 50 jobs with 4 uploads that the server never answers; from the cancel request to
     every upload's connection closed, as the server sees it.
  5. Memory: peak RSS growth of Herald while it ingests and uploads a 1 GiB media.
  6. Ingest: POST /v1/media of 1 GiB (one streaming curl upload) into Herald and into a C libmicrohttpd server
     that streams the body to a file and fsyncs it (Benchmarks/c-ingest; also with --sha256, Herald's hashing),
     on the data disk and on tmpfs; MB/s and server CPU seconds per GiB.
  7. Publish path: 200 posts x 4 media of 100 bytes by 8 clients, Herald's defaults (file store), from the first
     POST /v1/posts to the last job succeeded: posts/s, job p50/p90, durable commits (GET /metrics) and fsyncs
     (strace, on a second untimed run) per post.
  8. The image: scripts/verify-container builds the Dockerfile unchanged (buildah) and runs its checks (podman);
     then the image's size, each layer's, the binary's symbol table (backtraces name functions) and debug info, and
     cold start: `podman run` on an empty volume to /readyz 200. Left out, with the reason, without podman.
  9. Resumable upload: 1 GiB through /v1/uploads (tus) in 8 MiB PATCHes beside one POST /v1/media of the same file, on
     one Herald: MB/s, server CPU per GiB, peak RSS growth; then bytes sent again after a PATCH cut half way.

Raw outputs go to Benchmarks/out/. Every process and every wrk run has a hard time limit.
"""

import argparse
import base64
import datetime
import hashlib
import json
import math
import os
import re
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from http.client import HTTPConnection

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from herald_support import Herald, Server, create_key, free_port  # noqa: E402
from herald_support.fake_s3 import CREDENTIALS, FakeS3  # noqa: E402

BENCH = os.path.join(ROOT, "Benchmarks")
OUT = os.path.join(BENCH, "out")
CONNECTIONS = 32
PNG = bytes([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 0x0D, 0x49, 0x48, 0x44, 0x52]) + bytes(range(200)) * 20


def log(message):
    print(f"==> {message}", file=sys.stderr, flush=True)


def run(command, cwd=ROOT, timeout=1800):
    log(" ".join(command))
    subprocess.run(command, cwd=cwd, check=True, timeout=timeout, stdout=sys.stderr)


def build(swift=True):
    """Release builds of Herald and the baseline (unless `swift` is false: then the binaries built before are used,
    and a missing baseline leaves its row out), and the C programs."""
    os.makedirs(OUT, exist_ok=True)
    baseline = os.path.join(BENCH, "hummingbird-baseline")
    if swift:
        run(["make", "--no-print-directory", "release"])  # with the profile, as users build it
        run(["swift", "build", "-c", "release", "--scratch-path", ".build-release"], cwd=baseline)
    mhd = subprocess.run(["pkg-config", "--cflags", "--libs", "libmicrohttpd"], check=True, capture_output=True, text=True).stdout.split()
    run(["gcc", "-O2", "-Wall", "-Wextra", os.path.join(BENCH, "c-hello", "hello.c"), "-o", os.path.join(OUT, "hello")] + mhd)
    run(["gcc", "-O2", "-Wall", "-Wextra", os.path.join(BENCH, "c-status", "status.c"), "-o", os.path.join(OUT, "status")] + mhd
        + ["-lsqlite3", "-lcrypto", "-lpthread"])
    # --sha256 is OpenSSL's EVP SHA-256, from libcrypto (Debian libssl-dev); without it, that row is left out.
    crypto = subprocess.run(["pkg-config", "--exists", "libcrypto"]).returncode == 0
    run(["gcc", "-O2", "-Wall", "-Wextra", os.path.join(BENCH, "c-ingest", "ingest.c"), "-o", os.path.join(OUT, "ingest")]
        + mhd + (["-DHAVE_LIBCRYPTO", "-lcrypto"] if crypto else []))
    run(["gcc", "-O2", "-Wall", "-Wextra", os.path.join(BENCH, "sqlite-insert", "insert.c"), "-o", os.path.join(OUT, "insert"), "-lsqlite3"])
    run(["gcc", "-O2", "-Wall", "-Wextra", os.path.join(BENCH, "sqlite-read", "read.c"), "-o", os.path.join(OUT, "read"), "-lsqlite3"])
    binaries = {
        "herald": os.environ.get("HERALD_BIN") or os.path.join(ROOT, ".build-release", "release", "herald"),
        "baseline": os.path.join(baseline, ".build-release", "release", "hummingbird-baseline"),
        "hello": os.path.join(OUT, "hello"),
        "status": os.path.join(OUT, "status"),
        "ingest": os.path.join(OUT, "ingest"),
        "ingest_sha256": crypto,
        "insert": os.path.join(OUT, "insert"),
        "read": os.path.join(OUT, "read"),
    }
    if not os.access(binaries["herald"], os.X_OK):
        raise SystemExit(f"no Herald at {binaries['herald']}: build it, or run without --skip-swift-build")
    return binaries


def status_query(binaries):
    """The status poll's SQL as Herald prepares it (`herald status-statement`), so that the C read runs exactly what Herald runs."""
    return subprocess.run([binaries["herald"], "status-statement"], capture_output=True, text=True, check=True, timeout=60).stdout.strip()


def job_tenant(database, job):
    """The tenant a job belongs to (the key's: ?2 of SQLiteJobStatusReader's statement)."""
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as connection:
        return connection.execute("SELECT tenant FROM jobs WHERE id = ?", (job,)).fetchone()[0]


def sqlite_read(binaries, database, job, seconds, label):
    """CPU µs per job read by the C program, the statement Herald runs (bounded: 10 million reads or `seconds`)."""
    command = [binaries["read"], database, job, "10000000", str(seconds), status_query(binaries), job_tenant(database, job)]
    output = subprocess.run(command, capture_output=True, text=True, check=True, timeout=seconds + 60).stdout
    with open(os.path.join(OUT, f"read-{label}.txt"), "w") as file:
        file.write(output)
    return float(re.search(r"cpu_us_per_read=([\d.]+)", output).group(1))


# The API key of each Herald under test, by port: every /v1/ call needs one (made with `herald keys create` before
# the server starts, as an operator would). http() and wrk() send it; the other servers have none.
KEYS = {}


def herald_serve(binaries, name, data, *flags, log_level="warning", ready_path="/healthz", env=None, rate_limit=0):
    """`herald serve` on 127.0.0.1 with an admin key made for it, and by default no per-key rate limit: the load would
    pass it. `log_level` "warning" (the default here) leaves the access log out; "info" is `herald serve`'s own
    default, access log on (its lines go to the server's stdout, which goes to Benchmarks/out/<name>.log). Started: a
    Herald."""
    key = create_key(binaries["herald"], data, "bench")
    herald = Herald(binaries["herald"], data, "--log-level", log_level, "--rate-limit", str(rate_limit), *flags, name=name,
                    log_path=os.path.join(OUT, f"{name}.log"), env=env).start(ready_path, timeout=60)
    KEYS[herald.port] = key
    return herald


def authorization(url):
    """The Authorization header for a Herald under test, or None."""
    key = KEYS.get(urllib.parse.urlsplit(url).port)
    return f"Bearer {key}" if key else None


def key_headers(url):
    """The headers a request to `url` needs: the key, for a /v1/ path of a server that has one."""
    if authorization(url) and urllib.parse.urlsplit(url).path.startswith("/v1/"):
        return {"Authorization": authorization(url)}
    return {}


def http(method, url, body=None, content_type=None, timeout=30):
    request = urllib.request.Request(url, data=body, method=method, headers=key_headers(url))
    if content_type:
        request.add_header("Content-Type", content_type)
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.status, response.read()


def start_server(name, command, port, ready_path="/healthz"):
    """A server process on 127.0.0.1:port, started (ready once `ready_path` answers 200); its output in
    Benchmarks/out/<name>.log."""
    server = Server(command, port, name=name, log_path=os.path.join(OUT, f"{name}.log"))
    return server.start(ready_path, timeout=60, headers=key_headers(server.url(ready_path)))


def wrk(server, path, seconds, label, script=None):
    """One wrk run: requests/s, p99 latency (ms), server CPU µs per request, non-2xx count."""
    command = ["wrk", "-t1", f"-c{CONNECTIONS}", f"-d{seconds}s", "--latency"]  # -d is command[3]
    if script:
        command += ["-s", script]
    if authorization(server.url(path)):
        command += ["-H", f"Authorization: {authorization(server.url(path))}"]
    command.append(server.url(path))
    # One untimed second first, as healthz.sh does: connections opened, caches and pools warm.
    subprocess.run(command[:3] + ["-d1s"] + command[4:], capture_output=True, check=True, timeout=60)
    cpu_before = server.cpu_seconds()
    output = subprocess.run(command, capture_output=True, text=True, check=True, timeout=seconds + 60).stdout
    cpu = server.cpu_seconds() - cpu_before
    with open(os.path.join(OUT, f"wrk-{label}.txt"), "w") as file:
        file.write(output)
    requests = int(re.search(r"(\d+) requests in", output).group(1))
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)\b", output)
    p99_ms = float(p99.group(1)) * {"us": 0.001, "ms": 1, "s": 1000}[p99.group(2)]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    return {
        "rate": rate,
        "p99_ms": p99_ms,
        "cpu_us": cpu / max(requests, 1) * 1e6,
        "non2xx": int(errors.group(1)) if errors else 0,
    }


def summary(values):
    return statistics.median(values), min(values), max(values)


def cell(values, digits=0):
    median, low, high = summary(values)
    return f"{median:,.{digits}f} ({low:,.{digits}f}–{high:,.{digits}f})"


# MARK: 1. HTTP status poll

HERALD = "Herald"
HERALD_QUIET = "Herald (--log-level warning)"
HERALD_TRACED = "Herald (tracing on, every request sampled)"
HUMMINGBIRD = "Hummingbird 2 + GRDB"
C_STATUS = "C libmicrohttpd + SQLite (same read and JSON)"
C_PRODUCT = "C libmicrohttpd + SQLite (same read and JSON, Herald's product work)"
C_LIMIT = "C libmicrohttpd (constant body)"
# The status poll's per-key limit (issue 35: "the default configuration with a key"): a bucket taken on every request,
# as with the default of 100 a second, but so large that the load never empties it. The C product-work server too.
POLL_RATE_LIMIT = 1_000_000_000


def copy_data_directory(source):
    """A copy of a running Herald's data directory for a second server (two cannot share one: herald.lock): every
    file but the lock and the database as it is, and the database through SQLite's online backup, one consistent
    snapshot whatever the running server writes meanwhile (a plain copy of herald.sqlite and its -wal could catch a
    commit half written)."""
    target = tempfile.mkdtemp(prefix="herald-bench-")

    def skipped(directory, names):
        return [name for name in names if name == "herald.lock" or name.startswith("herald.sqlite")] if directory == source else []

    shutil.copytree(source, target, ignore=skipped, dirs_exist_ok=True)
    original = sqlite3.connect(f"file:{os.path.join(source, 'herald.sqlite')}?mode=ro", uri=True)
    copy = sqlite3.connect(os.path.join(target, "herald.sqlite"))
    try:
        original.backup(copy)
    finally:
        copy.close()
        original.close()
    return target


def status_poll(binaries, rounds, seconds):
    data = tempfile.mkdtemp(prefix="herald-bench-")
    # `herald serve`'s default log level, info: one access log line a request, to a file as a container's log would go.
    herald = herald_serve(binaries, "herald-poll", data, log_level="info", rate_limit=POLL_RATE_LIMIT)
    servers = [herald]
    directories = [data]
    try:
        media = []
        for index in range(4):
            _, body = http("POST", herald.url("/v1/media"), PNG + bytes([index]) * 100, "image/png")
            media.append(json.loads(body)["id"])
        _, body = http("POST", herald.url("/v1/posts"), json.dumps({"text": "benchmark", "media_ids": media}).encode(), "application/json")
        job = json.loads(body)["job"]["id"]
        _, body = http("GET", herald.url(f"/v1/jobs/{job}?wait=30"))
        answer = json.loads(body)
        assert answer["state"] == "succeeded" and len(answer["uploads"]) == 4, answer
        path = f"/v1/jobs/{job}"

        database = os.path.join(data, "herald.sqlite")
        _, herald_body = http("GET", herald.url(path))
        sizes = {HERALD: len(herald_body)}
        targets = [(HERALD, herald)]
        # The same job at --log-level warning (no access log): a second Herald on a copy of the first one's data
        # directory, taken once the job has succeeded, so that it answers the same job with the same bytes.
        quiet_data = copy_data_directory(data)
        directories.append(quiet_data)
        quiet = herald_serve(binaries, "herald-poll-warning", quiet_data, rate_limit=POLL_RATE_LIMIT)
        servers.append(quiet)
        _, quiet_body = http("GET", quiet.url(path))
        assert quiet_body == herald_body, f"the second Herald answers the first one's bytes:\n{herald_body!r}\n{quiet_body!r}"
        sizes[HERALD_QUIET] = len(quiet_body)
        targets.append((HERALD_QUIET, quiet))
        # Issue 34: the same at info with tracing on, every request a sampled root span, exported over OTLP/HTTP to a
        # collector that reads each batch and answers 200 without decoding it (Tests/Support/otlp_receiver.py --discard).
        port = free_port()
        collector = start_server("otlp-collector", ["python3", os.path.join(ROOT, "Tests", "Support", "otlp_receiver.py"), "--port", str(port),
                                                    "--discard"], port, ready_path="/_control/exports")
        servers.append(collector)
        traced_data = copy_data_directory(data)
        directories.append(traced_data)
        traced = herald_serve(binaries, "herald-poll-traced", traced_data, "--otlp-endpoint", collector.url(""), log_level="info",
                              rate_limit=POLL_RATE_LIMIT)
        servers.append(traced)
        _, traced_body = http("GET", traced.url(path))
        assert traced_body == herald_body, "the traced Herald answers the same bytes"
        sizes[HERALD_TRACED] = len(traced_body)
        targets.append((HERALD_TRACED, traced))
        if os.access(binaries["baseline"], os.X_OK):
            baseline = start_server("baseline-poll", [binaries["baseline"], "--db", database, "--host", "127.0.0.1", "--port", str(port := free_port())], port, ready_path=path)
            servers.append(baseline)
            _, baseline_body = http("GET", baseline.url(path))
            assert json.loads(herald_body) == json.loads(baseline_body), "the baseline answers the same job object"
            sizes[HUMMINGBIRD] = len(baseline_body)
            targets.append((HUMMINGBIRD, baseline))
        else:
            log(f"status poll: no {binaries['baseline']} (--skip-swift-build): the Hummingbird row is left out")
        # The C server checks that a key is sent, not which: it gets Herald's, so that wrk's requests are the same bytes.
        port = free_port()
        KEYS[port] = KEYS[herald.port]
        c_status = start_server("c-status-poll", [binaries["status"], str(port), database, job_tenant(database, job), status_query(binaries)], port, ready_path=path)
        servers.append(c_status)
        _, c_body = http("GET", c_status.url(path))
        assert c_body == herald_body, f"the C status server answers Herald's bytes:\n{herald_body!r}\n{c_body!r}"
        sizes[C_STATUS] = len(c_body)
        targets.append((C_STATUS, c_status))
        # The same, with Herald's per-request product work (issue 35): it checks the key against Herald's `keys` table.
        port = free_port()
        KEYS[port] = KEYS[herald.port]
        c_product = start_server("c-status-product-poll", [binaries["status"], "--product", "--rate-limit", str(POLL_RATE_LIMIT), str(port),
                                                           database, job_tenant(database, job), status_query(binaries)], port, ready_path=path)
        servers.append(c_product)
        _, c_product_body = http("GET", c_product.url(path))
        assert c_product_body == herald_body, f"the C product-work server answers Herald's bytes:\n{herald_body!r}\n{c_product_body!r}"
        sizes[C_PRODUCT] = len(c_product_body)
        targets.append((C_PRODUCT, c_product))
        body_file = os.path.join(OUT, "job.json")
        with open(body_file, "wb") as file:
            file.write(herald_body)
        limit = start_server("c-limit-poll", [binaries["hello"], str(port := free_port()), "1", body_file], port, ready_path=path)
        servers.append(limit)
        sizes[C_LIMIT] = len(herald_body)
        targets.append((C_LIMIT, limit))

        results = {name: [] for name in sizes}
        reads = []
        for round_index in range(rounds):
            for name, server in targets:
                log(f"status poll, round {round_index + 1}/{rounds}: {name}")
                results[name].append(wrk(server, path, seconds, f"poll-{server.name}-{round_index + 1}"))
            log(f"status poll, round {round_index + 1}/{rounds}: the SQLite read alone (C)")
            reads.append(sqlite_read(binaries, database, job, seconds, f"poll-{round_index + 1}"))
        # What the traced server sent, and what it lost (a span dropped is one the collector did not get).
        _, metrics = http("GET", traced.url("/metrics"))
        dropped = sum(float(line.rsplit(" ", 1)[1]) for line in metrics.decode().splitlines()
                      if line.startswith("herald_trace_spans_dropped_total"))
        _, exports = http("GET", collector.url("/_control/exports"))
        tracing = {"dropped": dropped, **json.loads(exports)}
        return results, sizes, reads, tracing
    finally:
        for server in servers:
            server.stop()
        for directory in directories:
            shutil.rmtree(directory, ignore_errors=True)


# MARK: 2. Post creation


def post_creation(binaries, rounds, seconds):
    script = os.path.join(OUT, "post.lua")
    with open(script, "w") as file:
        file.write('wrk.method = "POST"\nwrk.body = \'{"text": "hello from wrk"}\'\nwrk.headers["Content-Type"] = "application/json"\n')
    migrations = sorted(os.path.join(ROOT, "Migrations", name) for name in os.listdir(os.path.join(ROOT, "Migrations")) if name.endswith(".sql"))
    results = {"Herald POST /v1/posts": [], "sqlite3 C insert (limit)": []}
    for round_index in range(rounds):
        data = tempfile.mkdtemp(prefix="herald-bench-")
        log(f"post creation, round {round_index + 1}/{rounds}: Herald")
        # The queue is paused so that the runner's publishing does not compete with the inserts being measured.
        herald = herald_serve(binaries, "herald-post", data)
        try:
            http("POST", herald.url("/v1/queue/pause"))
            results["Herald POST /v1/posts"].append(wrk(herald, "/v1/posts", seconds, f"post-herald-{round_index + 1}", script=script))
        finally:
            herald.stop()
        log(f"post creation, round {round_index + 1}/{rounds}: sqlite3 C insert")
        database = os.path.join(tempfile.mkdtemp(prefix="herald-bench-"), "limit.sqlite")
        output = subprocess.run([binaries["insert"], database, "10000000", str(seconds)] + migrations, capture_output=True, text=True, check=True, timeout=seconds + 60).stdout
        rate = float(re.search(r"posts_per_second=([\d.]+)", output).group(1))
        results["sqlite3 C insert (limit)"].append({"rate": rate})
    return results


# MARK: A local S3-compatible server


def fake_s3(latency=0.3, hang=False):
    """scripts/herald_support/fake_s3.py in this process, keeping nothing: HEAD bucket 200; a PUT reads the body,
    then answers `latency` seconds after its head arrived or, with `hang`, never: it waits for the client to close
    and records when. DELETE 204. Its threads share this process's monotonic clock with the driver, so latencies
    need no sync."""
    return FakeS3(None, bucket="bench", latency=latency, hang=hang).start()


def s3_herald(binaries, fake, name, *flags):
    data = tempfile.mkdtemp(prefix="herald-bench-")
    return herald_serve(binaries, name, data, "--store", fake.store_url, *flags, ready_path="/readyz", env=CREDENTIALS)


def upload(server, count, size=len(PNG) + 100):
    ids = []
    for index in range(count):
        body = PNG + bytes([index % 256]) * (size - len(PNG))
        ids.append(json.loads(http("POST", server.url("/v1/media"), body, "image/png")[1])["id"])
    return ids


def create_post(server, media):
    _, body = http("POST", server.url("/v1/posts"), json.dumps({"text": "benchmark", "media_ids": media}).encode(), "application/json")
    return json.loads(body)["job"]["id"]


def wait_job(server, job):
    for _ in range(10):  # ?wait= holds up to 30 s; ten of them bound the wait at five minutes
        answer = json.loads(http("GET", server.url(f"/v1/jobs/{job}?wait=30"), timeout=40)[1])
        if answer["done"]:
            return answer
    raise RuntimeError(f"job {job} did not finish")


def timestamp(text):
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


# MARK: 3. Parallel publish


def parallel_publish(binaries, rounds):
    fake = fake_s3()
    curve = {1: [], 4: [], 8: []}
    try:
        for round_index in range(rounds):
            for concurrency in curve:
                log(f"parallel publish, round {round_index + 1}/{rounds}: 8 media at --upload-concurrency {concurrency}")
                herald = s3_herald(binaries, fake, f"herald-parallel-{concurrency}", "--upload-concurrency", str(concurrency))
                try:
                    media = upload(herald, 8)
                    fake.clear_puts()
                    job = wait_job(herald, create_post(herald, media))
                    assert job["state"] == "succeeded", job
                    wall = timestamp(job["finished_at"]) - timestamp(job["started_at"])
                    slowest = max(answered - received for _, received, answered in list(fake.puts))
                    curve[concurrency].append({"wall": wall, "slowest": slowest, "ratio": wall / slowest})
                finally:
                    herald.stop()
        log("parallel publish: 200 posts x 4 media, end to end")
        throughput = []
        for round_index in range(rounds):
            herald = s3_herald(binaries, fake, "herald-throughput")
            try:
                http("POST", herald.url("/v1/queue/pause"))
                media = upload(herald, 800)
                jobs = [create_post(herald, media[index * 4 : index * 4 + 4]) for index in range(200)]
                started = time.monotonic()
                http("POST", herald.url("/v1/queue/resume"))
                for job in jobs:
                    assert wait_job(herald, job)["state"] == "succeeded"
                throughput.append({"rate": 200 / (time.monotonic() - started)})
            finally:
                herald.stop()
        return curve, throughput
    finally:
        fake.stop()


# MARK: 4. Cancellation latency


def cancel_latency(binaries, jobs=50):
    fake = fake_s3(hang=True)
    latencies = []
    herald = s3_herald(binaries, fake, "herald-cancel", "--upload-concurrency", "4")
    try:
        for index in range(jobs):
            media = upload(herald, 4)
            keys = {f"media/{id}.png" for id in media}
            job = create_post(herald, media)
            fake.wait(lambda fake: keys <= fake.received.keys())
            cancelled = time.monotonic()
            http("POST", herald.url(f"/v1/jobs/{job}/cancel"))
            fake.wait(lambda fake: keys <= fake.closed.keys())
            latencies.append(max(fake.closed[key] for key in keys) - cancelled)
            assert wait_job(herald, job)["state"] == "cancelled"
        log(f"cancellation latency: {jobs} jobs measured")
        return latencies
    finally:
        herald.stop()
        fake.stop()


# MARK: 5. Memory


def mp4_file(path, size):
    """`size` bytes: a header MP4 sniffing accepts, then pseudo-random blocks."""
    with open(path, "wb") as file:
        block = os.urandom(1 << 20)
        file.write(b"\x00\x00\x00\x18ftypmp42" + bytes(12))
        written = 24
        while written < size:
            piece = block[: min(len(block), size - written)]
            file.write(piece)
            written += len(piece)
    return path


def memory(binaries, size=1 << 30):
    fake = fake_s3(latency=0)
    path = mp4_file(os.path.join(tempfile.mkdtemp(prefix="herald-bench-"), "big.mp4"), size)
    herald = s3_herald(binaries, fake, "herald-memory", "--max-media-bytes", str(size * 2))
    try:
        http("GET", herald.url("/healthz"))
        before = herald.rss_kib("VmRSS")
        log("memory: ingesting 1 GiB over HTTP")
        output = subprocess.run(
            # -T streams the file (--data-binary would read it whole into curl's memory).
            ["curl", "-sS", "--fail-with-body", "-X", "POST", "-H", "Content-Type: video/mp4", "-H", f"Authorization: {authorization(herald.url('/v1/media'))}",
             "-T", path, herald.url("/v1/media")],
            capture_output=True, check=True, timeout=600,
        ).stdout
        media = json.loads(output)["id"]
        after_ingest = herald.rss_kib("VmHWM")
        log("memory: uploading it to the S3 server")
        job = wait_job(herald, create_post(herald, [media]))
        assert job["state"] == "succeeded", job
        assert fake.bytes_received == size, f"the S3 server received {fake.bytes_received} bytes"
        peak = herald.rss_kib("VmHWM")
        return {"before": before, "after_ingest": after_ingest, "peak": peak, "growth": peak - before}
    finally:
        herald.stop()
        fake.stop()
        os.remove(path)


# MARK: 6. Ingest

INGEST_HERALD = "Herald"
INGEST_C = "C libmicrohttpd (write, fsync)"
INGEST_C_SHA = "C libmicrohttpd + SHA-256 (--sha256)"
INGEST_HEADROOM = 256 << 20


def mount_of(path):
    """(mount point, filesystem type, source) of the mount holding `path`: the longest mount point prefixing it."""
    path = os.path.realpath(path)
    best = ("", "?", "?")
    for line in open("/proc/self/mounts"):
        source, point, kind = line.split()[:3]
        point = point.replace("\\040", " ")
        if (path == point or path.startswith(point.rstrip("/") + "/")) and len(point) >= len(best[0]):
            best = (point, kind, source)
    return best


def free_bytes(path):
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


def post_media(server, path, size):
    """One streaming upload of the file at `path` (curl -T: read as it is sent, never whole in memory):
    (seconds from the request's start to the response's end as curl times it, server CPU seconds, media id)."""
    command = [
        "curl", "-sS", "--fail-with-body", "--max-time", "600", "-X", "POST", "-H", "Content-Type: video/mp4",
        "-H", f"Authorization: {authorization(server.url('/v1/media'))}", "-T", path, "-w", "\n%{time_total}", server.url("/v1/media"),
    ]
    cpu_before = server.cpu_seconds()
    output = subprocess.run(command, capture_output=True, text=True, check=True, timeout=660).stdout
    cpu = server.cpu_seconds() - cpu_before
    body, seconds = output.rsplit("\n", 1)
    answer = json.loads(body)
    assert answer["size"] == size, answer
    return float(seconds), cpu, answer["id"]


def ingest(binaries, rounds, size, data_disk):
    """POST /v1/media of `size` bytes into Herald and the C ingest server (plain, and --sha256), alternately, on the
    data disk and on tmpfs: MB/s and server CPU s/GiB. Each medium is removed after its round."""
    body_directory = tempfile.mkdtemp(prefix="herald-bench-", dir=data_disk)
    places = {}
    try:
        log(f"ingest: writing a {size:,} byte MP4 body to {body_directory}")
        body = mp4_file(os.path.join(body_directory, "body.mp4"), size)
        for place, root in [("data disk", data_disk), ("tmpfs", "/dev/shm")]:
            # One medium at a time: each is removed before the next upload.
            entry = places[place] = {**place_check(place, root, size + INGEST_HEADROOM), "runs": {}}
            if entry["skipped"]:
                log(f"ingest on {place}: skipped, {entry['skipped']}")
                continue
            entry["runs"] = ingest_place(binaries, rounds, size, body, root, place)
    finally:
        shutil.rmtree(body_directory, ignore_errors=True)
    return {"size": size, "rounds": rounds, "places": places}


def place_check(place, root, needed):
    """Where a measurement on `place` (the data disk, or tmpfs) writes: {root, mount, skipped}, `skipped` the reason it
    cannot (not a tmpfs, too little room: on tmpfs, room is memory) or None."""
    point, kind, source = mount_of(root) if os.path.isdir(root) else ("", "?", "?")
    available = next(int(line.split()[1]) for line in open("/proc/meminfo") if line.startswith("MemAvailable")) << 10
    free = free_bytes(root) if os.path.isdir(root) else 0
    if place == "tmpfs" and kind != "tmpfs":
        skipped = f"{root} is not a tmpfs ({kind})"
    elif place == "tmpfs" and available < needed:
        skipped = f"{available / 2**20:,.0f} MiB of memory available, {needed / 2**20:,.0f} MiB needed"
    elif free < needed:
        skipped = f"{root} has {free / 2**20:,.0f} MiB free, {needed / 2**20:,.0f} MiB needed"
    else:
        skipped = None
    return {"root": root, "mount": f"{kind} {source} at {point}", "skipped": skipped}


def ingest_place(binaries, rounds, size, body, root, place):
    slug = place.replace(" ", "-")
    directories = []
    servers = []
    try:
        data = tempfile.mkdtemp(prefix="herald-bench-", dir=root)
        directories.append(data)
        # `herald serve`'s defaults but for the body limit, and no free-space reserve: a small disk would answer 507.
        herald = herald_serve(binaries, f"herald-ingest-{slug}", data, "--max-media-bytes", str(size), "--min-free-disk", "0")
        servers.append(herald)
        staging = os.path.join(data, "staging")

        def remove_from_herald(media):
            assert http("DELETE", herald.url(f"/v1/media/{media}"))[0] == 204
            assert not any(name.startswith(media) for name in os.listdir(staging)), "Herald removed the staged file"

        contenders = [(INGEST_HERALD, herald, remove_from_herald)]
        if not binaries["ingest_sha256"]:
            log("ingest: no libcrypto (apt-get install libssl-dev): the C + SHA-256 row is left out")
        for name, flags in [(INGEST_C, []), (INGEST_C_SHA, ["--sha256"])][: 2 if binaries["ingest_sha256"] else 1]:
            directory = tempfile.mkdtemp(prefix="herald-bench-", dir=root)
            directories.append(directory)
            port = free_port()
            KEYS[port] = KEYS[herald.port]  # the C server checks that a key is sent, not which
            server = start_server(f"c-ingest-{slug}{flags[0][1:] if flags else ''}", [binaries["ingest"], *flags, str(port), directory], port)
            servers.append(server)

            def remove_file(media, directory=directory):
                os.remove(os.path.join(directory, f"{media}.mp4"))
                assert not os.listdir(directory), os.listdir(directory)

            contenders.append((name, server, remove_file))
        runs = {name: [] for name, _, _ in contenders}
        for round_index in range(rounds):
            for name, server, remove in contenders:
                log(f"ingest on {place}, round {round_index + 1}/{rounds}: {name}")
                seconds, cpu, media = post_media(server, body, size)
                remove(media)
                runs[name].append({"seconds": seconds, "mbps": size / 1e6 / seconds, "cpu_per_gib": cpu / (size / 2**30)})
        return runs
    finally:
        for server in servers:
            server.stop()
        for directory in directories:  # on tmpfs, what is left holds memory
            shutil.rmtree(directory, ignore_errors=True)


# MARK: 9. Resumable upload

TUS_CHUNK = 8 << 20
TUS_POST = "POST /v1/media (curl -T)"
TUS_PATCH = "/v1/uploads, 8 MiB PATCHes"


class TusClient:
    """A tus 1.0 client on one keep-alive connection, as tus clients are: each PATCH's body goes out with sendfile(2)
    from the file (never whole in memory). It counts every body byte it sends, so the bytes sent again after a drop
    are what it sent beyond the file's size."""

    def __init__(self, server):
        self.server = server
        self.connection = None
        self.sent = 0

    def _connection(self):
        if self.connection is None:
            self.connection = HTTPConnection("127.0.0.1", self.server.port, timeout=600)
        return self.connection

    def _headers(self, **extra):
        return {"Tus-Resumable": "1.0.0", "Authorization": authorization(self.server.url("/v1/uploads")), **extra}

    def request(self, method, path, headers):
        connection = self._connection()
        connection.request(method, path, headers=headers)
        response = connection.getresponse()
        body = response.read()
        return response, body

    def create(self, size, filetype):
        response, body = self.request("POST", "/v1/uploads", self._headers(**{
            "Upload-Length": str(size), "Upload-Metadata": "filetype " + base64.b64encode(filetype.encode()).decode()}))
        assert response.status == 201, (response.status, body)
        return urllib.parse.urlsplit(response.getheader("Location")).path

    def offset(self, upload):
        """HEAD: how far the server's durable bytes reach."""
        response, _ = self.request("HEAD", upload, self._headers())
        assert response.status == 200, response.status
        return int(response.getheader("Upload-Offset"))

    def patch(self, upload, file, offset, count, cut_after=None):
        """One PATCH of `count` bytes of `file` from `offset`: the new offset, or None when the connection was dropped
        after `cut_after` body bytes (as a phone losing its network) or the upload was locked (423)."""
        connection = self._connection()
        connection.putrequest("PATCH", upload, skip_accept_encoding=True)
        for name, value in self._headers(**{"Upload-Offset": str(offset), "Content-Type": "application/offset+octet-stream",
                                             "Content-Length": str(count)}).items():
            connection.putheader(name, value)
        connection.endheaders()
        if cut_after is not None:
            self.sent += connection.sock.sendfile(file, offset, cut_after)
            connection.sock.shutdown(socket.SHUT_RDWR)
            connection.close()
            self.connection = None
            return None
        self.sent += connection.sock.sendfile(file, offset, count)
        response = connection.getresponse()
        body = response.read()
        if response.status == 423:  # the dropped PATCH is still saving what it received: ask again, as tus clients do
            return None
        assert response.status == 204, (response.status, body)
        return int(response.getheader("Upload-Offset"))

    def upload(self, path, size, filetype="video/mp4", drop_at=None):
        """Uploads the file in TUS_CHUNK PATCHes; with `drop_at`, the PATCH that starts at or after that offset is cut
        half way, then the client asks HEAD and sends the rest. The upload's id (its media's)."""
        upload = self.create(size, filetype)
        offset, waits = 0, 0
        with open(path, "rb") as file:
            while offset < size:
                count = min(TUS_CHUNK, size - offset)
                cut = count // 2 if drop_at is not None and offset >= drop_at else None
                drop_at = None if cut else drop_at
                reached = self.patch(upload, file, offset, count, cut_after=cut)
                if reached is None:
                    waits += 1
                    assert waits < 100, "the upload stayed locked"
                    time.sleep(0.05)
                    reached = self.offset(upload)
                offset = reached
        if self.connection:
            self.connection.close()
        return upload.rsplit("/", 1)[1]


def reset_peak(server):
    """Starts the peak RSS (VmHWM) over from the current RSS (Linux's clear_refs 5), so each upload's peak is its own."""
    with open(f"/proc/{server.pid}/clear_refs", "w") as file:
        file.write("5")


def resumable(binaries, rounds, size, data_disk):
    """`size` bytes through /v1/uploads in 8 MiB PATCHes against one POST /v1/media of the same file, alternately, on one
    Herald (`herald serve` defaults but the body limit and the disk reserve), its data directory on the data disk, then
    on tmpfs (no disk flush: what the protocol itself costs): MB/s, server CPU per GiB, the peak RSS over each upload;
    then, on the data disk, one upload whose PATCH is cut half way at the middle: bytes sent again."""
    places = {}
    for place, root in [("data disk", data_disk), ("tmpfs", "/dev/shm")]:
        places[place] = place_check(place, root, 2 * size + INGEST_HEADROOM)  # the file sent and the media it becomes
        if places[place]["skipped"]:
            log(f"resumable on {place}: skipped, {places[place]['skipped']}")
            continue
        places[place].update(resumable_place(binaries, rounds, size, root, place, resume=place == "data disk"))
    return {"size": size, "rounds": rounds, "places": places}


def resumable_place(binaries, rounds, size, root, place, resume):
    directory = tempfile.mkdtemp(prefix="herald-bench-", dir=root)
    try:
        log(f"resumable on {place}: writing a {size:,} byte MP4 body to {directory}")
        body = mp4_file(os.path.join(directory, "body.mp4"), size)
        data = os.path.join(directory, "data")
        os.mkdir(data)
        herald = herald_serve(binaries, f"herald-resumable-{place.replace(' ', '-')}", data, "--max-media-bytes", str(size),
                              "--min-free-disk", "0")
        runs = {TUS_POST: [], TUS_PATCH: []}
        resent = None
        try:
            for round_index in range(rounds):
                for name in runs:
                    log(f"resumable on {place}, round {round_index + 1}/{rounds}: {name}")
                    reset_peak(herald)
                    before = herald.rss_kib("VmRSS")
                    if name == TUS_POST:
                        seconds, cpu, media = post_media(herald, body, size)
                    else:
                        cpu_before, start = herald.cpu_seconds(), time.monotonic()
                        media = TusClient(herald).upload(body, size)
                        seconds, cpu = time.monotonic() - start, herald.cpu_seconds() - cpu_before
                    growth = herald.rss_kib("VmHWM") - before
                    status, answer = http("GET", herald.url(f"/v1/media/{media}"))
                    assert status == 200 and json.loads(answer)["size"] == size, answer
                    assert http("DELETE", herald.url(f"/v1/media/{media}"))[0] == 204
                    runs[name].append({"seconds": seconds, "mbps": size / 1e6 / seconds, "cpu_per_gib": cpu / (size / 2**30),
                                       "growth_mib": growth / 1024})
            if resume:
                log(f"resumable on {place}: one upload cut half way through a PATCH at the middle, then resumed")
                client = TusClient(herald)
                media = client.upload(body, size, drop_at=size // 2)
                status, answer = http("GET", herald.url(f"/v1/media/{media}"))
                digest = hashlib.sha256()
                with open(body, "rb") as file:
                    for block in iter(lambda: file.read(1 << 20), b""):
                        digest.update(block)
                medium = json.loads(answer)
                assert status == 200 and medium["size"] == size and medium["sha256"] == digest.hexdigest(), medium
                resent = client.sent - size
        finally:
            herald.stop()
        return {"runs": runs, "resent": resent}
    finally:
        shutil.rmtree(directory, ignore_errors=True)


# MARK: 7. Publish path


PUBLISH_CLIENTS = 8
PUBLISH_MEDIA_PER_POST = 4
PUBLISH_MEDIA_BYTES = 100
SYNC_CALLS = ["fsync", "fdatasync", "sync_file_range"]


def small_png(index):
    """PUBLISH_MEDIA_BYTES bytes: the PNG signature, the index (every medium distinct), filler."""
    head = PNG[:8] + index.to_bytes(4, "big")
    return head + bytes([index % 251]) * (PUBLISH_MEDIA_BYTES - len(head))


def in_threads(work, clients, limit, what):
    """`work(number)` in `clients` threads at once, each joined within `limit` seconds; raises with the first error (or
    when time ran out), naming `what`."""
    errors = []

    def thread_body(number):
        try:
            work(number)
        except Exception as error:  # reported below, in the caller's thread
            errors.append(error)

    threads = [threading.Thread(target=thread_body, args=(number,), daemon=True) for number in range(clients)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + limit
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    if errors or any(thread.is_alive() for thread in threads):
        raise RuntimeError(f"{what} failed: {errors[:1] or 'out of time'}")


def upload_small(server, count, clients=PUBLISH_CLIENTS):
    """`count` small PNGs, posted by `clients` threads (not timed): their ids, in order."""
    ids = [None] * count
    errors = []

    def client(first):
        try:
            for index in range(first, count, clients):
                ids[index] = json.loads(http("POST", server.url("/v1/media"), small_png(index), "image/png")[1])["id"]
        except Exception as error:  # reported below, in the driver's thread
            errors.append(error)

    threads = [threading.Thread(target=client, args=(first,), daemon=True) for first in range(clients)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 300
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    if errors or any(thread.is_alive() for thread in threads):
        raise RuntimeError(f"uploading {count} media failed: {errors[:1] or 'out of time'}")
    return ids


class KeptAlive:
    """One client thread's keep-alive connection to a Herald under test (http.client reopens it after a close)."""

    def __init__(self, server):
        self.server = server
        self.connection = HTTPConnection("127.0.0.1", server.port, timeout=40)

    def request(self, method, path, body=None):
        headers = {"Authorization": authorization(self.server.url(path))}
        if body is not None:
            headers["Content-Type"] = "application/json"
        self.connection.request(method, path, body=body, headers=headers)
        response = self.connection.getresponse()
        data = response.read()
        if response.status >= 300:
            raise RuntimeError(f"{method} {path}: {response.status} {data[:300]!r}")
        return json.loads(data)

    def close(self):
        self.connection.close()


def publish_workload(server, media, posts, clients=PUBLISH_CLIENTS, limit=900):
    """`posts` posts of PUBLISH_MEDIA_PER_POST media each, created by `clients` threads as fast as they can (each its
    share, one after the other, on a keep-alive connection), then each thread long-polls its jobs (`GET
    /v1/jobs/{id}?wait=30`, ten at most a job) until done. Returns (seconds from the first POST /v1/posts sent to
    the last job seen done, [the job objects as last seen])."""
    start = threading.Barrier(clients + 1)
    sent = [None] * clients
    seen = [None] * clients
    jobs = [None] * posts
    errors = []

    def client(number):
        connection = KeptAlive(server)
        try:
            start.wait(timeout=60)
            mine = list(range(number, posts, clients))
            ids = {}
            sent[number] = time.monotonic()
            for index in mine:
                chosen = media[index * PUBLISH_MEDIA_PER_POST : (index + 1) * PUBLISH_MEDIA_PER_POST]
                body = json.dumps({"text": f"benchmark {index}", "media_ids": chosen}).encode()
                ids[index] = connection.request("POST", "/v1/posts", body)["job"]["id"]
            for index in mine:
                for _ in range(10):  # ?wait= holds up to 30 s: ten bound a job's wait at five minutes
                    job = connection.request("GET", f"/v1/jobs/{ids[index]}?wait=30")
                    if job["done"]:
                        break
                jobs[index] = job
            seen[number] = time.monotonic()
        except Exception as error:  # reported below, in the driver's thread
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=client, args=(number,), daemon=True) for number in range(clients)]
    for thread in threads:
        thread.start()
    start.wait(timeout=60)
    deadline = time.monotonic() + limit
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    if errors or any(thread.is_alive() for thread in threads):
        raise RuntimeError(f"the publish workload failed: {errors[:1] or f'not done within {limit} s'}")
    not_succeeded = [job for job in jobs if job["state"] != "succeeded"]
    assert not not_succeeded, f"{len(not_succeeded)} jobs did not succeed, e.g. {not_succeeded[0]}"
    return max(seen) - min(sent), jobs


def commit_counts(server):
    """Commits so far (`herald_database_commits_total` in GET /metrics; every one is durable), or None when the
    binary has no such metric."""
    text = http("GET", server.url("/metrics"))[1].decode()
    counts = [float(match.group(1)) for line in text.splitlines()
              if (match := re.match(r"herald_database_commits_total(?:\{.*\})?\s+(\S+)", line))]
    return sum(counts) if counts else None


def tasks_traced_by(pid, tracer):
    """Whether every thread of `pid` has `tracer` as its TracerPid."""
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            status = open(f"/proc/{pid}/task/{task}/status").read()
            if int(re.search(r"TracerPid:\s+(\d+)", status).group(1)) != tracer:
                return False
        return True
    except (FileNotFoundError, ProcessLookupError):
        return False


def store_kind(path, data):
    """What a synced descriptor is, from its path as strace -y prints it."""
    if path.endswith("-wal"):
        return "WAL"
    if path.endswith("herald.sqlite"):
        return "database"
    if path.startswith(os.path.join(data, "objects")):
        return "objects (the file store)"
    if path.startswith(os.path.join(data, "staging")):
        return "staging"
    return "other"


def traced_syncs(server, data, workload, label):
    """Runs `workload()` with strace attached to every thread of the server (`-f -C -y`: the summary of
    SYNC_CALLS, and each call with its descriptor's path), detached right after. ({call: count}, {kind: count}), or
    a string saying why there is no count (no strace, or no ptrace here): then the workload is not run."""
    if not shutil.which("strace"):
        return "no strace (apt-get install strace)"
    output = os.path.join(OUT, f"strace-{label}.txt")
    command = ["strace", "-f", "-C", "-y", "-e", f"trace={','.join(SYNC_CALLS)}", "-o", output, "-p", str(server.process.pid)]
    log(" ".join(command))
    tracer = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not tasks_traced_by(server.process.pid, tracer.pid):
            if tracer.poll() is not None or time.monotonic() > deadline:
                return f"strace did not attach to {server.name} (exit status {tracer.poll()}; is ptrace allowed?)"
            time.sleep(0.05)
        workload()
    finally:
        if tracer.poll() is None:
            tracer.send_signal(signal.SIGINT)  # detaches and writes the summary
        try:
            tracer.wait(timeout=60)
        except subprocess.TimeoutExpired:
            tracer.kill()
            tracer.wait()
    text = open(output).read()
    calls = dict.fromkeys(SYNC_CALLS, 0)
    for line in text.splitlines():  # the summary: % time, seconds, usecs/call, calls, [errors,] syscall
        fields = line.split()
        if len(fields) in (5, 6) and fields[-1] in calls and fields[3].isdigit():
            calls[fields[-1]] = int(fields[3])
    kinds = {}
    for match in re.finditer(rf"\b(?:{'|'.join(SYNC_CALLS)})\((\d+)<([^>]*)>", text):
        kind = store_kind(match.group(2), data)
        kinds[kind] = kinds.get(kind, 0) + 1
    return calls, kinds


def percentile(values, fraction):
    """Nearest rank."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(len(ordered) * fraction) - 1))]


def publish_path(binaries, rounds, posts):
    """Issue 18's P7: `posts` posts x 4 media of 100 bytes by 8 clients against Herald's defaults (file store under
    its data directory, 8 workers, 4 uploads at once), from POST /v1/posts to every job succeeded; then the same
    again under strace (not timed) for the fsyncs. A fresh data directory each round."""
    runs = []
    for round_index in range(rounds):
        data = tempfile.mkdtemp(prefix="herald-bench-")
        herald = herald_serve(binaries, "herald-publish", data, log_level="info", ready_path="/readyz")
        try:
            log(f"publish path, round {round_index + 1}/{rounds}: uploading {posts * PUBLISH_MEDIA_PER_POST} media (not timed)")
            media = upload_small(herald, posts * PUBLISH_MEDIA_PER_POST)
            before = commit_counts(herald)
            log(f"publish path, round {round_index + 1}/{rounds}: {posts} posts by {PUBLISH_CLIENTS} clients, timed")
            cpu_before = herald.cpu_seconds()
            seconds, jobs = publish_workload(herald, media, posts)
            cpu = herald.cpu_seconds() - cpu_before
            after = commit_counts(herald)
            durations = [timestamp(job["finished_at"]) - timestamp(job["started_at"]) for job in jobs]
            run = {
                "rate": posts / seconds,
                "p50_ms": statistics.median(durations) * 1000,
                "p90_ms": percentile(durations, 0.9) * 1000,
                "cpu_ms": cpu / posts * 1000,
                "commits": None if before is None or after is None else (after - before) / posts,
            }
            log(f"publish path, round {round_index + 1}/{rounds}: the same again under strace (not timed)")
            media = upload_small(herald, posts * PUBLISH_MEDIA_PER_POST)
            traced = traced_syncs(herald, data, lambda: publish_workload(herald, media, posts), f"publish-{round_index + 1}")
            if isinstance(traced, str):
                log(f"publish path: no fsync count: {traced}")
                run["fsyncs"] = traced
            else:
                calls, kinds = traced
                run["fsyncs"] = sum(calls.values()) / posts
                run["calls"] = {call: count / posts for call, count in calls.items()}
                run["kinds"] = {kind: count / posts for kind, count in kinds.items()}
            runs.append(run)
        finally:
            herald.stop()
            shutil.rmtree(data, ignore_errors=True)
    return {"posts": posts, "runs": runs}


# MARK: 8. The image

IMAGE = "localhost/app:verify"  # what scripts/verify-container builds and checks
CONTAINER_TOOLS = os.path.realpath(os.path.join(ROOT, "..", "shared", "tools", "container"))


def podman(*arguments, check=True, timeout=120):
    # The storage and configuration the shared build tool set up (scripts/verify-container uses them too).
    work = os.environ.get("W", "/tmp/herald-container")
    environment = dict(os.environ, CONTAINERS_STORAGE_CONF=f"{work}/storage.conf", CONTAINERS_CONF=f"{work}/containers.conf")
    return subprocess.run(["podman", *arguments], env=environment, capture_output=True, text=True, check=check, timeout=timeout).stdout


def image(rounds):
    """Issue 18's goal 4: the image scripts/verify-container built and checked; its size and layers, the binary's
    sections, and cold start (`podman run` on an empty volume to /readyz 200) `rounds` times."""
    if not shutil.which("podman") or not os.path.isdir(CONTAINER_TOOLS):
        return {"skipped": f"no podman, or no {CONTAINER_TOOLS}"}
    log("image: scripts/verify-container (the Dockerfile built unchanged with buildah, then its checks; cached layers reused)")
    with open(os.path.join(OUT, "verify-container.log"), "w") as output:
        verified = subprocess.run([os.path.join(ROOT, "scripts", "verify-container")], cwd=ROOT, stdout=output,
                                  stderr=subprocess.STDOUT, timeout=3600)
    if verified.returncode != 0:
        return {"skipped": f"scripts/verify-container failed (exit {verified.returncode}; Benchmarks/out/verify-container.log)"}
    size = int(podman("image", "inspect", IMAGE, "--format", "{{.Size}}").strip())
    layers = [(int(layer["size"]), layer.get("CreatedBy") or layer.get("createdBy") or "")
              for layer in json.loads(podman("history", "--format", "json", IMAGE)) if int(layer["size"]) > 0]
    # The binary, copied out of a created (never started) container: the image has no shell to look with.
    binary = os.path.join(OUT, "herald-image-binary")
    podman("rm", "-f", "herald-bench-copy", check=False)
    podman("create", "--name", "herald-bench-copy", IMAGE)
    try:
        podman("cp", "herald-bench-copy:/usr/local/bin/herald", binary)
    finally:
        podman("rm", "-f", "herald-bench-copy", check=False)
    sections = subprocess.run(["readelf", "-S", "-W", binary], capture_output=True, text=True, check=True).stdout
    symbols = subprocess.run(["readelf", "-s", "-W", binary], capture_output=True, text=True, check=True).stdout.count("\n")
    binary_size = os.path.getsize(binary)
    os.remove(binary)
    starts = []
    for round_index in range(rounds):
        port = free_port()
        name, volume = f"herald-bench-cold-{round_index}", f"herald-bench-cold-{round_index}"
        podman("rm", "-f", "-t", "0", name, check=False)
        podman("volume", "rm", "-f", volume, check=False)
        podman("volume", "create", volume)
        try:
            started = time.monotonic()
            podman("run", "-d", "--name", name, "-e", f"HERALD_PORT={port}", "-v", f"{volume}:/data", IMAGE)
            deadline = started + 60
            while time.monotonic() < deadline:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as answer:
                        if answer.status == 200:
                            break
                except OSError:
                    time.sleep(0.01)
            else:
                raise RuntimeError(f"the container did not answer /readyz within 60 s (port {port})")
            starts.append(time.monotonic() - started)
            log(f"image: cold start {round_index + 1}/{rounds}: {starts[-1]:.2f} s")
        finally:
            podman("rm", "-f", "-t", "0", name, check=False)
            podman("volume", "rm", "-f", volume, check=False)
    return {"size": size, "layers": layers, "binary": binary_size, "symbols": symbols,
            "debug": ".debug_info" in sections, "symtab": ".symtab" in sections, "starts": starts}


# MARK: Report


def sections(text):
    """The parts of a report that another script wrote (``write_section``), in order: {name: the part, markers included}."""
    found = {}
    for match in re.finditer(r"<!-- begin (\S+) -->\n.*?<!-- end \1 -->\n", text, re.S):
        found[match.group(1)] = match.group(0)
    return found


def write_section(name, text, path=os.path.join(ROOT, "BENCHMARKS.md")):
    """Puts `text` into the report at `path` as the part `name` (replacing the last one of that name, else at the end),
    so that `make bench-replicas` and `make bench-fair` keep their figures in BENCHMARKS.md beside `make bench`'s."""
    text = re.sub(r"^(#+) ", r"#\1 ", text.rstrip(), flags=re.M)  # its headings one level down: a part of the report
    part = f"<!-- begin {name} -->\n{text}\n<!-- end {name} -->\n"
    report = open(path).read() if os.path.exists(path) else "# Benchmarks\n"
    old = sections(report).get(name)
    report = report.replace(old, part) if old else report.rstrip("\n") + "\n\n" + part
    with open(path, "w") as file:
        file.write(report)


def machine():
    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "unknown CPU")
    memory = next(int(line.split()[1]) for line in open("/proc/meminfo") if line.startswith("MemTotal")) / 1024 / 1024
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip() or "unknown"
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    swift = subprocess.run(["swift", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    return f"{model}, {os.cpu_count()} cores, {memory:.0f} GiB; {swift}; commit {commit}{' (with local changes)' if dirty else ''}"


def verdict(ratio, target, at_least=True):
    met = ratio >= target if at_least else ratio <= target
    return f"{ratio:.2f}× ({'≥' if at_least else '≤'} {target} {'met' if met else 'MISSED'})"


def report(args, poll, posts, parallel=None, cancels=None, rss=None, ingested=None, published=None, built=None, resumed=None):
    lines = [
        "# Benchmarks",
        "",
        f"Written by `make bench` ({' '.join(sys.argv[1:]) or 'defaults'}) on {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC.",
        f"Machine: {machine()}.",
        "",
        f"Each row: median (min–max) of {args.rounds} rounds ({args.poll_rounds} for the status poll), the contenders run alternately; wrk -t1 -c{CONNECTIONS}, "
        f"{args.seconds} s a run, loopback. Raw outputs in `Benchmarks/out/`. Ratios are of medians.",
        "",
    ]
    if poll:
        results, sizes, reads, tracing = poll
        lines += [
            "## 1. HTTP status poll: `GET /v1/jobs/{id}`, a job with 4 uploads",
            "",
            "| server | req/s | p99 ms | server CPU µs/req | body bytes | non-2xx |",
            "|---|---|---|---|---|---|",
        ]
        for name, runs in results.items():
            lines.append(
                f"| {name} | {cell([r['rate'] for r in runs])} | {cell([r['p99_ms'] for r in runs], 2)} | "
                f"{cell([r['cpu_us'] for r in runs], 1)} | {sizes[name]} | {sum(r['non2xx'] for r in runs)} |"
            )
        median = {name: statistics.median(r["rate"] for r in runs) for name, runs in results.items()}
        cpu = {name: statistics.median(r["cpu_us"] for r in runs) for name, runs in results.items()}
        read = statistics.median(reads)
        floor = cpu[C_LIMIT] + read
        lines.append("")
        heralds = [(HERALD, "Herald (info, access log on)"), (HERALD_QUIET, "Herald (--log-level warning, no access log)")]
        for name, label in heralds:
            ratios = []
            if HUMMINGBIRD in median:
                ratios.append(f"/ Hummingbird 2 {verdict(median[name] / median[HUMMINGBIRD], 2.0)}")
            ratios.append(f"/ C same read {verdict(median[name] / median[C_STATUS], 0.8)}")
            ratios.append(f"/ C limit {verdict(median[name] / median[C_LIMIT], 0.5)}")
            lines.append(f"- {label}: " + "; ".join(ratios))
        # Issue 35's goal: Herald as users run it (info, a key) against C doing the same product work, by rate and by CPU.
        lines.append(f"- **P1, Herald (info) / C with Herald's product work: req/s {verdict(median[HERALD] / median[C_PRODUCT], 0.8)}, "
                     f"CPU a request (C's µs / Herald's) {verdict(cpu[C_PRODUCT] / cpu[HERALD], 0.8)}** "
                     f"({cpu[HERALD]:.1f} against {cpu[C_PRODUCT]:.1f} µs; the product work costs C "
                     f"{cpu[C_PRODUCT] - cpu[C_STATUS]:.1f} µs a request here)")
        # Paired by round (the two Heralds run back to back in each round), and as the difference of the medians.
        differences = [loud["cpu_us"] - quiet["cpu_us"] for loud, quiet in zip(results[HERALD], results[HERALD_QUIET])]
        cost = cpu[HERALD] - cpu[HERALD_QUIET]
        lines += [
            f"- access log cost = CPU µs/request at info − at warning: {cost:.1f} µs "
            f"({'met' if cost <= 3 else 'MISSED'}, limit ≤ 3 µs); per round {', '.join(f'{d:.1f}' for d in differences)} µs",
            "",
            "Herald runs twice: at `herald serve`'s default log level, info (one access log line a request, on its stdout, "
            "which goes to a file, `Benchmarks/out/herald-poll.log`, as a container's log would), and at `--log-level "
            "warning` (no access log line), a second server on a copy of the first one's data directory taken once the "
            "job had succeeded (SQLite's online backup), so that both answer the same job with the same bytes.",
            "",
            "The C same-read server (`Benchmarks/c-status`) answers the poll as Herald does, on the same daemon "
            "flags and one polling thread: SQLiteJobStatusReader's statement on Herald's file (one read-only connection "
            "a thread, the statement prepared once), the job object written as Herald writes it (the body is checked "
            "byte for byte equal to Herald's before the runs); it checks that a key is sent but not which (Herald "
            "hashes it and looks it up). The C limit reads no database. The read itself, SQLiteJobStatusReader's statement "
            f"run by C on the same file (`Benchmarks/sqlite-read`): {cell(reads, 1)} µs CPU a read. A server that "
            f"reads the job for each poll costs at least the C limit plus that read, {floor:.1f} µs a request: at most "
            f"{cpu[C_LIMIT] / floor:.2f}× the C limit's rate when the server's CPU is the bottleneck. The C same-read "
            f"server spends {cpu[C_STATUS]:.1f} µs, Herald {cpu[HERALD]:.1f} µs at info ({cpu[HERALD] / floor:.1f}× that floor) and "
            f"{cpu[HERALD_QUIET]:.1f} µs at warning ({cpu[HERALD_QUIET] / floor:.1f}×).",
            "",
        ]
        if HERALD_TRACED in cpu:
            span_cost = cpu[HERALD_TRACED] - cpu[HERALD]
            per_round = [on["cpu_us"] - off["cpu_us"] for on, off in zip(results[HERALD_TRACED], results[HERALD])]
            lines += [
                f"- Tracing (issue 34): with every request a sampled span exported over OTLP/HTTP, {median[HERALD_TRACED] / median[HERALD]:.2f}× "
                f"the requests a second of the same Herald without (`--otlp-endpoint` unset: no tracer at all); **a span costs "
                f"{span_cost:.1f} µs of CPU** (at info, the traced server's µs a request minus the untraced one's; per round "
                f"{', '.join(f'{d:.1f}' for d in per_round)} µs), its export included: {tracing['requests']:,} exports of "
                f"{tracing['bytes'] / max(tracing['requests'], 1) / 1024:,.0f} KiB on average, {tracing['dropped']:,.0f} spans dropped.",
                "",
                "The traced Herald runs on a third copy of the data directory, its spans sent to a collector on this machine that reads "
                "each export and answers 200 without decoding it (`Tests/Support/otlp_receiver.py --discard`; its CPU is not counted).",
                "",
            ]
    if posts:
        lines += [
            "## 2. Post creation: `POST /v1/posts`, text only, durable (WAL, synchronous=FULL)",
            "",
            "| writer | posts/s |",
            "|---|---|",
        ]
        for name, runs in posts.items():
            lines.append(f"| {name} | {cell([r['rate'] for r in runs])} |")
        names = list(posts)
        median = {name: statistics.median(r["rate"] for r in posts[name]) for name in names}
        lines += [
            "",
            f"- Herald / sqlite3 limit: {verdict(median[names[0]] / median[names[1]], 0.5)}",
            "",
            "The C insert commits each post on its own, one after another: the limit of a server that does the same. "
            "Herald's 32 concurrent creations (wrk -c32) share commits (`GroupCommit`: each its own savepoint, one fsync "
            "for those that arrive together), so it can pass it.",
            "",
        ]
    if parallel:
        curve, throughput = parallel
        lines += [
            "## 3. Parallel publish: 8 media a post, each PUT answered after 300 ms",
            "",
            "| --upload-concurrency | job wall s | slowest upload s | wall / slowest |",
            "|---|---|---|---|",
        ]
        for concurrency, runs in curve.items():
            lines.append(
                f"| {concurrency} | {cell([r['wall'] for r in runs], 3)} | {cell([r['slowest'] for r in runs], 3)} | "
                f"{cell([r['ratio'] for r in runs], 2)} |"
            )
        ratio = statistics.median(r["ratio"] for r in curve[8])
        lines += [
            "",
            f"- wall / slowest at concurrency 8: {verdict(ratio, 1.2, at_least=False)}",
            f"- 200 posts x 4 media, end to end (defaults: 8 workers x 4 uploads): {cell([r['rate'] for r in throughput], 1)} posts/s",
            "",
        ]
    if cancels:
        ordered = sorted(cancels)
        p50 = statistics.median(ordered) * 1000
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000
        lines += [
            f"## 4. Cancellation latency: {len(cancels)} jobs x 4 uploads the server never answers",
            "",
            "From `POST /v1/jobs/{id}/cancel` sent to the last of the job's 4 connections closed, as the server saw it.",
            "",
            "| p50 ms | p99 ms | max ms |",
            "|---|---|---|",
            f"| {p50:.1f} | {p99:.1f} | {ordered[-1] * 1000:.1f} |",
            "",
            f"- p99: {'met' if p99 <= 50 else 'MISSED'} (target ≤ 50 ms)",
            "",
        ]
    if rss:
        growth = rss["growth"] / 1024
        lines += [
            "## 5. Memory: one 1 GiB media ingested over HTTP, then uploaded to S3",
            "",
            "| RSS before MiB | peak after ingest MiB | peak after upload MiB | growth MiB |",
            "|---|---|---|---|",
            f"| {rss['before'] / 1024:.1f} | {rss['after_ingest'] / 1024:.1f} | {rss['peak'] / 1024:.1f} | {growth:.1f} |",
            "",
            f"- growth: {'met' if growth <= 32 else 'MISSED'} (target ≤ 32 MiB)",
            "",
        ]
    if ingested:
        size = ingested["size"]
        amount = f"{size / 2**30:g} GiB" if size >= 1 << 30 else f"{size / 2**20:g} MiB"
        lines += [
            f"## 6. Ingest: `POST /v1/media` of {amount}, one streaming upload",
            "",
            f"Median (min–max) of {ingested['rounds']} rounds, the three servers run alternately. One `curl -T` upload "
            "(the file streamed as sent) of an MP4 signature and pseudo-random bytes, `Content-Type: video/mp4`; MB/s is "
            "10⁶ bytes over curl's `time_total`, from the request's start to the response's end; server CPU is utime + "
            "stime from `/proc/PID/stat` around the upload, per GiB. Herald: `herald serve` defaults but "
            f"`--max-media-bytes {size}` and `--min-free-disk 0` (no 507 on a small disk), its data directory on the "
            "place measured; it checks the key, checks the signature, hashes (SHA-256), writes 256 KiB batches, fsyncs, "
            "renames and commits the media row. The C server (`Benchmarks/c-ingest`, Herald's daemon flags) writes "
            "each chunk as it arrives, checks the signature, fsyncs the file, renames and fsyncs the directory; it "
            "hashes only with `--sha256` (OpenSSL EVP), checks no key and writes no database. Each medium is removed "
            "after its round.",
            "",
        ]
        for place, entry in ingested["places"].items():
            lines += place_table(place, entry, "server", UPLOAD_COLUMNS)
            if entry["skipped"]:
                continue
            runs = entry["runs"]
            rate = {name: statistics.median(r["mbps"] for r in results) for name, results in runs.items()}
            cpu = {name: statistics.median(r["cpu_per_gib"] for r in results) for name, results in runs.items()}
            lines += ["", f"- Herald / C MB/s: {verdict(rate[INGEST_HERALD] / rate[INGEST_C], 0.8)}"]
            lines.append(f"- CPU s/GiB Herald / C: {cpu[INGEST_HERALD] / max(cpu[INGEST_C], 1e-9):.2f}×")
            if INGEST_C_SHA in rate:
                lines.append(
                    f"- Herald / C + SHA-256 (the same hashing): MB/s {rate[INGEST_HERALD] / rate[INGEST_C_SHA]:.2f}×, "
                    f"CPU s/GiB {cpu[INGEST_HERALD] / max(cpu[INGEST_C_SHA], 1e-9):.2f}×"
                )
            lines.append("")
    if published:
        runs, count = published["runs"], published["posts"]
        commits = [r["commits"] for r in runs if r["commits"] is not None]
        rate = statistics.median(r["rate"] for r in runs)
        untraced = next((r["fsyncs"] for r in runs if isinstance(r["fsyncs"], str)), None)
        lines += [
            f"## 7. Publish path: {count} posts × {PUBLISH_MEDIA_PER_POST} media of {PUBLISH_MEDIA_BYTES} bytes, file store, "
            f"{PUBLISH_CLIENTS} clients, end to end",
            "",
            "| posts/s | job p50 ms | job p90 ms | durable commits/post | fsyncs/post | server CPU ms/post |",
            "|---|---|---|---|---|---|",
            f"| {cell([r['rate'] for r in runs], 1)} | {cell([r['p50_ms'] for r in runs], 1)} | {cell([r['p90_ms'] for r in runs], 1)} | "
            f"{cell(commits, 2) if commits else 'n/a'} | {'n/a' if untraced else cell([r['fsyncs'] for r in runs], 2)} | "
            f"{cell([r['cpu_ms'] for r in runs], 2)} |",
            "",
            f"- posts/s: {rate:.1f} ({'met' if rate >= 300 else 'MISSED'}, target ≥ 300)",
        ]
        if commits:
            median = statistics.median(commits)
            lines.append(f"- durable commits/post: {median:.2f} ({'met' if median <= 4 else 'MISSED'}, target ≤ 4)")
        else:
            lines.append("- durable commits/post: n/a (this binary has no `herald_database_commits_total`; target ≤ 4)")
        if untraced:
            lines.append(f"- fsyncs/post: n/a ({untraced})")
        else:
            calls = ", ".join(f"{call} {cell([r['calls'][call] for r in runs], 2)}" for call in SYNC_CALLS)
            kinds = sorted({kind for r in runs for kind in r["kinds"]})
            by_kind = ", ".join(f"{kind} {cell([r['kinds'].get(kind, 0.0) for r in runs], 2)}" for kind in kinds)
            lines.append(f"- fsyncs/post by call: {calls}; by file: {by_kind or 'none'} (the WAL's: SQLite's durable "
                         "commits, and its checkpoints)")
        lines += [
            "",
            f"`herald serve`'s defaults (file store `file://<data-dir>/objects`, 8 workers, 4 uploads at once, log level "
            f"info) but `--rate-limit 0`; a fresh data directory each round. {count * PUBLISH_MEDIA_PER_POST} media of "
            f"{PUBLISH_MEDIA_BYTES} bytes (PNG signature, filler) are uploaded first, not timed (each one's ingest is its "
            f"own durable write). Then {PUBLISH_CLIENTS} client threads, each on one keep-alive connection, create "
            f"{count} posts in all (`POST /v1/posts`, {PUBLISH_MEDIA_PER_POST} media each) as fast as they can, then "
            "long-poll their jobs (`GET /v1/jobs/{id}?wait=30`). posts/s: posts over the time from the first `POST "
            "/v1/posts` sent to the last job seen `succeeded`; job duration: `finished_at − started_at` of each job "
            "(p50 and p90 of the round's jobs); server CPU: utime + stime around the timed run, per post. Durable "
            "commits: `herald_database_commits_total` (every commit is durable) from `GET /metrics` before and after the timed "
            f"run, over {count}. fsyncs: the same workload again on the same server (new media, not timed) with `strace "
            f"-f -C -y -e trace={','.join(SYNC_CALLS)} -p PID` attached to every thread of the server for its duration, "
            f"every call of every thread counted (the summary), over {count}; raw output in `Benchmarks/out/strace-*.txt`.",
            "",
        ]
    if built:
        lines += ["## 8. The image", ""]
        if "skipped" in built:
            lines += [f"Skipped: {built['skipped']}.", ""]
        else:
            megabytes = built["size"] / 1e6
            lines += [
                "| image MB | binary MB | symbol table | debug info | cold start s |",
                "|---|---|---|---|---|",
                f"| {megabytes:.1f} | {built['binary'] / 1e6:.1f} | {'kept' if built['symtab'] else 'stripped'} "
                f"({built['symbols']} lines of `readelf -s`) | {'present' if built['debug'] else 'none'} | "
                f"{cell(built['starts'], 2)} |",
                "",
                f"- image size: {megabytes:.1f} MB ({'met' if megabytes <= 150 else 'MISSED'}, limit ≤ 150 MB); backtraces "
                f"name functions: {'yes' if built['symtab'] else 'NO'} (the symbol table is kept)",
                "",
                "Layers (`podman history`, those with bytes):",
                "",
                "| MB | created by |",
                "|---|---|",
            ]
            for size, created in built["layers"]:
                lines.append(f"| {size / 1e6:.1f} | `{created[:110].replace('|', '/')}` |")
            lines += [
                "",
                "`scripts/verify-container` builds the Dockerfile unchanged with buildah (the shared tool in "
                "`../shared/tools/container`) and checks it with podman (HTTP, a non-root uid, the HEALTHCHECK, exit 0 on "
                "SIGTERM, a post published and kept across a restart); its output is in "
                "`Benchmarks/out/verify-container.log`. Cold start: from `podman run -d` (a fresh empty volume each "
                f"time) to the first `/readyz` 200, polled every 10 ms, {len(built['starts'])} times.",
                "",
            ]
    if resumed:
        lines += resumable_report(resumed)
    return "\n".join(lines)


UPLOAD_COLUMNS = [("MB/s", "mbps", 0), ("server CPU s/GiB", "cpu_per_gib", 2), ("seconds", "seconds", 2)]


def place_table(place, entry, first, columns):
    """An upload place's heading (parts 6 and 9), then its note if it was skipped, else its table: a row per contender,
    each of `columns` (title, result key, decimals) as the median (min–max) of its rounds."""
    lines = [f"### On the {place}: {entry['root']} ({entry['mount']})", ""]
    if entry["skipped"]:
        return lines + [f"Skipped: {entry['skipped']}.", ""]
    lines += ["| " + " | ".join([first] + [title for title, _, _ in columns]) + " |", "|---" * (len(columns) + 1) + "|"]
    for name, results in entry["runs"].items():
        lines.append("| " + " | ".join([name] + [cell([r[key] for r in results], digits) for _, key, digits in columns]) + " |")
    return lines


def resumable_report(resumed):
    size = resumed["size"]
    amount = f"{size / 2**30:g} GiB" if size >= 1 << 30 else f"{size / 2**20:g} MiB"
    lines = [
        f"## 9. Resumable upload: {amount} through `/v1/uploads` in 8 MiB PATCHes beside one `POST /v1/media`",
        "",
        f"Median (min–max) of {resumed['rounds']} rounds, the two alternately on one Herald (`herald serve` defaults but "
        f"`--max-media-bytes {size}` and `--min-free-disk 0`), its data directory on the data disk, then on tmpfs. "
        "`POST /v1/media`: `curl -T`, as in part 6. tus: `Benchmarks/run.py`'s client on one keep-alive connection, "
        "`POST /v1/uploads` then PATCHes of 8 MiB, each body sent with sendfile(2) from the file; each PATCH's bytes are "
        "fsynced and its offset committed before its 204 (the offset is durable before it is reported), the last one "
        "also checks the type, renames and commits the media row. Seconds from the first request to the last answer. Peak "
        "RSS growth: VmHWM after the upload minus VmRSS before it, the peak reset (`/proc/PID/clear_refs`) before each "
        "upload. Each medium is checked (`GET /v1/media/{id}`: its size) and deleted.",
        "",
    ]
    for place, entry in resumed["places"].items():
        lines += place_table(place, entry, "upload", UPLOAD_COLUMNS + [("peak RSS growth MiB", "growth_mib", 1)])
        if entry["skipped"]:
            continue
        runs = entry["runs"]
        rate = {name: statistics.median(r["mbps"] for r in results) for name, results in runs.items()}
        growth = max(r["growth_mib"] for r in runs[TUS_PATCH])
        lines += [
            "",
            f"- tus / POST MB/s: {verdict(rate[TUS_PATCH] / rate[TUS_POST], 0.8)}",
            f"- tus peak RSS growth, the largest of the rounds: {growth:.1f} MiB ({'met' if growth <= 32 else 'MISSED'}, target ≤ 32 MiB)",
        ]
        resent = entry["resent"]
        if resent is not None:
            lines.append(
                f"- Resume: one more upload whose PATCH at the middle is cut after half its 8 MiB (the connection shut down), "
                f"then `HEAD` and the rest: {resent:,} bytes sent again ({resent / TUS_CHUNK:.2f} of a chunk; "
                f"{'met' if resent <= TUS_CHUNK else 'MISSED'}, target ≤ one chunk); the media's size and SHA-256 are the file's."
            )
        lines.append("")
    return lines


MEASUREMENTS = ["poll", "posts", "parallel", "cancel", "memory", "ingest", "publish", "image", "resumable"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, choices=range(1, 11), metavar="1..10")
    parser.add_argument("--poll-rounds", type=int, default=7, choices=range(1, 21), metavar="1..20",
                        help="rounds of the status poll (default 7): the access log's cost is the difference of two ~50 µs figures")
    parser.add_argument("--seconds", type=int, default=5, choices=range(1, 61), metavar="1..60", help="per wrk run")
    parser.add_argument("--only", choices=MEASUREMENTS, action="append", help="run only these measurements")
    parser.add_argument("--output", default=os.path.join(ROOT, "BENCHMARKS.md"), help="the report (default BENCHMARKS.md: with --only, it holds only those parts)")
    parser.add_argument("--ingest-mib", type=int, default=1024, choices=range(1, 4097), metavar="1..4096", help="the ingested body, MiB (default 1024)")
    parser.add_argument("--data-disk", default=tempfile.gettempdir(), help="where ingest's data directories go on disk (default the temporary directory)")
    parser.add_argument("--publish-posts", type=int, default=200, choices=range(8, 2001), metavar="8..2000", help="posts of the publish path (default 200)")
    parser.add_argument("--skip-swift-build", action="store_true", help="use the Herald (HERALD_BIN, else .build-release) and baseline built before; build only the C programs")
    args = parser.parse_args()
    only = set(args.only or MEASUREMENTS)
    binaries = build(swift=not args.skip_swift_build)
    # What the builds wrote goes to disk now, not during the first measurement (it slowed the first poll round by a third).
    os.sync()
    poll = status_poll(binaries, args.poll_rounds, args.seconds) if "poll" in only else None
    posts = post_creation(binaries, args.rounds, args.seconds) if "posts" in only else None
    parallel = parallel_publish(binaries, args.rounds) if "parallel" in only else None
    cancels = cancel_latency(binaries) if "cancel" in only else None
    rss = memory(binaries) if "memory" in only else None
    ingested = ingest(binaries, args.rounds, args.ingest_mib << 20, args.data_disk) if "ingest" in only else None
    published = publish_path(binaries, args.rounds, args.publish_posts) if "publish" in only else None
    built = image(args.rounds) if "image" in only else None
    resumed = resumable(binaries, args.rounds, args.ingest_mib << 20, args.data_disk) if "resumable" in only else None
    text = report(args, poll, posts, parallel, cancels, rss, ingested, published, built, resumed)
    # The parts other scripts wrote (make bench-replicas, bench-fair) stay, until they write them again.
    if os.path.exists(args.output):
        for part in sections(open(args.output).read()).values():
            text += "\n" + part
    notes = os.path.join(BENCH, "notes.md")  # what profiling found, kept by hand next to the numbers
    if os.path.exists(notes):
        text += "\n" + open(notes).read()
    with open(args.output, "w") as file:
        file.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
