#!/usr/bin/env python3
"""Herald on PostgreSQL beside Herald on SQLite, in one run (issue 31): the status poll, the publish path (issue 18's
P7) and a claim backlog over three replicas.

    python3 Benchmarks/replicas.py [--herald BIN] [--rounds 3] [--seconds 5] [--posts 200] [--backlog 10000]
                                   [--cancels 100] [--only poll|publish|backlog|cancel|events] [--store s3|file]
                                   (`make bench-replicas`: a release build first; writes Benchmarks/out/replicas.md and, without --only, its part of BENCHMARKS.md)

PostgreSQL 15 runs durable, as users run it (fsync and synchronous_commit on: Tests/Support/postgres_server.py
--durable), on loopback, on this same 2-core machine. Both Heralds run their defaults otherwise (the file store under
the data directory; on PostgreSQL the media are staged in it). Pairs run alternately (SQLite, PostgreSQL, SQLite, ...).
  1. Status poll: wrk on `GET /v1/jobs/{id}` of a succeeded job of 4 media, both at --log-level warning.
  2. Publish path: `--posts` posts x 4 media of 100 bytes by 8 clients, from the first POST /v1/posts to every job
     done; posts/s, job p50/p90, CPU per post (Herald, and PostgreSQL's processes), durable commits per post (SQLite:
     herald_database_commits_total; PostgreSQL: the WAL flushes of pg_stat_wal, wal_sync). On the S3 fake (issue 31's
     workload: an upload is a PUT from SQLite's node, a copy of the staged object on PostgreSQL) and on the file store
     (a link: what is left is the databases' own cost); then two PostgreSQL replicas sharing the store.
  3. Claim backlog: `--backlog` text-only posts queued while paused, then three replicas (8 workers each) resumed:
     claims a second, and no job run twice (every job ends succeeded at attempt 1).
  4. Cross-replica cancel: `--cancels` jobs each held in its copy by the S3 fake; the cancel sent to the other replica,
     to the copy's connection closed (p50, p99).
  5. Change to event: 100 `GET /v1/events` streams on one replica, five posts created through another (p50, p99).
Every load loop is bounded in count and time.
"""
import argparse
import json
import os
import selectors
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
sys.path.insert(0, BENCH)
import run  # noqa: E402 (the measurements' helpers: wrk, the P7 workload; it puts scripts/ on the path)
from herald_support import Herald, create_key  # noqa: E402
from herald_support.fake_s3 import CREDENTIALS, FakeS3  # noqa: E402
from herald_support.postgres import Postgres  # noqa: E402

def serve(binary, name, database=None, *flags, env=None):
    """`herald serve` at --log-level warning with an admin key made first (on `database` if given), no rate limit."""
    data = tempfile.mkdtemp(prefix=f"herald-{name}-")
    where = ["--database", database] if database else []
    key = create_key(binary, data, "bench", database)
    herald = Herald(binary, data, "--log-level", "warning", "--rate-limit", "0", *where, *flags, name=name,
                    log_path=os.path.join(run.OUT, f"{name}.log"), env=env).start("/readyz", timeout=60)
    run.KEYS[herald.port] = key
    herald.data = data
    return herald


def stop(herald):
    herald.stop()
    shutil.rmtree(herald.data, ignore_errors=True)


def succeeded_job(herald):
    """A post of 4 media, published: its job's path."""
    media = [json.loads(run.http("POST", herald.url("/v1/media"), run.PNG + bytes([i]) * 100, "image/png")[1])["id"] for i in range(4)]
    body = json.dumps({"text": "benchmark", "media_ids": media}).encode()
    job = json.loads(run.http("POST", herald.url("/v1/posts"), body, "application/json")[1])["job"]["id"]
    answer = json.loads(run.http("GET", herald.url(f"/v1/jobs/{job}?wait=30"))[1])
    assert answer["state"] == "succeeded", answer
    return f"/v1/jobs/{job}"


def status_poll(binary, postgres, rounds, seconds):
    sqlite = serve(binary, "poll-sqlite")
    pg = serve(binary, "poll-postgres", postgres.database())
    try:
        targets = [("SQLite", sqlite, succeeded_job(sqlite)), ("PostgreSQL", pg, succeeded_job(pg))]
        results = {name: [] for name, _, _ in targets}
        for index in range(rounds):
            for name, herald, path in targets:
                run.log(f"status poll, round {index + 1}/{rounds}: {name}")
                results[name].append(run.wrk(herald, path, seconds, f"replicas-poll-{name}-{index + 1}"))
        return results
    finally:
        stop(sqlite)
        stop(pg)


WARM_UP_POSTS = 48


def warm_up(herald):
    """A server in service has its database connections open and its statements planned (PostgreSQL plans a prepared
    statement five times before it keeps one plan, per connection): before the timed part, on either database, 48 posts
    are published, not timed."""
    run.log(f"publish path: warming {herald.name} up with {WARM_UP_POSTS} posts (not timed)")
    run.publish_workload(herald, run.upload_small(herald, WARM_UP_POSTS * run.PUBLISH_MEDIA_PER_POST), WARM_UP_POSTS)


STORES = {"s3": "the S3 fake", "file": "the file store"}


class Store:
    """Where a publish run's Herald (or replicas) keep media: the S3 fake (one per run; it answers as S3 does but keeps
    no bytes, so that its own file writes add nothing to either side) or a file store every replica mounts (`file`, the
    default of one node)."""

    def __init__(self, kind):
        self.kind = kind
        self.root = tempfile.mkdtemp(prefix=f"herald-bench-{kind}-")
        self.fake = FakeS3(None, bucket="bench").start() if kind == "s3" else None

    def flags(self, shared):
        """`herald serve` flags: the fake's URL, or for several replicas one store directory for all."""
        if self.fake:
            return ["--store", self.fake.store_url]
        return ["--store", f"file://{self.root}/objects"] if shared else []

    @property
    def env(self):
        return CREDENTIALS if self.fake else None

    def close(self):
        if self.fake:
            self.fake.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def publish_path(binary, postgres, rounds, posts, kind):
    """One Herald on SQLite and one on PostgreSQL, alternately, each publishing `posts` posts of 4 media on `kind`."""
    results = {"SQLite": [], "PostgreSQL": []}
    for index in range(rounds):
        for name in results:
            database = postgres.database() if name == "PostgreSQL" else None
            store = Store(kind)
            herald = serve(binary, f"publish-{kind}-{name.lower()}", database, *store.flags(shared=False), env=store.env)
            try:
                warm_up(herald)
                run.log(f"publish path ({STORES[kind]}), round {index + 1}/{rounds}: {name}, uploading {posts * 4} media (not timed)")
                media = run.upload_small(herald, posts * run.PUBLISH_MEDIA_PER_POST)
                commits, syncs = run.commit_counts(herald), postgres.wal_syncs(settle=11) if database else 0
                cpu, pg_cpu = herald.cpu_seconds(), postgres.cpu_seconds()
                run.log(f"publish path ({STORES[kind]}), round {index + 1}/{rounds}: {name}, {posts} posts by {run.PUBLISH_CLIENTS} clients, timed")
                elapsed, jobs = run.publish_workload(herald, media, posts)
                cpu, pg_cpu = herald.cpu_seconds() - cpu, postgres.cpu_seconds() - pg_cpu
                durations = [run.timestamp(job["finished_at"]) - run.timestamp(job["started_at"]) for job in jobs]
                if database:
                    stop(herald)  # its connections close, and report their counts
                    durable = postgres.wal_syncs(settle=2) - syncs
                else:
                    durable = run.commit_counts(herald) - commits
                results[name].append({
                    "rate": posts / elapsed,
                    "p50_ms": statistics.median(durations) * 1000,
                    "p90_ms": run.percentile(durations, 0.9) * 1000,
                    "cpu_ms": cpu / posts * 1000,
                    "postgres_cpu_ms": pg_cpu / posts * 1000 if database else 0.0,
                    "durable": durable / posts,
                })
            finally:
                stop(herald)
                store.close()
    results["PostgreSQL, 2 replicas"] = publish_two_replicas(binary, postgres, rounds, posts, kind)
    return results


def publish_two_replicas(binary, postgres, rounds, posts, kind):
    """The publish path split over two replicas on one database and one store: half the clients and posts through
    each, at once."""
    results = []
    for index in range(rounds):
        database = postgres.database()
        # One store for both: a job may run on the replica its post did not reach.
        store = Store(kind)
        replicas = [serve(binary, f"publish-{kind}-replica-{number}", database, "--replica-id", f"r{number}", *store.flags(shared=True),
                          env=store.env)
                    for number in (1, 2)]
        try:
            for herald in replicas:
                warm_up(herald)
            half = posts // 2
            run.log(f"publish path ({STORES[kind]}), round {index + 1}/{rounds}: 2 replicas, uploading {posts * 4} media (not timed)")
            media = [run.upload_small(herald, half * run.PUBLISH_MEDIA_PER_POST) for herald in replicas]
            syncs, pg_cpu = postgres.wal_syncs(settle=11), postgres.cpu_seconds()
            cpu = [herald.cpu_seconds() for herald in replicas]
            outcomes = [None, None]

            def workload(number):
                outcomes[number] = run.publish_workload(replicas[number], media[number], half, clients=run.PUBLISH_CLIENTS // 2)

            run.log(f"publish path ({STORES[kind]}), round {index + 1}/{rounds}: 2 replicas, {2 * half} posts by {run.PUBLISH_CLIENTS} clients, timed")
            started = time.monotonic()
            threads = [threading.Thread(target=workload, args=(number,)) for number in (0, 1)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=960)
            elapsed = time.monotonic() - started
            if any(outcome is None for outcome in outcomes):
                raise RuntimeError("the two-replica publish workload failed (see the log above)")
            jobs = outcomes[0][1] + outcomes[1][1]
            durations = [run.timestamp(job["finished_at"]) - run.timestamp(job["started_at"]) for job in jobs]
            herald_cpu = sum(herald.cpu_seconds() - before for herald, before in zip(replicas, cpu))
            pg_cpu = postgres.cpu_seconds() - pg_cpu  # while its connections' processes live
            for herald in replicas:
                stop(herald)  # their connections close, and report their counts
            results.append({
                "rate": 2 * half / elapsed,
                "p50_ms": statistics.median(durations) * 1000,
                "p90_ms": run.percentile(durations, 0.9) * 1000,
                "cpu_ms": herald_cpu / (2 * half) * 1000,
                "postgres_cpu_ms": pg_cpu / (2 * half) * 1000,
                "durable": (postgres.wal_syncs(settle=2) - syncs) / (2 * half),
            })
        finally:
            for herald in replicas:
                stop(herald)
            store.close()
    return results


def cross_replica_cancel(binary, postgres, cancels):
    """Two replicas on the fake S3, whose copies (a job's uploads) are held until their connection closes: for each of
    `cancels` jobs, the cancel sent to the replica not running it, to the copy's connection closed on the other
    (seconds)."""
    fake = FakeS3(None, bucket="bench", hang_copies=True).start()
    database = postgres.database()
    replicas = {name: serve(binary, f"cancel-{name}", database, "--replica-id", name, "--store", fake.store_url, env=CREDENTIALS)
                for name in ("c1", "c2")}
    latencies = []
    try:
        for index in range(cancels):
            accepting = replicas["c1" if index % 2 == 0 else "c2"]
            media = json.loads(run.http("POST", accepting.url("/v1/media"), run.PNG + index.to_bytes(4, "big"), "image/png")[1])["id"]
            key = f"media/{media}.png"
            body = json.dumps({"text": "cancelled", "media_ids": [media]}).encode()
            job = json.loads(run.http("POST", accepting.url("/v1/posts"), body, "application/json")[1])["job"]["id"]
            fake.wait(lambda fake: key in fake.received, timeout=30)
            runner = json.loads(run.http("GET", accepting.url(f"/v1/jobs/{job}"))[1])["runner"]
            other = replicas["c2" if runner == "c1" else "c1"]
            started = time.monotonic()
            run.http("POST", other.url(f"/v1/jobs/{job}/cancel"))
            fake.wait(lambda fake: key in fake.closed, timeout=30)
            latencies.append(fake.closed[key] - started)
            assert json.loads(run.http("GET", other.url(f"/v1/jobs/{job}?wait=30"))[1])["state"] == "cancelled"
        run.log(f"cross-replica cancel: {cancels} jobs measured")
        return latencies
    finally:
        for herald in replicas.values():
            stop(herald)
        fake.stop()


def change_to_event(binary, postgres, streams=100, changes=5):
    """`streams` `GET /v1/events` streams on replica B; `changes` posts created through replica A: for each stream and
    change, from the POST sent on A to the event's first bytes on B (seconds)."""
    database = postgres.database()
    limits = ["--max-streams", str(streams * 2), "--max-connections-per-ip", str(streams * 3)]
    a = serve(binary, "events-a", database, "--replica-id", "ea", *limits)
    b = serve(binary, "events-b", database, "--replica-id", "eb", *limits)
    sockets = []
    latencies = []
    try:
        selector = selectors.DefaultSelector()
        for number in range(streams):
            connection = socket.create_connection(("127.0.0.1", b.port))
            connection.sendall(f"GET /v1/events HTTP/1.1\r\nHost: b\r\nAuthorization: Bearer {run.KEYS[b.port]}\r\n\r\n".encode())
            connection.setblocking(False)
            selector.register(connection, selectors.EVENT_READ, number)
            sockets.append(connection)

        def read_until(predicate, deadline):
            """Reads what comes on every stream until predicate(seen) or the deadline: {stream: first bytes' time}."""
            seen = {}
            while not predicate(seen) and time.monotonic() < deadline:
                for ready, _ in selector.select(timeout=0.2):
                    try:
                        if ready.fileobj.recv(65536) and ready.data not in seen:
                            seen[ready.data] = time.monotonic()
                    except BlockingIOError:
                        pass
            return seen

        opened = read_until(lambda seen: len(seen) == streams, time.monotonic() + 60)
        assert len(opened) == streams, f"{len(opened)} of {streams} streams opened"
        for index in range(changes):
            read_until(lambda seen: False, time.monotonic() + 0.3)  # what is still coming, drained
            body = json.dumps({"text": f"heard {index}", "scheduled_at": "2099-01-01T00:00:00Z"}).encode()
            started = time.monotonic()
            run.http("POST", a.url("/v1/posts"), body, "application/json")
            heard = read_until(lambda seen: len(seen) == streams, time.monotonic() + 10)
            latencies += [when - started for when in heard.values()]
            latencies += [10.0] * (streams - len(heard))  # a stream that heard nothing in 10 s counts as 10 s
        run.log(f"change to event: {changes} changes x {streams} streams measured")
        return latencies
    finally:
        for connection in sockets:
            connection.close()
        stop(a)
        stop(b)


def claim_backlog(binary, postgres, backlog, replicas=3, workers=8, limit=600):
    """`backlog` text-only posts queued while paused, then `replicas` replicas resumed: (claims a second, jobs run
    twice, jobs not succeeded)."""
    database = postgres.database()
    first = serve(binary, "backlog-1", database, "--workers", str(workers), "--replica-id", "backlog-1")
    others = []
    try:
        run.http("POST", first.url("/v1/queue/pause"))
        run.log(f"claim backlog: queueing {backlog} posts (not timed)")
        body = json.dumps({"text": "queued"}).encode()

        def client(number, clients=8):
            connection = run.KeptAlive(first)
            try:
                for _ in range(number, backlog, clients):
                    connection.request("POST", "/v1/posts", body)
            finally:
                connection.close()

        run.in_threads(client, 8, limit, "queueing the backlog")
        for number in range(2, replicas + 1):
            others.append(serve(binary, f"backlog-{number}", database, "--workers", str(workers), "--replica-id", f"backlog-{number}"))
            run.KEYS[others[-1].port] = run.KEYS[first.port]
        run.log(f"claim backlog: {replicas} replicas resumed, timed")
        started = time.monotonic()
        run.http("POST", first.url("/v1/queue/resume"))
        deadline = started + limit
        while time.monotonic() < deadline:
            queue = json.loads(run.http("GET", first.url("/v1/queue"))[1])
            if queue["queued"] == 0 and queue["running"] == 0:
                break
            time.sleep(0.05)
        elapsed = time.monotonic() - started
        attempts = postgres.sql("SELECT count(*) FILTER (WHERE attempt > 1), count(*) FILTER (WHERE state <> 'succeeded') FROM jobs",
                                Postgres.name_of(database))
        twice, unfinished = (int(value) for value in attempts.split("|"))
        return {"jobs": backlog, "seconds": elapsed, "rate": backlog / elapsed, "twice": twice, "unfinished": unfinished}
    finally:
        for herald in [first, *others]:
            stop(herald)


def report(args, poll, published, backlog, cancels=None, events=None):
    median = statistics.median
    lines = [f"# Herald on PostgreSQL beside SQLite ({time.strftime('%Y-%m-%d')}, {run.machine()})", ""]
    if poll:
        sqlite, pg = (median(r["rate"] for r in poll[name]) for name in ("SQLite", "PostgreSQL"))
        lines += ["## Status poll (`GET /v1/jobs/{id}`, wrk -c32, --log-level warning)", "",
                  "| | req/s (median of %d) | CPU µs/req | p99 ms |" % args.rounds, "|---|---|---|---|"]
        for name in ("SQLite", "PostgreSQL"):
            rows = poll[name]
            lines.append(f"| {name} | {median(r['rate'] for r in rows):,.0f} ({min(r['rate'] for r in rows):,.0f}-{max(r['rate'] for r in rows):,.0f}) "
                         f"| {median(r['cpu_us'] for r in rows):.1f} | {median(r['p99_ms'] for r in rows):.2f} |")
        lines += ["", f"PostgreSQL / SQLite: **{pg / sqlite:.2f}×** (target ≥ 0.5×)", ""]
    for kind, results in (published or {}).items():
        sqlite, pg = (median(r["rate"] for r in results[name]) for name in ("SQLite", "PostgreSQL"))
        lines += [f"## Publish path ({args.posts} posts × 4 media, 8 clients, {STORES[kind]})", "",
                  "| | posts/s | job p50 / p90 ms | Herald CPU ms/post | PostgreSQL CPU ms/post | durable commits/post |",
                  "|---|---|---|---|---|---|"]
        for name in results:
            rows = results[name]
            lines.append(f"| {name} | {median(r['rate'] for r in rows):.1f} ({min(r['rate'] for r in rows):.1f}-{max(r['rate'] for r in rows):.1f}) "
                         f"| {median(r['p50_ms'] for r in rows):.0f} / {median(r['p90_ms'] for r in rows):.0f} "
                         f"| {median(r['cpu_ms'] for r in rows):.2f} | {median(r['postgres_cpu_ms'] for r in rows):.2f} "
                         f"| {median(r['durable'] for r in rows):.2f} |")
        two = median(r["rate"] for r in results["PostgreSQL, 2 replicas"])
        target = ("target ≥ 0.7×, issue 31's workload" if kind == "s3" else
                  "no target: the database's own cost, with no store request to share the time")
        lines += ["", f"PostgreSQL / SQLite: **{pg / sqlite:.2f}×** ({target}; durable commits/post ≤ 4: WAL flushes on "
                  f"PostgreSQL, herald_database_commits_total on SQLite). Two replicas / one: {two / pg:.2f}× on this 2-core "
                  "machine, where both replicas and PostgreSQL share the same two cores.", ""]
    if backlog:
        lines += [f"## Claim backlog ({backlog['jobs']:,} queued text-only jobs, 3 replicas × 8 workers)", "",
                  f"{backlog['rate']:,.0f} jobs claimed and finished a second ({backlog['seconds']:.1f} s); "
                  f"jobs run twice: {backlog['twice']}; not succeeded: {backlog['unfinished']}", ""]
    for title, values, target in (("Cross-replica cancel (the request on one replica to the copy's connection closed on the "
                                   f"other, {len(cancels or [])} jobs)", cancels, 100),
                                  (f"Change to event on another replica's stream (100 `GET /v1/events` streams on B, posts "
                                   f"created through A, {len(events or []) // 100} changes)", events, 250)):
        if values:
            ms = sorted(value * 1000 for value in values)
            lines += [f"## {title}", "", f"p50 {run.percentile(ms, 0.5):.1f} ms, p99 {run.percentile(ms, 0.99):.1f} ms, "
                      f"max {ms[-1]:.1f} ms (target p99 ≤ {target} ms)", ""]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--herald", default=os.path.join(ROOT, ".build-release", "release", "herald"))
    parser.add_argument("--rounds", type=int, default=3, choices=range(1, 11), metavar="1..10")
    parser.add_argument("--seconds", type=int, default=5, choices=range(1, 61), metavar="1..60")
    parser.add_argument("--posts", type=int, default=200, choices=range(8, 2001), metavar="8..2000")
    parser.add_argument("--backlog", type=int, default=10_000, choices=range(0, 100_001), metavar="0..100000")
    parser.add_argument("--cancels", type=int, default=100, choices=range(1, 1001), metavar="1..1000")
    parts = ["poll", "publish", "backlog", "cancel", "events"]
    parser.add_argument("--only", choices=parts, action="append")
    parser.add_argument("--store", choices=list(STORES), action="append", help="the publish path's store (default: both)")
    args = parser.parse_args()
    only = set(args.only or parts)
    os.makedirs(run.OUT, exist_ok=True)
    with Postgres() as postgres:
        poll = status_poll(args.herald, postgres, args.rounds, args.seconds) if "poll" in only else None
        published = {kind: publish_path(args.herald, postgres, args.rounds, args.posts, kind)
                     for kind in (args.store or list(STORES))} if "publish" in only else None
        backlog = claim_backlog(args.herald, postgres, args.backlog) if "backlog" in only and args.backlog else None
        cancels = cross_replica_cancel(args.herald, postgres, args.cancels) if "cancel" in only else None
        events = change_to_event(args.herald, postgres) if "events" in only else None
    text = report(args, poll, published, backlog, cancels, events)
    with open(os.path.join(run.OUT, "replicas.md"), "w") as file:
        file.write(text + "\n")
    if not args.only:
        run.write_section("replicas", text)
    print(text)


if __name__ == "__main__":
    main()
