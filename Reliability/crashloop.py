#!/usr/bin/env python3
"""Crash loop: Herald SIGKILLed again and again under load, then checked for what a crash must never do.

    python3 Reliability/crashloop.py [--rounds 20] [--seed N] [--herald PATH] [--work-dir D] [--keep]
                                     [--time-limit S] [--json-out PATH]
                                     [--s3-delay MIN:MAX] [--s3-p503 P] [--s3-pdrop P] [--s3-fault-methods PUT,DELETE]

Each round starts Herald on the same data directory with an S3 store (scripts/herald_support/fake_s3.py, in a thread
here, injecting slow PUTs, 503 SlowDown and dropped connections), drives it from several client threads (raw and
multipart media uploads, JSON and multipart posts with and without Idempotency-Key, scheduled posts, cancels,
re-publishes, status polls, replays of earlier keys), and SIGKILLs it at a moment chosen in turn:
  ingest  - a media body is being sent to Herald;
  upload  - the fake store has a PUT in flight;
  commit  - just after the fake store answered the last PUT of a post's job (the commit is due now);
  random  - any time.
Requests that got a 2xx are remembered; those in flight at a kill have an unknown outcome and are not counted as
accepted (what they did is still held to the invariants, which are checked on every row).

Then a final phase: Herald runs without kills, every key is replayed, every job is waited for (bounded), Herald's
store clean-up is waited for (`object_deletions` empty, at most 60 s: the objects of failed and cancelled posts are
deleted again 10 s after the job's end, and failed DELETEs are retried), every accepted medium, post and job is read
back (Driver.final_phase), and the stored state is checked with Herald stopped (harness.check_stored_state: SQLite
integrity, nothing published without its objects, one success per post, no object of a post that is not published,
with no tolerance, staging files exactly those rows need), then `herald check`. Staging files
are aged before that start so the start-up sweep (which spares files younger than 10 minutes) judges them; a last
start with `--staged-media-ttl 1` checks that the sweep expires unattached media and nothing else.
Exits 1 if a check fails; the work directory is then kept for inspection.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402 (it puts scripts/ on the path, for herald_support)
from harness import Checks, Tally, request  # noqa: E402
from herald_support.fake_s3 import FakeS3, Faults  # noqa: E402

MOMENTS = ("ingest", "upload", "commit", "random")
TYPES = list(harness.MAGIC)
CLIENTS = 4
HERALD_ARGS = ["--workers", "3", "--upload-concurrency", "2", "--upload-attempts", "2", "--upload-timeout", "20",
               "--shutdown-grace", "3", "--min-free-disk", "0"]


class Ledger:
    """What the driver knows Herald accepted (2xx), and the idempotency keys it sent."""

    def __init__(self):
        self.lock = threading.Lock()
        self.media = {}          # id -> {"type", "size", "sha256", "round"}
        self.free_media = []     # accepted media no post request has named yet
        self.posts = {}          # id -> {"media": [ids], "round"}
        self.jobs = {}           # id -> post id
        self.open_jobs = set()   # accepted jobs not yet seen done
        self.keys = {}           # Idempotency-Key -> {"kind", "body", "content_type", "state", "post_id", "job_id", "round"}
        self.key_of_object = {}  # object key -> post id (for aiming kills at commits)
        self.post_objects = {}   # post id -> set of object keys
        self.key_results = []    # replays of keys: {"key", "expected", "got", "status", "ok"}
        self.problems = Counter()  # name -> count, for the checks
        self.problem_details = {}  # name -> [details]

    def problem(self, name, detail):
        with self.lock:
            self.problems[name] += 1
            self.problem_details.setdefault(name, [])
            if len(self.problem_details[name]) < 20:
                self.problem_details[name].append(detail)

    def take_free_media(self, rng, count):
        with self.lock:
            chosen = []
            for _ in range(min(count, len(self.free_media))):
                chosen.append(self.free_media.pop(rng.randrange(len(self.free_media))))
            return chosen

    def add_media(self, media_id, content_type, size, digest, round_number):
        with self.lock:
            self.media[media_id] = {"type": content_type, "size": size, "sha256": digest, "round": round_number}
            self.free_media.append(media_id)

    def add_post(self, answer, round_number):
        """Records the post and job of a 202 `{"post", "job"}`."""
        post, job = answer["post"], answer["job"]
        with self.lock:
            media_ids = [m["id"] for m in post["media"]]
            self.posts.setdefault(post["id"], {"media": media_ids, "round": round_number})
            self.jobs[job["id"]] = post["id"]
            if not job.get("done"):
                self.open_jobs.add(job["id"])
            objects = set()
            for m in post["media"]:
                if m["id"] not in self.media:
                    self.media[m["id"]] = {"type": m["content_type"], "size": m["size"], "sha256": m["sha256"],
                                           "round": round_number}
                key = harness.object_key(m["id"], m["content_type"])
                objects.add(key)
                self.key_of_object[key] = post["id"]
            self.post_objects[post["id"]] = objects


class Round:
    """What one round's threads share: the stop switch, the ingest counter, and the commit trigger."""

    def __init__(self, number, moment, port, deadline):
        self.number = number
        self.moment = moment
        self.port = port
        self.deadline = deadline
        self.stop = threading.Event()
        self.lock = threading.Condition()
        self.ingests = 0
        self.completed_objects = set()
        self.commit_due = threading.Event()

    def ingest_started(self):
        with self.lock:
            self.ingests += 1
            self.lock.notify_all()

    def ingest_ended(self):
        with self.lock:
            self.ingests -= 1
            self.lock.notify_all()

    def wait_ingest(self, timeout):
        end = time.monotonic() + timeout
        with self.lock:
            while self.ingests == 0:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self.lock.wait(left)
            return True


class Driver:
    def __init__(self, args):
        self.args = args
        self.ledger = Ledger()
        self.tally = Tally()
        self.kills = Counter()
        self.rounds = []
        self.round = None
        self.herald = None
        self.unexpected = []   # (kind, status, detail) answers no correct Herald gives
        self.unexpected_lock = threading.Lock()
        self.journal = []      # the first fake store's events, kept when it is replaced
        self.cleanup_seconds = None  # how long object_deletions took to empty in the final phase

    # -- requests -------------------------------------------------------------------------------

    def note(self, kind, result, expected):
        """Tallies an answer; an HTTP status outside `expected` is recorded as unexpected (a network error is not)."""
        self.tally.add(kind, result.outcome)
        if result.status is not None and result.status not in expected:
            body = (result.body or b"")[:200].decode(errors="replace")
            with self.unexpected_lock:
                if len(self.unexpected) < 50:
                    self.unexpected.append({"kind": kind, "status": result.status, "body": body})
        return result

    def upload_media(self, rng, rnd):
        content_type = rng.choice(TYPES)
        size = rng.choice([rng.randint(300, 20_000)] * 14 + [rng.randint(20_000, 150_000)] * 5 + [rng.randint(300_000, 600_000)])
        data = harness.media_bytes(rng, content_type, size)
        slow = rng.random() < (0.5 if rnd.moment == "ingest" else 0.15)
        pacing = {"chunk_size": 8192, "chunk_pause": rng.uniform(0.005, 0.02)} if slow else {}
        as_form = rng.random() < 0.25
        if as_form:
            body, form_type = harness.multipart(fields=[("description", "alt text")],
                                                files=[("file", "picture.bin", content_type, data)])
            headers, kind = {"Content-Type": form_type}, "media_multipart"
        else:
            body, headers, kind = data, {"Content-Type": content_type}, "media_raw"
        result = request(rnd.port, "POST", "/v1/media?description=crash", body=body, headers=headers,
                         on_body_start=rnd.ingest_started, on_body_end=rnd.ingest_ended, timeout=20, **pacing)
        self.note(kind, result, {201})
        if result.status == 201:
            answer = result.json or {}
            if answer.get("sha256") != harness.sha256(data) or answer.get("size") != len(data):
                self.ledger.problem("media_answer_matches_bytes", f"media {answer.get('id')}: answer {answer.get('size')} "
                                    f"bytes {answer.get('sha256')}, sent {len(data)} {harness.sha256(data)}")
            self.ledger.add_media(answer["id"], content_type, len(data), answer.get("sha256"), rnd.number)

    def post_fields(self, rng):
        fields = {"text": f"crash-loop post {uuid.uuid4().hex[:8]}"}
        if rng.random() < 0.5:
            fields["priority"] = rng.choice(["low", "normal", "high"])
        if rng.random() < 0.2:
            fields["scheduled_at"] = harness.rfc3339(time.time() + rng.uniform(1.5, 5))
        return fields

    def create_post(self, rng, rnd):
        fields = self.post_fields(rng)
        key = f"crash-{uuid.uuid4()}" if rng.random() < 0.5 else None
        if rng.random() < 0.25:
            files = []
            for index in range(rng.choice([1, 1, 2, 3])):
                content_type = rng.choice(TYPES)
                files.append(("media", f"f{index}", content_type,
                              harness.media_bytes(rng, content_type, rng.randint(300, 40_000))))
            body, content_type = harness.multipart(fields=list(fields.items()), files=files)
            kind = "post_multipart"
        else:
            media_ids = self.ledger.take_free_media(rng, rng.choice([0, 1, 1, 2, 2, 3]))
            value = dict(fields, media_ids=media_ids)
            body, content_type, kind = json.dumps(value).encode(), "application/json", "post_json"
        headers = {"Content-Type": content_type}
        if key:
            headers["Idempotency-Key"] = key
            with self.ledger.lock:
                self.ledger.keys[key] = {"kind": kind, "body": body, "content_type": content_type, "state": "unknown",
                                         "post_id": None, "job_id": None, "round": rnd.number}
        multipart = kind == "post_multipart"
        result = request(rnd.port, "POST", "/v1/posts", body=body, headers=headers, timeout=20,
                         on_body_start=rnd.ingest_started if multipart else None,
                         on_body_end=rnd.ingest_ended if multipart else None)
        self.note(kind + ("_keyed" if key else ""), result, {202})
        if result.status == 202:
            answer = result.json
            self.ledger.add_post(answer, rnd.number)
            if key:
                with self.ledger.lock:
                    self.ledger.keys[key].update(state="accepted", post_id=answer["post"]["id"], job_id=answer["job"]["id"])

    def replay_key(self, rng, rnd, key=None):
        """Sends a key's first request again, byte for byte: an accepted key must give back the same ids."""
        with self.ledger.lock:
            if key is None:
                older = [k for k, v in self.ledger.keys.items() if v["round"] < rnd.number]
                pool = older if older and rng.random() < 0.8 else list(self.ledger.keys)
                if not pool:
                    return
                key = rng.choice(pool)
            entry = dict(self.ledger.keys[key])
        result = request(rnd.port, "POST", "/v1/posts", body=entry["body"], timeout=20,
                         headers={"Content-Type": entry["content_type"], "Idempotency-Key": key})
        first = entry["state"]
        expected = {202} if first == "accepted" else ({202, 409} if entry["kind"] == "post_multipart" else {202})
        self.note(f"replay_{first}", result, expected)
        if result.status is None:
            return
        got = None
        if result.status == 202:
            answer = result.json
            got = [answer["post"]["id"], answer["job"]["id"]]
        if first == "accepted":
            ok = got == [entry["post_id"], entry["job_id"]]
            self.ledger.key_results.append({"key": key, "first": first, "expected": [entry["post_id"], entry["job_id"]],
                                            "got": got, "status": result.status, "ok": ok})
        elif result.status == 202:
            # The first answer to reach us is the key's: from now on it must always be these ids.
            self.ledger.add_post(answer, rnd.number)
            with self.ledger.lock:
                current = self.ledger.keys[key]
                if current["state"] == "unknown":
                    current.update(state="accepted", post_id=got[0], job_id=got[1])
                    ok = True
                else:
                    ok = [current["post_id"], current["job_id"]] == got
            self.ledger.key_results.append({"key": key, "first": first, "expected": None, "got": got,
                                            "status": result.status, "ok": ok})

    def cancel(self, rng, rnd):
        with self.ledger.lock:
            pool = list(self.ledger.open_jobs) or list(self.ledger.jobs)
        if not pool:
            return
        job_id = rng.choice(pool)
        if rng.random() < 0.5:
            result, kind = request(rnd.port, "POST", f"/v1/jobs/{job_id}/cancel"), "cancel_post"
        else:
            result, kind = request(rnd.port, "DELETE", f"/v1/jobs/{job_id}"), "cancel_delete"
        self.note(kind, result, {200, 202, 409})
        if result.status == 404:
            self.ledger.problem("accepted_rows_present", f"cancel: accepted job {job_id} answered 404")

    def republish(self, rng, rnd):
        with self.ledger.lock:
            if not self.ledger.posts:
                return
            post_id = rng.choice(list(self.ledger.posts))
        result = self.note("get_post", request(rnd.port, "GET", f"/v1/posts/{post_id}"), {200})
        if result.status == 404:
            self.ledger.problem("accepted_rows_present", f"accepted post {post_id} answered 404")
        post = result.json if result.status == 200 else None
        if not post or post["state"] not in ("failed", "cancelled"):
            return
        result = self.note("republish", request(rnd.port, "POST", f"/v1/posts/{post_id}/publish"), {202, 409})
        if result.status == 202:
            self.ledger.add_post(result.json, rnd.number)

    def poll(self, rng, rnd):
        with self.ledger.lock:
            pool = list(self.ledger.open_jobs) or list(self.ledger.jobs)
        if not pool:
            return
        job_id = rng.choice(pool)
        result = self.note("get_job", request(rnd.port, "GET", f"/v1/jobs/{job_id}"), {200})
        if result.status == 404:
            self.ledger.problem("accepted_rows_present", f"accepted job {job_id} answered 404")
        elif result.status == 200 and (result.json or {}).get("done"):
            with self.ledger.lock:
                self.ledger.open_jobs.discard(job_id)

    def client(self, rnd, index):
        rng = harness.seeded(self.args.seed, "client", rnd.number, index)
        actions = [(self.upload_media, 32), (self.create_post, 30), (self.cancel, 8), (self.republish, 8),
                   (self.poll, 12), (self.replay_key, 10)]
        functions, weights = zip(*actions)
        for _ in range(100_000):  # bounded; the round's stop switch or deadline ends it long before
            if rnd.stop.is_set() or time.monotonic() > rnd.deadline:
                return
            try:
                rng.choices(functions, weights)[0](rng, rnd)
            except Exception as error:  # a bug in the driver must not pass for a Herald failure
                self.ledger.problem("driver_errors", f"{type(error).__name__}: {error}")
            # Think time: without it the clients create posts many times faster than the jobs can publish them.
            rnd.stop.wait(rng.uniform(0.02, 0.2))

    # -- the commit trigger -----------------------------------------------------------------------

    def on_put_complete(self, key):
        rnd = self.round
        if rnd is None:
            return
        with self.ledger.lock:
            post_id = self.ledger.key_of_object.get(key)
            objects = self.ledger.post_objects.get(post_id, set())
            rnd.completed_objects.add(key)
            if post_id and objects <= rnd.completed_objects:
                rnd.commit_due.set()

    # -- rounds -----------------------------------------------------------------------------------

    def start_herald(self, extra=()):
        return harness.start_herald(self.args.herald, self.data_dir, self.fake.store_url, extra_args=[*HERALD_ARGS, *extra],
                                    log_path=os.path.join(self.work_dir, "herald.log"))

    def crash_round(self, number, moment, rng):
        started = time.monotonic()
        self.herald = self.start_herald()
        rnd = Round(number, moment, self.herald.port, deadline=time.monotonic() + 25)
        self.round = rnd
        threads = [threading.Thread(target=self.client, args=(rnd, i), daemon=True) for i in range(CLIENTS)]
        for thread in threads:
            thread.start()
        time.sleep(rng.uniform(3.0, 9.0))  # let work pile up: queued jobs, uploads, ingests
        cap = 8.0
        if moment == "ingest":
            hit = rnd.wait_ingest(cap)
        elif moment == "upload":
            hit = self.fake.wait_put_in_flight(cap)
            if hit:
                time.sleep(rng.uniform(0, 0.02))
        elif moment == "commit":
            rnd.commit_due.clear()  # only a job that completes from now on
            with self.ledger.lock:
                rnd.completed_objects.clear()
            hit = rnd.commit_due.wait(cap)
            if hit:
                time.sleep(rng.uniform(0, 0.01))
        else:
            time.sleep(rng.uniform(0, 3))
            hit = True
        in_flight = {"puts": self.fake.puts_in_flight(), "ingests": rnd.ingests}
        queue = request(rnd.port, "GET", "/v1/queue", timeout=1).json or {}
        rss = self.herald.rss_kib()
        crashed = not self.herald.alive()
        if crashed:
            self.ledger.problem("herald_stays_up", f"round {number}: herald exited by itself with "
                                f"{self.herald.process.returncode}: {self.herald.log_tail(5)}")
        self.herald.kill()
        self.kills[moment if hit else moment + "_missed"] += 1
        rnd.stop.set()
        for thread in threads:
            thread.join(timeout=30)
        self.round = None
        problems = harness.database_problems(self.data_dir)
        if problems:
            self.ledger.problem("db_integrity_after_kill", f"round {number}: {problems[:3]}")
        self.rounds.append({"round": number, "moment": moment, "hit": hit, "in_flight_at_kill": in_flight,
                            "queue_at_kill": {k: queue.get(k) for k in ("running", "queued", "scheduled")},
                            "rss_kib_at_kill": rss, "seconds": round(time.monotonic() - started, 2),
                            "db_ok": not problems})

    # -- the final phase --------------------------------------------------------------------------

    def final_phase(self, checks, time_left):
        """No kills: replay keys, wait for every job, check every accepted row, stop gracefully."""
        self.fake.set_faults(Faults(delay=(0.0, 0.05), p_slowdown=self.args.s3_p503, p_drop=self.args.s3_pdrop,
                                    fault_methods=self.fake.faults.fault_methods))
        aged = harness.backdate_staging(self.data_dir)
        self.herald = self.start_herald()
        port = self.herald.port
        rnd = Round(len(self.rounds) + 1, "final", port, deadline=time.monotonic() + time_left)
        rng = harness.seeded(self.args.seed, "final")
        for key in sorted(self.ledger.keys):
            self.replay_key(rng, rnd, key)
        idle = harness.wait_idle_queue(port, timeout=max(10.0, min(120.0, time_left - 30)))
        checks.add("jobs_finish", idle, [] if idle else ["the queue still had work when the wait ended"])
        self.cleanup_seconds = harness.wait_cleanup_settled(checks, self.data_dir, timeout=60)

        missing, not_done, mismatched = [], [], []
        with self.ledger.lock:
            media, posts, jobs = dict(self.ledger.media), dict(self.ledger.posts), dict(self.ledger.jobs)
        for media_id in media:
            result = self.note("final_get_media", request(port, "GET", f"/v1/media/{media_id}"), {200})
            if result.status != 200:
                missing.append(f"media {media_id}: {result.outcome}")
        for post_id, known in posts.items():
            result = self.note("final_get_post", request(port, "GET", f"/v1/posts/{post_id}"), {200})
            if result.status != 200:
                missing.append(f"post {post_id}: {result.outcome}")
            elif [m["id"] for m in result.json["media"]] != known["media"]:
                mismatched.append(f"post {post_id} lists media {[m['id'] for m in result.json['media']]}, "
                                  f"accepted with {known['media']}")
        for job_id, post_id in jobs.items():
            result = self.note("final_get_job", request(port, "GET", f"/v1/jobs/{job_id}"), {200})
            if result.status != 200:
                missing.append(f"job {job_id}: {result.outcome}")
            elif not result.json.get("done"):
                not_done.append(f"job {job_id} is {result.json.get('state')}")
            elif result.json.get("post_id") != post_id:
                mismatched.append(f"job {job_id} belongs to post {result.json.get('post_id')}, accepted for {post_id}")
        missing.extend(self.ledger.problem_details.get("accepted_rows_present", []))  # 404s seen during the rounds
        checks.add("accepted_rows_present", not missing, missing,
                   note=f"{len(media)} media, {len(posts)} posts, {len(jobs)} jobs accepted")
        checks.add("accepted_rows_unchanged", not mismatched, mismatched)
        checks.add("accepted_jobs_done", not not_done, not_done)
        code = self.herald.stop(timeout=30)
        checks.add("final_shutdown_exit_0", code == 0, [] if code == 0 else [f"exit status {code}"])
        return aged

    def ttl_phase(self, checks):
        """A start with `--staged-media-ttl 1`: unattached media (row and file) go, attached ones stay."""
        with harness.open_database(self.data_dir) as db:
            unattached = {row["id"]: row["staging_path"] for row in db.execute(
                "SELECT id, staging_path FROM media WHERE post_id IS NULL")}
            attached = [row["id"] for row in db.execute("SELECT id FROM media WHERE post_id IS NOT NULL LIMIT 50")]
        time.sleep(1.1)  # every unattached medium is now older than the TTL
        self.herald = self.start_herald(extra=["--staged-media-ttl", "1"])
        port = self.herald.port
        problems = []
        if unattached:
            probe = next(iter(unattached))
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and request(port, "GET", f"/v1/media/{probe}").status == 200:
                time.sleep(0.2)
        for media_id in unattached:
            status = request(port, "GET", f"/v1/media/{media_id}").status
            if status != 404:
                problems.append(f"unattached media {media_id} answered {status} after its TTL")
        for media_id in attached:
            status = request(port, "GET", f"/v1/media/{media_id}").status
            if status != 200:
                problems.append(f"attached media {media_id} answered {status} after the TTL sweep")
        code = self.herald.stop(timeout=30)
        for media_id, path in unattached.items():
            if os.path.exists(os.path.join(self.data_dir, path)):
                problems.append(f"expired media {media_id}'s file {path} is still there")
        if code != 0:
            problems.append(f"exit status {code}")
        checks.add("ttl_sweep_expires_only_unattached", not problems, problems,
                   note=f"{len(unattached)} unattached media expired")

    def explain_object(self, key):
        """The fake store's events for `key` (this instance and the one before), times relative to the first."""
        events = self.journal + self.fake.journal(key=None)
        events = [e for e in events if e[2] == key]
        if not events:
            return "none recorded"
        t0 = events[0][0]
        history = "; ".join(f"+{t - t0:.3f}s {op} {outcome}" for t, op, _, outcome in events[-8:])
        # The likely cause, from the order of the last store and the deletes.
        last_store = max((i for i, e in enumerate(events) if e[1] == "PUT" and e[3].startswith("stored")), default=-1)
        deletes_before = [i for i, e in enumerate(events) if e[1] == "DELETE" and i < last_store]
        deletes_after = [e for e in events[last_store + 1:] if e[1] == "DELETE"] if last_store >= 0 else []
        if last_store >= 0 and not deletes_after:
            cause = ("stored after Herald's clean-up DELETEs (the PUT body had been sent in full)" if deletes_before
                     else "never deleted after it was stored")
            history += f" => {cause}"
        elif deletes_after and all(e[3] in ("503", "dropped") for e in deletes_after):
            history += " => every clean-up DELETE failed"
        return history

    # -- the whole run ----------------------------------------------------------------------------

    def run(self):
        args = self.args
        began = time.monotonic()
        self.work_dir = args.work_dir or tempfile.mkdtemp(prefix="herald-crashloop-")
        os.makedirs(self.work_dir, exist_ok=True)
        self.data_dir = os.path.join(self.work_dir, "data")
        os.makedirs(self.data_dir, exist_ok=True)
        s3_root = os.path.join(self.work_dir, "s3")
        faults = Faults(delay=args.s3_delay, p_delay=0.7, p_slowdown=args.s3_p503, p_drop=args.s3_pdrop,
                        fault_methods=tuple(args.s3_fault_methods.split(",")))
        self.fake = FakeS3(s3_root, faults=faults, seed=args.seed).start()
        self.fake.on_put_complete = self.on_put_complete
        fake_counts = []
        checks = Checks()
        stats, aged, time_limited = {}, 0, False
        rng = harness.seeded(args.seed, "driver")
        # Every moment in turn (shuffled), so that even a short run covers all four.
        moments = [MOMENTS[i % len(MOMENTS)] for i in range(args.rounds)]
        rng.shuffle(moments)
        final_reserve = 150  # the final phase: jobs, the store clean-up (up to 60 s), the checks
        try:
            for number, moment in enumerate(moments, start=1):
                spent = time.monotonic() - began
                if spent + 15 + final_reserve > args.time_limit:
                    time_limited = True
                    break
                self.crash_round(number, moment, rng)
                print(f"round {number:3d}/{args.rounds}: kill at {moment:6s} "
                      f"({'hit' if self.rounds[-1]['hit'] else 'missed, killed anyway'}), "
                      f"{self.rounds[-1]['seconds']:.1f}s", flush=True)
            # A new fake on the same port and directory: objects must survive its restart.
            port = self.fake.port
            self.fake.stop()
            fake_counts.append(self.fake.counts())
            self.journal = self.fake.journal()
            self.fake = FakeS3(s3_root, port=port, faults=faults, seed=args.seed + 1).start()
            time_left = max(30.0, args.time_limit - (time.monotonic() - began))
            aged = self.final_phase(checks, time_left)
            stats = harness.check_stored_state(checks, self.data_dir, self.fake.objects(), explain=self.explain_object)
            self.ttl_phase(checks)
            code, output = harness.run_herald_check(args.herald, self.data_dir, self.fake.store_url)
            checks.add("herald_check", code == 0, [] if code == 0 else output.splitlines()[-20:])
            problems = harness.database_problems(self.data_dir)
            checks.add("db_integrity", not problems, problems)
        finally:
            if self.herald is not None and self.herald.alive():
                self.herald.kill()
            self.fake.stop()
            fake_counts.append(self.fake.counts())

        # Checks on what the clients saw.
        key_failures = [r for r in self.ledger.key_results if not r["ok"]]
        replayed = sum(1 for r in self.ledger.key_results if r["first"] == "accepted")
        checks.add("idempotent_replays_same_ids", not key_failures,
                   [f"key {r['key']}: expected {r['expected']}, got {r['got']} ({r['status']})" for r in key_failures],
                   note=f"{replayed} replays of accepted keys, {len(self.ledger.key_results) - replayed} of unknown ones")
        checks.add("no_unexpected_statuses", not self.unexpected,
                   [f"{u['kind']}: {u['status']} {u['body']}" for u in self.unexpected])
        for name in ("herald_stays_up", "db_integrity_after_kill", "media_answer_matches_bytes", "driver_errors"):
            checks.add(name, not self.ledger.problems[name], self.ledger.problem_details.get(name, []))

        s3 = {}
        for counts in fake_counts:
            for name, value in counts.items():
                if name == "requests":
                    for op, n in value.items():
                        s3.setdefault("requests", Counter())[op] += n
                else:
                    s3[name] = round(s3.get(name, 0) + value, 3)
        s3["requests"] = dict(s3.get("requests", {}))
        duration = time.monotonic() - began
        report = {
            "tool": "crashloop", "ok": checks.ok, "seed": args.seed, "rounds": args.rounds,
            "rounds_completed": len(self.rounds), "time_limited": time_limited, "duration_s": round(duration, 1),
            "herald": str(args.herald), "work_dir": self.work_dir,
            "faults": {"kills": dict(self.kills), "s3": s3},
            "requests": self.tally.as_dict(),
            "accepted": {"media": len(self.ledger.media), "posts": len(self.ledger.posts), "jobs": len(self.ledger.jobs),
                         "idempotency_keys": Counter(v["state"] for v in self.ledger.keys.values())},
            "final_state": stats, "staging_files_aged_for_sweep": aged,
            "cleanup_settle_s": None if self.cleanup_seconds is None else round(self.cleanup_seconds, 1),
            "round_details": self.rounds,
            "checks": checks.report(),
        }
        self.print_summary(report, checks)
        if args.json_out:
            with open(args.json_out, "w") as f:
                json.dump(report, f, indent=2, default=list)
        return report

    def print_summary(self, report, checks):
        out = sys.stdout
        s3 = report["faults"]["s3"]
        print(f"\ncrash loop: {report['rounds_completed']}/{report['rounds']} rounds in {report['duration_s']} s "
              f"(seed {report['seed']}){' - stopped by --time-limit' if report['time_limited'] else ''}", file=out)
        print(f"  kills: {dict(sorted(report['faults']['kills'].items()))}", file=out)
        print(f"  fake S3: {s3.get('slowdown_503', 0)} SlowDown 503s, {s3.get('drops', 0)} dropped connections, "
              f"{s3.get('delays', 0)} delayed PUTs ({s3.get('delay_seconds', 0)} s), "
              f"{s3.get('puts_completed', 0)} PUTs stored, {s3.get('puts_partial', 0)} partial", file=out)
        print(f"  accepted: {report['accepted']['media']} media, {report['accepted']['posts']} posts, "
              f"{report['accepted']['jobs']} jobs; keys {dict(report['accepted']['idempotency_keys'])}", file=out)
        state = report["final_state"]
        if state:
            print(f"  final: posts {state['posts_by_state']}, {state['objects']} objects, "
                  f"{state['staging_files']} staging files", file=out)
        print("  requests:", file=out)
        for kind, outcomes in report["requests"].items():
            print(f"    {kind:22s} {outcomes}", file=out)
        print("checks:", file=out)
        checks.print_summary(out)
        print("RESULT: " + ("PASS" if checks.ok else "FAIL"), file=out)


def _range(text):
    low, _, high = text.partition(":")
    return float(low), float(high or low)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--herald", default=str(harness.DEFAULT_HERALD), help="the herald binary")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100_000)
    parser.add_argument("--work-dir", help="where data and objects go (default: a temporary directory)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--time-limit", type=float, default=900, help="seconds for the whole run")
    parser.add_argument("--json-out", help="write the report as JSON here")
    parser.add_argument("--s3-delay", type=_range, default=(0.05, 0.6), help="PUT body read time MIN:MAX seconds")
    parser.add_argument("--s3-p503", type=float, default=0.08, help="probability of 503 SlowDown per PUT")
    parser.add_argument("--s3-pdrop", type=float, default=0.05, help="probability of a dropped connection per PUT")
    parser.add_argument("--s3-fault-methods", default="PUT", help="methods faults apply to, e.g. PUT,DELETE")
    args = parser.parse_args()
    if not os.access(args.herald, os.X_OK):
        parser.error(f"no herald binary at {args.herald}")
    driver, report = Driver(args), None
    try:
        report = driver.run()
    finally:
        work_dir = getattr(driver, "work_dir", None)
        if work_dir and not args.keep and not args.work_dir:
            if report and report["ok"]:
                shutil.rmtree(work_dir, ignore_errors=True)
            else:
                print(f"work directory kept for inspection: {work_dir}", file=sys.stderr)
    return 0 if report and report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
