#!/usr/bin/env python3
"""Crash loop on PostgreSQL: two replicas on one database and one S3 (the fake, keeping objects), SIGKILLed in turn
under load, then checked: no accepted post lost, none published twice, every published object whole.

    python3 Reliability/crashloop_replicas.py [--kills 10] [--seed N] [--herald PATH] [--time-limit S] [--keep]
                                              [--json-out PATH]

Clients send media and posts to either replica (auth off, `--lease-timeout 3 --lease-renew 1`); every 0.5-2 s one
replica, chosen at random, is SIGKILLed and started again under its `--replica-id`, on its port (it takes its own
running jobs back at once; the other takes over those of a replica that is down once their leases end). The fake
answers every PUT and copy after 0.2 s, so that uploads are in flight when a replica dies. Then both run without kills
until no job is queued or running (bounded), and the rows are read from PostgreSQL:
  accepted_posts_kept  every post answered 2xx is in the database, and its job ended succeeded (no upload fails here)
  published_once       no post has two succeeded jobs
  objects_whole        every published medium's object is in the store, with the SHA-256 recorded at ingest
  staging_emptied      no staged object of a published medium is left in the store, but where a replica died within
                       2 s of that post's commit (the object goes after the commit: the staging sweep takes it then)
Exits 1 if a check fails (the work directory is then kept).
"""
import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402 (it puts scripts/ on the path, for herald_support)
from harness import Checks, request  # noqa: E402
from herald_support import Herald, free_port  # noqa: E402
from herald_support.fake_s3 import CREDENTIALS, FakeS3  # noqa: E402
from herald_support.postgres import Postgres  # noqa: E402

CLIENTS = 3
REPLICAS = ("r1", "r2")
KILL_WINDOW = 2.0  # seconds from a commit to its staged objects' removal, at most (the fake answers a DELETE at once)


class Replica:
    """One `herald serve` under a fixed name, data directory and port, killed and started again by the loop."""

    def __init__(self, name, binary, work, database, store):
        self.name = name
        self.port = free_port()
        self.arguments = (binary, os.path.join(work, name), "--auth", "off", "--database", database, "--store", store,
                          "--replica-id", name, "--lease-timeout", "3", "--lease-renew", "1", "--workers", "3",
                          "--log-level", "warning", "--min-free-disk", "0")
        self.log = os.path.join(work, f"{name}.log")
        self.herald = None
        self.lock = threading.Lock()

    def start(self):
        binary, data, *flags = self.arguments
        herald = Herald(binary, data, *flags, port=self.port, name=self.name, log_path=self.log, append_log=True, env=CREDENTIALS)
        with self.lock:
            self.herald = herald.start(timeout=60)

    def kill(self):
        with self.lock:
            herald, self.herald = self.herald, None
        if herald:
            herald.kill()

    def stop(self):
        with self.lock:
            herald, self.herald = self.herald, None
        return herald.stop() if herald else None


def drive(replicas, rng, accepted, stop, errors):
    """One client: media then a post of them, each through a replica chosen at random, until `stop`."""
    sequence = 0
    while not stop.is_set():
        sequence += 1
        media = []
        for _ in range(rng.randint(1, 3)):
            replica = rng.choice(replicas)
            body = harness.media_bytes(rng, "image/png", rng.randint(200, 4000))
            answer = request(replica.port, "POST", "/v1/media", body=body, headers={"Content-Type": "image/png"}, timeout=20)
            if answer.status == 201:
                media.append(answer.json["id"])
        if not media:
            time.sleep(0.05)
            continue
        replica = rng.choice(replicas)
        answer = harness.json_request(replica.port, "POST", "/v1/posts", {"text": f"crash {sequence}", "media_ids": media}, timeout=20)
        if answer.status == 202:
            accepted.append((answer.json["post"]["id"], media))
        elif answer.status is not None and answer.status < 500:
            errors.append(f"POST /v1/posts answered {answer.status}: {answer.body[:200]!r}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=10, choices=range(1, 201), metavar="1..200")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--herald", default=str(harness.DEFAULT_HERALD))
    parser.add_argument("--time-limit", type=float, default=600, help="seconds the whole run may take")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--json-out")
    args = parser.parse_args()
    started = time.monotonic()
    rng = random.Random(args.seed)
    deadline = time.monotonic() + args.time_limit
    work = tempfile.mkdtemp(prefix="herald-crashloop-replicas-")
    checks = Checks()
    fake = FakeS3(os.path.join(work, "s3"), bucket="herald", latency=0.2).start()
    with Postgres(durable=False) as postgres:
        database = postgres.database()
        replicas = [Replica(name, args.herald, work, database, fake.store_url) for name in REPLICAS]
        for replica in replicas:
            replica.start()
        accepted, errors, stop, kills = [], [], threading.Event(), []
        clients = [threading.Thread(target=drive, args=(replicas, random.Random(args.seed * 100 + n), accepted, stop, errors), daemon=True)
                   for n in range(CLIENTS)]
        try:
            for client in clients:
                client.start()
            for kill in range(args.kills):
                if time.monotonic() > deadline - 120:
                    print(f"time limit: {kill} kills")
                    break
                time.sleep(rng.uniform(0.5, 2.0))
                replica = rng.choice(replicas)
                in_flight = fake.puts_in_flight()
                replica.kill()
                kills.append({"replica": replica.name, "uploads_in_flight": in_flight, "at": time.time()})
                print(f"kill {kill + 1}/{args.kills}: {replica.name} ({in_flight} uploads in flight), {len(accepted)} posts accepted",
                      flush=True)
                replica.start()
            stop.set()
            for client in clients:
                client.join(timeout=60)
            # Without kills: every accepted job ends (a dead replica's jobs once their leases end).
            active = None
            while time.monotonic() < deadline:
                active = int(postgres.sql("SELECT count(*) FROM jobs WHERE state IN ('queued', 'running', 'scheduled')",
                                          Postgres.name_of(database)))
                if active == 0:
                    break
                time.sleep(0.5)
            checks.add("jobs_settled", active == 0, [f"{active} jobs still queued, running or scheduled"] if active else [])
            check(checks, postgres, Postgres.name_of(database), accepted, fake, [kill["at"] for kill in kills])
            checks.add("driver_errors", not errors, [str(error) for error in errors[:5]])
        finally:
            stop.set()
            for replica in replicas:
                replica.stop()
            fake.stop()
    checks.print_summary(sys.stdout)
    result = {"kills": len(kills), "kills_with_uploads_in_flight": sum(1 for kill in kills if kill["uploads_in_flight"]),
              "posts_accepted": len(accepted), "seed": args.seed, "duration_s": round(time.monotonic() - started, 1),
              "checks": checks.report()}
    print(json.dumps({key: value for key, value in result.items() if key != "checks"}))
    if args.json_out:
        with open(args.json_out, "w") as file:
            json.dump(result, file, indent=2)
    if checks.ok and not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"work directory kept: {work}")
    sys.exit(0 if checks.ok else 1)


def check(checks, postgres, name, accepted, fake, kill_times):
    """The invariants, from PostgreSQL's rows and the fake's objects."""
    def rows(statement):
        return [line.split("|") for line in postgres.sql(statement, name).splitlines() if line]

    posts = dict(rows("SELECT id, state FROM posts"))
    jobs = {post: (int(succeeded), int(ended)) for post, succeeded, ended in rows(
        "SELECT post_id, count(*) FILTER (WHERE state = 'succeeded'), count(*) FILTER (WHERE state IN ('failed', 'cancelled')) "
        "FROM jobs GROUP BY post_id")}
    lost = [post for post, _ in accepted if posts.get(post) != "published"]
    checks.add("accepted_posts_kept", not lost, [f"post {post}: {posts.get(post) or 'missing'}, not published" for post in lost[:5]],
               note=f"{len(accepted)} accepted")
    twice = [post for post, (succeeded, _) in jobs.items() if succeeded > 1]
    checks.add("published_once", not twice, [f"post {post}: two succeeded jobs" for post in twice[:5]])
    published = rows("SELECT media.id, media.sha256, media.object_key, media.staging_path, extract(epoch FROM jobs.finished_at) "
                     "FROM media JOIN posts ON posts.id = media.post_id JOIN jobs ON jobs.id = posts.job_id "
                     "WHERE posts.state = 'published'")
    broken, staged, swept_later = [], [], []
    for media, digest, key, staging, finished in published:
        path = os.path.join(fake.root, fake.bucket, key)
        if not os.path.isfile(path) or harness.sha256(open(path, "rb").read()) != digest:
            broken.append(media)
        if staging and os.path.exists(os.path.join(fake.root, fake.bucket, staging)):
            # The staged object goes after the commit; a kill between the two leaves it to the staging sweep (its
            # grace is 10 minutes, longer than this run): allowed only when a replica died within 2 s of that commit.
            if any(0 <= at - float(finished) <= KILL_WINDOW for at in kill_times):
                swept_later.append(staging)
            else:
                staged.append(staging)
    checks.add("objects_whole", not broken, [f"published media {media}: object missing or changed" for media in broken[:5]])
    checks.add("staging_emptied", not staged, [f"{path}: a published medium's staged object, left with no kill after its commit"
                                               for path in staged[:5]],
               note=f"{len(swept_later)} left by kills just after their commit, for the staging sweep" if swept_later else None)


if __name__ == "__main__":
    main()
