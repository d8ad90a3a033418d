"""Shared code of the reliability drivers: Herald as they run it, HTTP with http.client, media bytes, SQLite and
the invariants every driver checks at the end. Starting processes and the S3 fake: scripts/herald_support.

Everything is loopback-only, and every wait is bounded in count and time.
"""
import hashlib
import http.client
import json
import os
import random
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from collections import Counter
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "scripts"))
from herald_support import HOST, Herald  # noqa: E402
from herald_support.fake_s3 import CREDENTIALS  # noqa: E402

DEFAULT_HERALD = REPO_ROOT / ".build-release" / "release" / "herald"

# -- media ---------------------------------------------------------------------------------------

# Leading bytes that pass Herald's signature check (MediaType.matches) for each accepted type.
MAGIC = {
    "image/png": b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR",
    "image/jpeg": b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01",
    "image/gif": b"GIF89a\x01\x00\x01\x00\x00\x00",
    "image/webp": b"RIFF\x00\x00\x00\x00WEBPVP8 ",
    "video/mp4": b"\x00\x00\x00\x18ftypisom\x00\x00\x02\x00",
    "video/quicktime": b"\x00\x00\x00\x14ftypqt  \x00\x00\x00\x00",
    "video/webm": b"\x1a\x45\xdf\xa3\x9f\x42\x86\x81\x01\x42\xf7\x81",
}
EXTENSION = {"image/png": "png", "image/jpeg": "jpg", "image/gif": "gif", "image/webp": "webp",
             "video/mp4": "mp4", "video/quicktime": "mov", "video/webm": "webm"}


def media_bytes(rng, content_type, size):
    """`size` bytes (at least the signature) that Herald accepts as `content_type`."""
    magic = MAGIC[content_type]
    return magic + rng.randbytes(max(0, size - len(magic)))


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def multipart(fields=(), files=()):
    """(body, content type) of a multipart/form-data form: `fields` (name, text), `files` (name, filename, type, bytes)."""
    boundary = "----herald-" + uuid.uuid4().hex
    out = []
    for name, value in fields:
        out.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode())
        out.append(value.encode() + b"\r\n")
    for name, filename, content_type, data in files:
        out.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
                   f"Content-Type: {content_type}\r\n\r\n".encode())
        out.append(data + b"\r\n")
    out.append(f"--{boundary}--\r\n".encode())
    return b"".join(out), f"multipart/form-data; boundary={boundary}"


def rfc3339(epoch_seconds):
    """Herald's timestamp form: UTC with milliseconds."""
    millis = int(round(epoch_seconds * 1000))
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(millis // 1000)) + f".{millis % 1000:03d}Z"


# -- HTTP ----------------------------------------------------------------------------------------

class Result:
    """One request's outcome: `status` (None if no answer) and `error`, a class of failure:
    "refused" (no connection), "reset" (connection closed or reset before any answer byte), "truncated" (the answer
    began and was cut off), "timeout", or "error:<type>"."""
    __slots__ = ("status", "headers", "body", "error", "started", "sent", "ended")

    def __init__(self):
        self.status = self.headers = self.body = self.error = None
        self.started = self.sent = self.ended = None

    @property
    def json(self):
        try:
            return json.loads(self.body) if self.body else None
        except ValueError:
            return None

    @property
    def outcome(self):
        """The status as text, or the error class: what the request tallies count."""
        return str(self.status) if self.status is not None else self.error

    def header(self, name):
        return (self.headers or {}).get(name.lower())


def request(port, method, path, body=None, headers=None, timeout=15.0, chunk_size=0, chunk_pause=0.0,
            on_body_start=None, on_body_end=None):
    """Sends one request on a new connection (`Connection: close`) and reads the whole answer.

    A body can be sent in `chunk_size` pieces with `chunk_pause` seconds between them (a slow client); the callbacks
    bracket the sending of the body, so a driver knows an ingest is in flight. Never raises for network failures.
    """
    result = Result()
    result.started = time.monotonic()
    connection = http.client.HTTPConnection(HOST, port, timeout=timeout)
    answering = False
    in_body = False
    try:
        connection.putrequest(method, path, skip_accept_encoding=True)
        all_headers = {"Connection": "close"}
        all_headers.update(headers or {})
        if body is not None:
            all_headers["Content-Length"] = str(len(body))
        for name, value in all_headers.items():
            connection.putheader(name, value)
        connection.endheaders()
        if body:
            if on_body_start:
                on_body_start()
            in_body = True
            step = chunk_size or len(body)
            for offset in range(0, len(body), step):
                connection.send(body[offset:offset + step])
                if chunk_pause and offset + step < len(body):
                    time.sleep(chunk_pause)
        result.sent = time.monotonic()
        if in_body and on_body_end:
            in_body = False
            on_body_end()
        response = connection.getresponse()
        answering = True
        result.status = response.status
        result.headers = {k.lower(): v for k, v in response.getheaders()}
        result.body = response.read()
    except ConnectionRefusedError:
        result.error = "refused"
    except socket.timeout:
        result.error = "timeout"
    except http.client.IncompleteRead:
        result.error = "truncated"
    except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ConnectionAbortedError):
        result.error = "truncated" if answering else "reset"
    except http.client.BadStatusLine:
        result.error = "truncated"
    except OSError as error:
        result.error = f"error:{type(error).__name__}"
    finally:
        if in_body and on_body_end:
            on_body_end()
        connection.close()
        result.ended = time.monotonic()
    if result.error and answering and result.status is not None:
        # An answer whose head arrived but whose body did not is not an answer.
        result.status = None
    return result


def json_request(port, method, path, value=None, headers=None, timeout=15.0):
    body = json.dumps(value).encode() if value is not None else None
    all_headers = {"Content-Type": "application/json"} if body is not None else {}
    all_headers.update(headers or {})
    return request(port, method, path, body=body, headers=all_headers, timeout=timeout)


# -- Herald --------------------------------------------------------------------------------------

def start_herald(binary, data_dir, store, extra_args=(), log_path=None):
    """`herald serve` as the drivers run it (no auth, warnings only, one log across restarts), once /readyz is 200."""
    return Herald(binary, data_dir, "--auth", "off", "--store", store, "--log-level", "warning", *extra_args,
                  log_path=log_path, append_log=True, env=CREDENTIALS).start()


def wait_idle_queue(port, timeout, poll=0.25):
    """Waits until /v1/queue shows nothing running, queued or scheduled; True if it did within `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        answer = request(port, "GET", "/v1/queue", timeout=5).json
        if answer and answer.get("running") == 0 and answer.get("queued") == 0 and answer.get("scheduled") == 0:
            return True
        time.sleep(poll)
    return False


# -- checks --------------------------------------------------------------------------------------

class Checks:
    """Named pass/fail results with a few details each, for the summary and the JSON report."""

    def __init__(self):
        self.results = {}

    def add(self, name, ok, details=None, note=None):
        details = list(details or [])
        entry = self.results.setdefault(name, {"ok": True, "count": 0, "details": [], "note": note})
        entry["ok"] = entry["ok"] and bool(ok)
        entry["count"] += len(details)
        entry["details"].extend(details[: max(0, 20 - len(entry["details"]))])
        if note:
            entry["note"] = note

    @property
    def ok(self):
        return all(entry["ok"] for entry in self.results.values())

    def report(self):
        return {"passed": sorted(n for n, e in self.results.items() if e["ok"]),
                "failed": sorted(n for n, e in self.results.items() if not e["ok"]),
                "details": self.results}

    def print_summary(self, out):
        for name, entry in self.results.items():
            mark = "PASS" if entry["ok"] else "FAIL"
            note = f" ({entry['note']})" if entry.get("note") else ""
            print(f"  {mark} {name}{note}", file=out)
            if not entry["ok"]:
                for detail in entry["details"][:10]:
                    print(f"       - {detail}", file=out)
                if entry["count"] > 10:
                    print(f"       ... {entry['count'] - 10} more", file=out)


class Tally:
    """Thread-safe counts of requests by kind and outcome."""

    def __init__(self):
        self._lock = threading.Lock()
        self._counts = {}

    def add(self, kind, outcome):
        with self._lock:
            self._counts.setdefault(kind, Counter())[outcome] += 1

    def as_dict(self):
        with self._lock:
            return {kind: dict(sorted(c.items())) for kind, c in sorted(self._counts.items())}


# -- the data directory and the store (read after Herald has exited, but for the clean-up's outbox) --

def open_database(data_dir):
    connection = sqlite3.connect(os.path.join(data_dir, "herald.sqlite"), timeout=10)
    connection.row_factory = sqlite3.Row
    return connection


def database_problems(data_dir):
    """SQLite's integrity and foreign-key checks: [] when both are clean."""
    try:
        with open_database(data_dir) as db:
            integrity = [row[0] for row in db.execute("PRAGMA integrity_check")]
            foreign = [tuple(row) for row in db.execute("PRAGMA foreign_key_check")]
    except sqlite3.DatabaseError as error:
        return [f"the database cannot be read: {error}"]
    problems = [] if integrity == ["ok"] else [f"integrity_check: {line}" for line in integrity]
    problems += [f"foreign_key_check: {row}" for row in foreign]
    return problems


def backdate_staging(data_dir, seconds=3600):
    """Ages every staging file by `seconds`: the sweep leaves files younger than 10 minutes alone (they may be an
    ingest in progress), so a short run ages them to let the sweep at the next start judge them. Returns how many."""
    folder = os.path.join(data_dir, "staging")
    if not os.path.isdir(folder):
        return 0
    then = time.time() - seconds
    names = os.listdir(folder)
    for name in names:
        try:
            os.utime(os.path.join(folder, name), (then, then))
        except FileNotFoundError:
            pass
    return len(names)


def object_key(media_id, content_type):
    """`MediaObject.key(mediaID:fileExtension:)`: media/<id>.<ext>."""
    return f"media/{media_id}.{EXTENSION[content_type]}"


def pending_object_deletions(data_dir, limit=5):
    """(count, the first `limit` rows) of `object_deletions`, the store clean-up's outbox. Opened read-only, so it can
    be read while Herald runs (the database is in WAL mode). Raises sqlite3.Error."""
    path = os.path.join(data_dir, "herald.sqlite")
    connection = sqlite3.connect(f"file:{urllib.parse.quote(path)}?mode=ro", uri=True, timeout=5)
    try:
        connection.row_factory = sqlite3.Row
        count = connection.execute("SELECT count(*) FROM object_deletions").fetchone()[0]
        rows = [dict(row) for row in connection.execute(
            "SELECT media_id, content_type, due_at, attempts, last_error FROM object_deletions ORDER BY due_at LIMIT ?",
            (limit,))]
    finally:
        connection.close()
    return count, rows


def wait_cleanup_settled(checks, data_dir, timeout=60.0, poll=0.5):
    """With Herald running and its queue idle: waits (at most `timeout` s) until `object_deletions` is empty, i.e.
    Herald's second pass has deleted every object a failed or cancelled job may have left (rows are due 10 s after
    the job's end; a failed DELETE is retried 5 s later, doubling). Adds store_cleanup_settled; returns the seconds
    it took, or None if rows remained."""
    began = time.monotonic()
    count, rows, error = None, [], None
    for _ in range(int(timeout / poll) + 2):  # bounded by the count as well as the deadline
        try:
            count, rows = pending_object_deletions(data_dir)
            error = None
        except sqlite3.Error as failure:
            error = failure
            if "no such table" in str(failure):
                break  # a Herald from before migration 0007: nothing will ever settle
        if count == 0 or time.monotonic() - began >= timeout:
            break
        time.sleep(poll)
    seconds = time.monotonic() - began
    if count == 0:
        checks.add("store_cleanup_settled", True, note=f"object_deletions empty after {seconds:.1f} s")
        return seconds
    if error is not None:
        details = [f"object_deletions cannot be read: {error}"]
    else:
        details = [f"{count} rows left after {seconds:.1f} s"] + [
            f"media {r['media_id']} ({r['content_type']}): due {r['due_at']}, attempts {r['attempts']}, "
            f"last_error {r['last_error']}" for r in rows]
    checks.add("store_cleanup_settled", False, details)
    return None


def check_stored_state(checks, data_dir, objects, require_no_active=True, explain=None):
    """The invariants on what Herald left on disk and in the store, read with Herald stopped.

    `objects` is the fake store's listing (key -> {"size", "sha256"}); `explain(key)`, if given, adds the store's
    history of an orphan object to its detail. Call wait_cleanup_settled first (with Herald running): objects of
    failed and cancelled posts leave the store only once the clean-up's second pass has run. Adds to `checks`:
      db_integrity, published_media_uploaded, one_success_per_post, no_orphan_objects, staging_matches_rows,
      and (with `require_no_active`) no_active_jobs_left.
    """
    problems = database_problems(data_dir)
    checks.add("db_integrity", not problems, problems)
    try:
        with open_database(data_dir) as db:
            posts = {row["id"]: dict(row) for row in db.execute("SELECT id, state, job_id, published_at FROM posts")}
            media = {row["id"]: dict(row) for row in db.execute(
                "SELECT id, content_type, size, sha256, state, url, post_id, object_key, staging_path FROM media")}
            jobs = [dict(row) for row in db.execute("SELECT id, post_id, state FROM jobs")]
    except sqlite3.DatabaseError as error:
        for name in ("published_media_uploaded", "one_success_per_post", "no_orphan_objects", "staging_matches_rows"):
            checks.add(name, False, [f"not checked: the database cannot be read ({error})"])
        return {}

    # A post is published only with every medium uploaded and its object, byte for byte, in the store.
    problems = []
    by_post = {}
    for m in media.values():
        if m["post_id"]:
            by_post.setdefault(m["post_id"], []).append(m)
    for post in posts.values():
        if post["state"] != "published":
            continue
        for m in by_post.get(post["id"], []):
            key = object_key(m["id"], m["content_type"])
            stored = objects.get(key)
            if m["state"] != "uploaded" or not m["url"]:
                problems.append(f"post {post['id']} published but media {m['id']} is {m['state']} (url {m['url']})")
            elif m["object_key"] != key:
                problems.append(f"media {m['id']} of published post {post['id']} has object_key {m['object_key']}, expected {key}")
            elif stored is None:
                problems.append(f"post {post['id']} published but object {key} is not in the store")
            elif stored["size"] != m["size"] or stored["sha256"] != m["sha256"]:
                problems.append(f"object {key} of published post {post['id']} differs from media {m['id']} "
                                f"(size {stored['size']} vs {m['size']})")
    for m in media.values():
        if m["state"] == "uploaded" and (not m["post_id"] or posts.get(m["post_id"], {}).get("state") != "published"):
            problems.append(f"media {m['id']} is uploaded but its post {m['post_id']} is not published")
    checks.add("published_media_uploaded", not problems, problems)

    # Never published twice: one succeeded job per post at most, and it is the published post's current job.
    problems = []
    succeeded = Counter(job["post_id"] for job in jobs if job["state"] == "succeeded")
    for post_id, count in succeeded.items():
        if count > 1:
            problems.append(f"post {post_id} has {count} succeeded jobs")
    for post in posts.values():
        published = post["state"] == "published"
        if published != (succeeded.get(post["id"], 0) == 1):
            problems.append(f"post {post['id']} is {post['state']} with {succeeded.get(post['id'], 0)} succeeded jobs")
        if published and not any(j["id"] == post["job_id"] and j["state"] == "succeeded" for j in jobs):
            problems.append(f"published post {post['id']}'s current job {post['job_id']} did not succeed")
    checks.add("one_success_per_post", not problems, problems)

    if require_no_active:
        active = [f"job {j['id']} is {j['state']}" for j in jobs if j["state"] in ("queued", "scheduled", "running")]
        checks.add("no_active_jobs_left", not active, active)

    # Every object in the store is a medium of a published post: nothing of a failed, cancelled or unknown post.
    problems = []
    for key in sorted(objects):
        stem = key[len("media/"):].rsplit(".", 1)[0] if key.startswith("media/") else None
        m = media.get(stem)
        if m is None or object_key(m["id"], m["content_type"]) != key:
            problems.append(f"object {key}: no medium has this key")
            continue
        post = posts.get(m["post_id"]) if m["post_id"] else None
        if post is None or post["state"] != "published":
            state = post["state"] if post else "no post"
            detail = (f"object {key}: media {m['id']} of post {m['post_id']} ({state})"
                      + (f"; store history: {explain(key)}" if explain else ""))
            problems.append(detail)
    checks.add("no_orphan_objects", not problems, problems)

    # Staging: exactly the files of media not yet published (no stray file, no live row without its file).
    folder = os.path.join(data_dir, "staging")
    files = {"staging/" + name for name in (os.listdir(folder) if os.path.isdir(folder) else [])}
    live = {m["staging_path"] for m in media.values()
            if not m["post_id"] or posts.get(m["post_id"], {}).get("state") != "published"}
    problems = [f"stray staging file {path} (no row needs it)" for path in sorted(files - live)]
    problems += [f"media row needs {path}, which is missing" for path in sorted(live - files)]
    checks.add("staging_matches_rows", not problems, problems)
    return {"posts": len(posts), "media": len(media), "jobs": len(jobs), "objects": len(objects),
            "staging_files": len(files),
            "posts_by_state": dict(Counter(p["state"] for p in posts.values())),
            "jobs_by_state": dict(Counter(j["state"] for j in jobs))}


def run_herald_check(binary, data_dir, store, timeout=60):
    """`herald check`: Herald's own consistency check of the database, staging and the store. (exit code, output)."""
    env = dict(os.environ, **CREDENTIALS)
    try:
        done = subprocess.run([str(binary), "check", "--data-dir", str(data_dir), "--store", store],
                              capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return None, "timed out"
    return done.returncode, (done.stdout + done.stderr).strip()


def seeded(seed, *parts):
    """A Random of its own for each thread and round, derived from the run's seed."""
    return random.Random(f"{seed}:" + ":".join(map(str, parts)))
