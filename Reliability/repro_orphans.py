#!/usr/bin/env python3
"""Regression checks: no object stays in the store for a post that is not published (three cases crashloop.py found).

    python3 Reliability/repro_orphans.py [race|requeued|delete_fault|all] [--herald PATH]

race:      a running job is cancelled while the store is still taking a PUT whose body Herald has already sent in
           full; the store completes that PUT after the runner's immediate clean-up DELETE.
requeued:  a job that had uploaded one medium when Herald was killed is back in the queue at the next start and is
           cancelled there, before a worker runs it again (no runner, so no immediate DELETE).
delete_fault: the clean-up DELETEs after a cancel meet transient failures (reset connections) until the cleaner's
           first try has failed too; then the store recovers.
Herald's answer to all three is the durable outbox `object_deletions` (Migrations/0007): the transaction that ends a
job failed or cancelled queues its post's objects for deletion 10 s later, and ObjectCleaner deletes them, retrying
failed DELETEs (5 s, doubling). Each scenario waits (bounded) for that table to empty, then checks that no object of
the cancelled post is left. Exits 0 when every scenario passes, 1 otherwise.
"""
import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402 (it puts scripts/ on the path, for herald_support)
from harness import json_request, request, start_herald  # noqa: E402
from herald_support.fake_s3 import FakeS3, Faults  # noqa: E402


def upload(port, content_type="image/png", size=4000):
    data = harness.media_bytes(harness.seeded(0, size), content_type, size)
    result = request(port, "POST", "/v1/media", body=data, headers={"Content-Type": content_type})
    assert result.status == 201, result.outcome
    return result.json["id"]


def post(port, media_ids, priority="normal"):
    result = json_request(port, "POST", "/v1/posts", {"text": "repro", "media_ids": media_ids, "priority": priority})
    assert result.status == 202, (result.outcome, result.body)
    return result.json["post"]["id"], result.json["job"]["id"]


def wait_job(port, job_id, states, timeout=15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = request(port, "GET", f"/v1/jobs/{job_id}").json
        if job and job["state"] in states:
            return job
        time.sleep(0.05)
    raise RuntimeError(f"job {job_id} did not reach {states}")


def orphans(fake, port, post_id):
    """The store's objects for the media of `post_id` (a post that is not published)."""
    media = request(port, "GET", f"/v1/posts/{post_id}").json["media"]
    keys = {harness.object_key(m["id"], m["content_type"]) for m in media}
    return sorted(k for k in fake.objects() if k in keys)


def settle(data, timeout=40):
    """Seconds until `object_deletions` is empty (Herald running), or None after `timeout`."""
    began = time.monotonic()
    for _ in range(int(timeout / 0.25)):
        if harness.pending_object_deletions(data)[0] == 0:
            return time.monotonic() - began
        time.sleep(0.25)
    return None


def verdict(name, fake, port, data, post_id, job):
    """Waits for the clean-up to settle, then: True if no object of the (cancelled) post is left."""
    if job["state"] != "cancelled":
        print(f"{name}: FAIL, the job is {job['state']}, not cancelled: nothing was tested")
        return False
    seconds = settle(data)
    left = orphans(fake, port, post_id)
    for key in left:
        history = "; ".join(f"{op} {outcome}" for _, op, _, outcome in fake.journal(key))
        print(f"{name}: ORPHAN {key} of cancelled post {post_id}; store saw: {history}")
    settled = "not settled after 40 s" if seconds is None else f"settled in {seconds:.1f} s"
    print(f"{name}: {'FAIL' if left or seconds is None else 'PASS'} (clean-up {settled}, {len(left)} objects left)")
    return seconds is not None and not left


def race(binary, work):
    # Every PUT body is read over 2 s: small bodies sit whole in the socket buffers meanwhile.
    fake = FakeS3(os.path.join(work, "s3"), faults=Faults(delay=(2.0, 2.0), p_delay=1.0)).start()
    data = os.path.join(work, "data")
    herald = start_herald(binary, data, fake.store_url, log_path=os.path.join(work, "herald.log"))
    try:
        post_id, job_id = post(herald.port, [upload(herald.port)])
        assert fake.wait_put_in_flight(10), "no PUT started"
        time.sleep(0.3)
        cancel = request(herald.port, "POST", f"/v1/jobs/{job_id}/cancel")
        job = wait_job(herald.port, job_id, {"cancelled", "succeeded"})
        time.sleep(3)  # the store finishes reading the body it already has
        landed = bool(orphans(fake, herald.port, post_id))
        print(f"race: cancel answered {cancel.status}; job is {job['state']}; "
              f"the PUT {'landed after the immediate DELETE' if landed else 'did not land (race not hit)'}")
        return verdict("race", fake, herald.port, data, post_id, job)
    finally:
        herald.stop()
        fake.stop()


def requeued(binary, work):
    # PUTs take 1.5 s each, one at a time per job, one job at a time.
    fake = FakeS3(os.path.join(work, "s3"), faults=Faults(delay=(1.5, 1.5), p_delay=1.0)).start()
    data = os.path.join(work, "data")
    args = ["--workers", "1", "--upload-concurrency", "1"]
    herald = start_herald(binary, data, fake.store_url, extra_args=args, log_path=os.path.join(work, "herald.log"))
    try:
        post_a, job_a = post(herald.port, [upload(herald.port, size=3000), upload(herald.port, size=3001)])
        blocker = [upload(herald.port, size=3002)]
        deadline = time.monotonic() + 10
        while fake.counts()["puts_completed"] < 1 and time.monotonic() < deadline:
            time.sleep(0.02)  # A's first medium is stored, its second is uploading
        post(herald.port, blocker, priority="high")  # queued behind A now; claimed first after a restart
        herald.kill()
        print(f"requeued: killed with A's first object stored ({sorted(fake.objects())})")
        herald = start_herald(binary, data, fake.store_url, extra_args=args, log_path=os.path.join(work, "herald.log"))
        before = request(herald.port, "GET", f"/v1/jobs/{job_a}").json
        cancel = request(herald.port, "POST", f"/v1/jobs/{job_a}/cancel")
        job = wait_job(herald.port, job_a, {"cancelled", "succeeded", "failed"})
        print(f"requeued: after the restart A's job was {before['state']} (attempt {before['attempt']}); "
              f"cancel answered {cancel.status}; job is {job['state']}")
        return verdict("requeued", fake, herald.port, data, post_a, job)
    finally:
        herald.stop()
        fake.stop()


def delete_fault(binary, work):
    # PUTs take 1.5 s, one at a time; once the first medium is stored, every DELETE is reset by the store until the
    # cleaner's first try has failed as well (the immediate one failed long before).
    fake = FakeS3(os.path.join(work, "s3"), faults=Faults(delay=(1.5, 1.5), p_delay=1.0)).start()
    data = os.path.join(work, "data")
    herald = start_herald(binary, data, fake.store_url, extra_args=["--upload-concurrency", "1"],
                          log_path=os.path.join(work, "herald.log"))
    try:
        first = upload(herald.port, size=3000)
        post_id, job_id = post(herald.port, [first, upload(herald.port, size=3001)])
        deadline = time.monotonic() + 10
        while fake.counts()["puts_completed"] < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        fake.set_faults(Faults(delay=(1.5, 1.5), p_delay=1.0, p_drop=1.0, fault_methods=("DELETE",)))
        cancel = request(herald.port, "POST", f"/v1/jobs/{job_id}/cancel")
        job = wait_job(herald.port, job_id, {"cancelled", "succeeded"})
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            _, rows = harness.pending_object_deletions(data)
            if any(row["attempts"] >= 1 for row in rows):
                break
            time.sleep(0.25)
        key = harness.object_key(first, "image/png")
        failed = [outcome for _, op, _, outcome in fake.journal(key) if op == "DELETE"]
        fake.set_faults(Faults())
        print(f"delete_fault: cancel answered {cancel.status}; job is {job['state']}; DELETEs of {key} so far: "
              f"{failed}; the store recovers now")
        return verdict("delete_fault", fake, herald.port, data, post_id, job)
    finally:
        herald.stop()
        fake.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", nargs="?", default="all", choices=["race", "requeued", "delete_fault", "all"])
    parser.add_argument("--herald", default=str(harness.DEFAULT_HERALD))
    args = parser.parse_args()
    failed = []
    for name, scenario in (("race", race), ("requeued", requeued), ("delete_fault", delete_fault)):
        if args.scenario in (name, "all"):
            with tempfile.TemporaryDirectory(prefix=f"herald-repro-{name}-") as work:
                if not scenario(args.herald, work):
                    failed.append(name)
    print(f"RESULT: FAIL ({', '.join(failed)})" if failed else "RESULT: PASS")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
