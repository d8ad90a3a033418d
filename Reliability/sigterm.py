#!/usr/bin/env python3
"""SIGTERM under load: Herald must drain, re-queue its running jobs, exit 0 in time, and lose nothing.

    python3 Reliability/sigterm.py [--seed N] [--grace 5] [--margin 2] [--clients 6] [--load-seconds 4]
                                   [--herald PATH] [--work-dir D] [--keep] [--time-limit S] [--json-out PATH]
                                   [--s3-delay MIN:MAX] [--s3-p503 P]

Herald runs with an S3 store (scripts/herald_support/fake_s3.py, in a thread here) whose PUTs are slow, so jobs are
running when the signal comes. Client threads upload media (some slowly, so bodies are in flight), create posts, and
poll jobs (plain and long-polls); once jobs run and requests are in flight, Herald gets SIGTERM while the clients
carry on.

Checks:
  * every request under way at the signal (started before it, not yet answered) gets a complete answer: a 2xx, or
    a 503 with Retry-After while draining; never a reset or a cut-off answer. Requests started after the signal
    may be refused (the listener is closed) or get 503; their refusals and resets are counted and reported;
  * no 5xx but 503, and every 503 has Retry-After; /readyz, polled over a keep-alive connection, never answers 200
    once the signal is sent;
  * the process exits 0 within the grace period plus a margin (the time from signal to exit is measured);
  * the jobs running at the signal are, after the exit, either finished or back in the queue (`queued`,
    `cancel_requested = 0`, unlocked, uploads `pending`, post `queued`, media `staged`); none is left `running`;
  * on the next start every accepted post's job reaches done, Herald's store clean-up settles (`object_deletions`
    empty, at most 60 s), every accepted medium, post and job is there, and the stored state holds the invariants
    of harness.check_stored_state (no object of a post that is not published).
Exits 1 if a check fails.
"""
import argparse
import http.client
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402 (it puts scripts/ on the path, for herald_support)
from harness import Checks, Tally, request  # noqa: E402
from herald_support.fake_s3 import FakeS3, Faults  # noqa: E402

TYPES = list(harness.MAGIC)


class Load:
    """The client threads' shared state: accepted ids, and every request's result with its timing."""

    def __init__(self, port, seed):
        self.port = port
        self.seed = seed
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.free_media = []
        self.media = set()
        self.posts = {}        # post id -> job id
        self.jobs = set()
        self.results = []      # (kind, Result)
        self.ingests = 0
        self.tally = Tally()

    def record(self, kind, result):
        self.tally.add(kind, result.outcome)
        with self.lock:
            self.results.append((kind, result))
        if result.error == "refused":
            self.stop.wait(0.1)  # the listener is closed: knock now and then, not in a tight loop
        return result

    def ingest(self, delta):
        with self.lock:
            self.ingests += delta

    def upload(self, rng):
        content_type = rng.choice(TYPES)
        slow = rng.random() < 0.3
        data = harness.media_bytes(rng, content_type, rng.randint(100_000, 250_000) if slow else rng.randint(500, 30_000))
        pacing = {"chunk_size": 8192, "chunk_pause": 0.02} if slow else {}
        result = self.record("media_slow" if slow else "media", request(
            self.port, "POST", "/v1/media", body=data, headers={"Content-Type": content_type}, timeout=30,
            on_body_start=lambda: self.ingest(1), on_body_end=lambda: self.ingest(-1), **pacing))
        if result.status == 201:
            with self.lock:
                self.media.add(result.json["id"])
                self.free_media.append(result.json["id"])

    def create_post(self, rng):
        with self.lock:
            count = min(len(self.free_media), rng.choice([1, 2, 3]))
            media_ids = [self.free_media.pop() for _ in range(count)]
        body = json.dumps({"text": f"sigterm {uuid.uuid4().hex[:8]}", "media_ids": media_ids}).encode()
        result = self.record("post", request(self.port, "POST", "/v1/posts", body=body, timeout=30, headers={
            "Content-Type": "application/json", "Idempotency-Key": f"sigterm-{uuid.uuid4()}"}))
        if result.status == 202:
            answer = result.json
            with self.lock:
                self.posts[answer["post"]["id"]] = answer["job"]["id"]
                self.jobs.add(answer["job"]["id"])

    def poll(self, rng):
        with self.lock:
            if not self.jobs:
                return
            job_id = rng.choice(sorted(self.jobs))
        if rng.random() < 0.3:
            self.record("job_longpoll", request(self.port, "GET", f"/v1/jobs/{job_id}?wait=2", timeout=30))
        else:
            self.record("job_poll", request(self.port, "GET", f"/v1/jobs/{job_id}", timeout=30))

    def client(self, index):
        rng = harness.seeded(self.seed, "sigterm-client", index)
        actions, weights = (self.upload, self.create_post, self.poll), (4, 3, 3)
        for _ in range(100_000):  # bounded; the stop switch ends it long before
            if self.stop.is_set():
                return
            rng.choices(actions, weights)[0](rng)
            self.stop.wait(rng.uniform(0.01, 0.08))


def readiness_poller(port, stop, seen):
    """/readyz over one keep-alive connection, every 20 ms: once draining, it must answer 503 (and close)."""
    connection = None
    for _ in range(5_000):  # bounded; the stop switch ends it
        if stop.is_set():
            break
        try:
            if connection is None:
                connection = http.client.HTTPConnection(harness.HOST, port, timeout=5)
            started = time.monotonic()
            connection.request("GET", "/readyz")
            response = connection.getresponse()
            response.read()
            seen.append((started, time.monotonic(), response.status, response.getheader("Retry-After"),
                         response.getheader("Connection")))
            if (response.getheader("Connection") or "").lower() == "close":
                connection.close()
                connection = None
        except OSError as error:
            seen.append((started, time.monotonic(), None, type(error).__name__, None))
            if connection is not None:
                connection.close()
            connection = None
        stop.wait(0.02)
    if connection is not None:
        connection.close()


def read_jobs(data_dir, job_ids):
    """The rows of `job_ids` with their uploads, post and media, read after Herald has exited."""
    rows = {}
    with harness.open_database(data_dir) as db:
        for job_id in job_ids:
            job = db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if job is None:
                rows[job_id] = None
                continue
            job = dict(job)
            job["uploads"] = [dict(r) for r in db.execute("SELECT state, bytes_sent FROM uploads WHERE job_id = ?", (job_id,))]
            job["post_state"] = db.execute("SELECT state FROM posts WHERE id = ?", (job["post_id"],)).fetchone()[0]
            job["media_states"] = [r[0] for r in db.execute("SELECT state FROM media WHERE post_id = ?", (job["post_id"],))]
            rows[job_id] = job
        running = [r[0] for r in db.execute("SELECT id FROM jobs WHERE state = 'running'")]
    return rows, running


def run(args, work_dir):
    began = time.monotonic()
    deadline = began + args.time_limit
    data_dir = os.path.join(work_dir, "data")
    os.makedirs(data_dir, exist_ok=True)
    log_path = os.path.join(work_dir, "herald.log")
    checks = Checks()
    faults = Faults(delay=args.s3_delay, p_delay=1.0, p_slowdown=args.s3_p503, p_drop=0.0)
    fake = FakeS3(os.path.join(work_dir, "s3"), faults=faults, seed=args.seed).start()
    herald_args = ["--shutdown-grace", str(args.grace), "--workers", "4", "--upload-concurrency", "2",
                   "--upload-attempts", "3", "--min-free-disk", "0"]
    try:
        herald = harness.start_herald(args.herald, data_dir, fake.store_url, extra_args=herald_args, log_path=log_path)
    except Exception:
        fake.stop()
        raise
    load = Load(herald.port, args.seed)
    timing, snapshot, stats, cleanup_seconds = {}, {}, {}, None
    threads = []
    try:
        rss_start = herald.rss_kib()
        threads = [threading.Thread(target=load.client, args=(i,), daemon=True) for i in range(args.clients)]
        readiness = []
        threads.append(threading.Thread(target=readiness_poller, args=(herald.port, load.stop, readiness), daemon=True))
        for thread in threads:
            thread.start()
        time.sleep(args.load_seconds)
        # Aim: jobs running, one of them with a PUT that outlasts the grace period (so it must be re-queued), and a
        # media body arriving, all at once (bounded wait).
        aim_deadline = time.monotonic() + 15
        while time.monotonic() < aim_deadline:
            if fake.longest_put_remaining() > args.grace + 1 and load.ingests > 0:
                queue = request(herald.port, "GET", "/v1/queue", timeout=2).json or {}
                if queue.get("running", 0) >= 2:
                    break
            time.sleep(0.01)
        running = request(herald.port, "GET", "/v1/jobs?state=running&limit=100", timeout=2).json or {"data": []}
        snapshot = {"running_jobs": [j["id"] for j in running["data"]], "puts_in_flight": fake.puts_in_flight(),
                    "ingests_in_flight": load.ingests, "rss_kib": herald.rss_kib()}
        signalled = time.monotonic()
        herald.terminate()
        code = herald.wait(args.grace + args.margin + 20)
        exited = time.monotonic()
        if code is None:
            code = herald.kill()
            exited = None
        timing = {"signal_to_exit_s": None if exited is None else round(exited - signalled, 3), "exit_status": code}
        time.sleep(0.5)  # requests after the exit: refused
        load.stop.set()
        for thread in threads:
            thread.join(timeout=40)

        limit = args.grace + args.margin
        checks.add("exit_status_0", code == 0, [] if code == 0 else [f"exit status {code}"])
        in_time = exited is not None and exited - signalled <= limit
        checks.add("exits_within_grace", in_time,
                   [] if in_time else [f"took {timing['signal_to_exit_s']} s, limit {limit} s"],
                   note=f"{timing['signal_to_exit_s']} s from SIGTERM to exit, "
                        f"grace {args.grace} s + margin {args.margin} s")
        verdicts = classify(load.results, signalled)
        checks.add("in_flight_requests_answered", not verdicts["cut_off"] and not verdicts["reset_before"],
                   verdicts["cut_off"] + verdicts["reset_before"],
                   note=f"{verdicts['counts']['in_flight_answered']} requests under way at the signal answered: "
                        f"{verdicts['in_flight_kinds']}")
        checks.add("no_unexpected_statuses", not verdicts["unexpected"], verdicts["unexpected"])
        # /readyz turns 503 at once: no 200 for a probe sent after the signal (10 ms for the signal to land).
        late_ready = [f"/readyz sent {a - signalled:+.3f}s from the signal answered 200"
                      for a, _, status, _, _ in readiness if status == 200 and a > signalled + 0.01]
        draining_503 = sum(1 for a, _, status, _, _ in readiness if status == 503 and a > signalled)
        checks.add("readyz_503_when_draining", not late_ready, late_ready,
                   note=f"{draining_503} probes on a keep-alive connection answered 503 while draining")
        checks.add("503_has_retry_after", not verdicts["no_retry_after"], verdicts["no_retry_after"])

        # After the exit: the running jobs are back in the queue (or finished within the grace period).
        rows, still_running = read_jobs(data_dir, snapshot["running_jobs"])
        problems, requeued, finished = [], [], []
        for job_id, job in rows.items():
            if job is None:
                problems.append(f"job {job_id} is gone")
            elif job["state"] in ("succeeded", "failed", "cancelled"):
                finished.append(job_id)
            elif job["state"] == "queued":
                requeued.append(job_id)
                if job["cancel_requested"] or job["locked_by"] or job["locked_until"]:
                    problems.append(f"re-queued job {job_id}: cancel_requested {job['cancel_requested']}, "
                                    f"locked_by {job['locked_by']}")
                if any(u["state"] != "pending" or u["bytes_sent"] for u in job["uploads"]):
                    problems.append(f"re-queued job {job_id}'s uploads are {job['uploads']}")
                if job["post_state"] != "queued" or any(s != "staged" for s in job["media_states"]):
                    problems.append(f"re-queued job {job_id}: post {job['post_state']}, media {job['media_states']}")
            else:
                problems.append(f"job {job_id} was running at the signal and is {job['state']} after the exit")
        problems += [f"job {job_id} is still running after a graceful exit" for job_id in still_running]
        if not requeued:
            problems.append("no running job was re-queued: nothing was tested (are the PUT delays longer than the grace?)")
        checks.add("running_jobs_requeued", not problems, problems,
                   note=f"{len(snapshot['running_jobs'])} running at the signal: {len(requeued)} re-queued, "
                        f"{len(finished)} finished within the grace period")
        db_problems = harness.database_problems(data_dir)
        checks.add("db_integrity_after_exit", not db_problems, db_problems)

        # The next start: everything accepted is there and every job gets done.
        fake.set_faults(Faults(delay=(0.0, 0.05), p_slowdown=args.s3_p503))
        herald = harness.start_herald(args.herald, data_dir, fake.store_url, extra_args=herald_args, log_path=log_path)
        idle = harness.wait_idle_queue(herald.port, timeout=max(10.0, min(120.0, deadline - time.monotonic())))
        checks.add("jobs_finish_after_restart", idle, [] if idle else ["the queue still had work when the wait ended"])
        cleanup_seconds = harness.wait_cleanup_settled(checks, data_dir, timeout=60)
        missing, not_done = [], []
        for media_id in sorted(load.media):
            if (status := request(herald.port, "GET", f"/v1/media/{media_id}").status) != 200:
                missing.append(f"media {media_id}: {status}")
        for post_id in sorted(load.posts):
            if (status := request(herald.port, "GET", f"/v1/posts/{post_id}").status) != 200:
                missing.append(f"post {post_id}: {status}")
        for job_id in sorted(load.jobs | set(snapshot["running_jobs"])):  # the re-queued ones included
            result = request(herald.port, "GET", f"/v1/jobs/{job_id}")
            if result.status != 200:
                missing.append(f"job {job_id}: {result.outcome}")
            elif not result.json["done"]:
                not_done.append(f"job {job_id} is {result.json['state']}")
        checks.add("accepted_rows_present", not missing, missing,
                   note=f"{len(load.media)} media, {len(load.posts)} posts, {len(load.jobs)} jobs accepted")
        checks.add("accepted_jobs_done", not not_done, not_done)
        code = herald.stop(timeout=args.grace + args.margin + 20)
        checks.add("second_shutdown_exit_0", code == 0, [] if code == 0 else [f"exit status {code}"])
        stats = harness.check_stored_state(checks, data_dir, fake.objects())
    finally:
        load.stop.set()
        if herald.alive():
            herald.kill()
        fake.stop()

    report = {
        "tool": "sigterm", "ok": checks.ok, "seed": args.seed, "duration_s": round(time.monotonic() - began, 1),
        "herald": str(args.herald), "work_dir": work_dir, "grace_s": args.grace, "margin_s": args.margin,
        "timing": timing, "at_signal": snapshot, "rss_kib": {"start": rss_start, "at_signal": snapshot.get("rss_kib")},
        "faults": {"s3": fake.counts()},
        "requests": load.tally.as_dict(), "requests_by_timing": verdicts["counts"],
        "in_flight_at_signal": verdicts["in_flight_kinds"],
        "readyz_probes_after_signal": [{"sent_s": round(a - signalled, 3), "status": st, "retry_after_or_error": ra,
                                        "connection": c} for a, _, st, ra, c in readiness if a > signalled - 0.05][:10],
        "final_state": stats, "cleanup_settle_s": None if cleanup_seconds is None else round(cleanup_seconds, 1),
        "checks": checks.report(),
    }
    print_summary(report, checks)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(report, f, indent=2)
    return report


def classify(results, signalled):
    """Sorts the requests by when they ran relative to the signal (done before it, in flight at it, started after it)
    and by what became of them."""
    counts = {"done_before": 0, "in_flight_answered": 0, "in_flight_reset": 0, "in_flight_cut_off": 0,
              "after_answered": 0, "after_503": 0, "after_refused": 0, "after_reset": 0, "after_other": 0}
    in_flight_kinds = {}
    cut_off, reset_before, unexpected, no_retry_after = [], [], [], []
    for kind, r in results:
        when = f"{kind} started {r.started - signalled:+.3f}s, ended {r.ended - signalled:+.3f}s from the signal"
        phase = "done_before" if r.ended < signalled else ("in_flight" if r.started < signalled else "after")
        if phase == "in_flight":
            in_flight_kinds.setdefault(kind, {})
            in_flight_kinds[kind][r.outcome] = in_flight_kinds[kind].get(r.outcome, 0) + 1
        if r.status is not None:
            if phase == "done_before":
                counts["done_before"] += 1
            elif phase == "in_flight":
                counts["in_flight_answered"] += 1
            else:
                counts["after_503" if r.status == 503 else "after_answered"] += 1
            if r.status not in (200, 201, 202, 503):
                unexpected.append(f"{when}: {r.status} {(r.body or b'')[:150]!r}")
            if r.status == 503 and not r.header("Retry-After"):
                no_retry_after.append(f"{when}: 503 without Retry-After")
        elif phase != "after":
            # Under way at the signal (connected before it): it must be answered in full.
            if r.error == "truncated":
                counts["in_flight_cut_off"] += 1
                cut_off.append(f"{when}: answer cut off")
            else:
                counts["in_flight_reset"] += 1
                reset_before.append(f"{when}: {r.error} before any answer")
        else:
            key = f"after_{r.error}" if f"after_{r.error}" in counts else "after_other"
            counts[key] += 1
    return {"counts": counts, "in_flight_kinds": in_flight_kinds, "cut_off": cut_off, "reset_before": reset_before,
            "unexpected": unexpected, "no_retry_after": no_retry_after}


def print_summary(report, checks):
    t, s3 = report["timing"], report["faults"]["s3"]
    print(f"sigterm: {report['duration_s']} s (seed {report['seed']}); SIGTERM to exit {t.get('signal_to_exit_s')} s "
          f"(grace {report['grace_s']} s), exit status {t.get('exit_status')}")
    at = report["at_signal"]
    print(f"  at the signal: {len(at.get('running_jobs', []))} jobs running, {at.get('puts_in_flight')} PUTs and "
          f"{at.get('ingests_in_flight')} media bodies in flight; RSS {report['rss_kib']}")
    print(f"  fake S3: {s3['delays']} delayed PUTs ({s3['delay_seconds']} s), {s3['slowdown_503']} SlowDown 503s, "
          f"{s3['puts_completed']} stored, {s3['puts_partial']} partial")
    print(f"  requests by timing: {report['requests_by_timing']}")
    for kind, outcomes in report["requests"].items():
        print(f"    {kind:14s} {outcomes}")
    print("checks:")
    checks.print_summary(sys.stdout)
    print("RESULT: " + ("PASS" if checks.ok else "FAIL"))


def _range(text):
    low, _, high = text.partition(":")
    return float(low), float(high or low)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--herald", default=str(harness.DEFAULT_HERALD), help="the herald binary")
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100_000)
    parser.add_argument("--work-dir", help="where data and objects go (default: a temporary directory)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--time-limit", type=float, default=300, help="seconds for the whole run")
    parser.add_argument("--json-out", help="write the report as JSON here")
    parser.add_argument("--grace", type=int, default=5, help="Herald's --shutdown-grace, seconds")
    parser.add_argument("--margin", type=float, default=2.0, help="seconds beyond the grace the exit may take")
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument("--load-seconds", type=float, default=4.0, help="load before the signal")
    parser.add_argument("--s3-delay", type=_range, default=(2.0, 12.0), help="PUT body read time MIN:MAX seconds")
    parser.add_argument("--s3-p503", type=float, default=0.05)
    args = parser.parse_args()
    if not os.access(args.herald, os.X_OK):
        parser.error(f"no herald binary at {args.herald}")
    work_dir = args.work_dir or tempfile.mkdtemp(prefix="herald-sigterm-")
    report = None
    try:
        report = run(args, work_dir)
    finally:
        if report and report["ok"] and not args.keep and not args.work_dir:
            shutil.rmtree(work_dir, ignore_errors=True)
        elif not args.work_dir:
            print(f"work directory kept: {work_dir}", file=sys.stderr)
    return 0 if report and report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
