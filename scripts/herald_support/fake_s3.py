#!/usr/bin/env python3
"""A small S3-compatible fake for the reliability drivers and the benchmarks: path-style, no signature checks,
faults on demand.

It answers what Herald's `S3MediaStore` sends (HeadBucket, PutObject with a Content-Length body, CopyObject,
HeadObject, DeleteObject, DeleteObjects with its Content-MD5 checked) and GetObject, on 127.0.0.1. Objects live in a directory on disk (`ROOT/BUCKET/KEY`), written to a
temporary file and renamed into place only once the whole body has arrived: a PUT cut short stores nothing, as
with S3. They therefore survive a restart of the fake and can be listed at the end of a run. With no root, bodies
are read, counted and dropped (the benchmarks send a gigabyte through it).

For the benchmarks, timing: `latency` holds each PUT's answer until that many seconds after its head arrived, and
`hang` never answers a PUT, but waits for its client to close; `puts`, `received` and `closed` record when.

Faults, drawn from one seeded `random.Random` (the draws are seeded; their order follows thread timing):
  * delay: a PUT's body is read slowly, spread over a time drawn from `delay` (min, max) seconds;
  * 503 SlowDown: the body is read and discarded, then `503` with S3's `SlowDown` error (Herald retries it);
  * drop: part of the body is read, then the connection is reset (RST) without an answer.
Faults apply to the methods in `fault_methods` (PUT by default). Every injected fault is counted (``counts()``).

Used in process (``FakeS3(...).start()``, a thread of the driver) or on its own:
    python3 scripts/herald_support/fake_s3.py --root DIR [--port N] [--delay 0.1:1] [--p503 0.1] [--pdrop 0.05] [--seed 1]
which prints `PORT <n>` and serves until SIGTERM/SIGINT, then prints its counts as JSON.
"""
import argparse
import base64
import hashlib
import json
import os
import random
import select
import shutil
import signal
import socket
import struct
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit
from xml.etree import ElementTree

# Herald's S3 credentials for a fake: any will do, it checks no signature.
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "fake", "AWS_SECRET_ACCESS_KEY": "fake"}


@dataclass
class Faults:
    """What to inject; probabilities are per request of a method in `fault_methods`."""
    delay: tuple = (0.0, 0.0)      # seconds a PUT body takes to read, drawn uniformly; (0, 0): no delay
    p_delay: float = 1.0           # share of PUTs that get a delay (when `delay` is not (0, 0))
    p_slowdown: float = 0.0        # 503 SlowDown
    p_drop: float = 0.0            # connection reset mid-body
    fault_methods: tuple = ("PUT",)


def _error_xml(code, message, resource=""):
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}</Message>'
            f"<Resource>{resource}</Resource><RequestId>fake</RequestId></Error>").encode()


class FakeS3:
    """The fake: start it, point Herald's `--store` at ``store_url``, read ``counts()`` and ``objects()``."""

    def __init__(self, root, bucket="herald", port=0, faults=None, seed=0, region="us-east-1", latency=0.0, hang=False,
                 hang_copies=False):
        self.root = os.path.abspath(root) if root else None
        self.bucket = bucket
        self.region = region
        self.faults = faults or Faults()
        self.latency = latency
        self.hang = hang
        self.hang_copies = hang_copies  # CopyObject (a replica's upload of staged bytes) never answered, as `hang`
        self.bytes_received = 0        # PUT body bytes, as they arrive
        self.puts = []                 # answered PUTs: (key, head arrived, answered), monotonic
        self.received = {}             # hang: key -> when its whole body had arrived
        self.closed = {}               # hang: key -> when its client closed the connection
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._in_flight = 0            # PUTs between their request line and their answer (or reset)
        self._put_ends = {}            # in-flight delayed PUT -> when its slow read ends (monotonic)
        self._counts = {"requests": {}, "slowdown_503": 0, "drops": 0, "delays": 0, "delay_seconds": 0.0,
                        "puts_completed": 0, "puts_partial": 0, "puts_stored_after_client_left": 0}
        self._connections = set()
        # The last events per key, for explaining a finding: (monotonic time, operation, key, outcome).
        self._journal = deque(maxlen=200_000)
        self._requested_port = port
        self._server = None
        self._thread = None
        # Called as on_put_complete(key) once a complete PUT has been answered (from the handler's thread).
        self.on_put_complete = None
        if self.root:
            os.makedirs(os.path.join(self.root, bucket), exist_ok=True)
            os.makedirs(os.path.join(self.root, ".tmp"), exist_ok=True)

    # -- life cycle ---------------------------------------------------------------------------

    def start(self):
        fake = self

        class Handler(_Handler):
            pass

        Handler.fake = fake
        self._server = _Server(("127.0.0.1", self._requested_port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="fake-s3", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        """Stops listening and resets the open connections, so no handler of this instance answers again."""
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            connections = list(self._connections)
        for sock in connections:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._thread.join(timeout=5)
        self._server = None
        # A handler may still be reading a body that had arrived in full (and will store it, as S3 would): wait for
        # it, so that nothing of this instance happens after stop() returns.
        deadline = time.monotonic() + 30
        with self._changed:
            while self._in_flight and time.monotonic() < deadline:
                self._changed.wait(0.1)

    @property
    def port(self):
        return self._server.server_address[1]

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.port}"

    @property
    def store_url(self):
        """Herald's `--store` value for this fake."""
        return f"s3://{self.bucket}?endpoint={self.endpoint}&region={self.region}"

    # -- what the drivers read ----------------------------------------------------------------

    def counts(self):
        with self._lock:
            snapshot = json.loads(json.dumps(self._counts))
        snapshot["delay_seconds"] = round(snapshot["delay_seconds"], 3)
        return snapshot

    def puts_in_flight(self):
        with self._lock:
            return self._in_flight

    def longest_put_remaining(self):
        """Seconds until the slowest delayed PUT in flight has read its body (0 if none): a driver that needs a job
        still running some time from now aims at this."""
        with self._lock:
            return max((end - time.monotonic() for end in self._put_ends.values()), default=0.0)

    def wait_put_in_flight(self, timeout):
        """True as soon as a PUT is in flight, False if none starts within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._in_flight == 0:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(remaining)
            return True

    def wait(self, predicate, timeout=60):
        """Waits until `predicate(fake)` holds (read under the fake's lock); RuntimeError if not within `timeout` s."""
        with self._changed:
            if not self._changed.wait_for(lambda: predicate(self), timeout=timeout):
                raise RuntimeError("the fake S3 server did not see what was expected in time")

    def clear_puts(self):
        with self._lock:
            self.puts.clear()

    def objects(self):
        """Every stored object: key -> {"size", "sha256"} (none without a root)."""
        found = {}
        if not self.root:
            return found
        base = os.path.join(self.root, self.bucket)
        for directory, _, files in os.walk(base):
            for name in files:
                path = os.path.join(directory, name)
                key = os.path.relpath(path, base).replace(os.sep, "/")
                digest = hashlib.sha256()
                with open(path, "rb") as f:
                    for block in iter(lambda: f.read(1 << 16), b""):
                        digest.update(block)
                found[key] = {"size": os.path.getsize(path), "sha256": digest.hexdigest()}
        return found

    def journal(self, key=None):
        """Recorded events, oldest first (only `key`'s if given): (monotonic time, operation, key, outcome)."""
        with self._lock:
            return [event for event in self._journal if key is None or event[2] == key]

    def set_faults(self, faults):
        with self._lock:
            self.faults = faults

    # -- used by the handler ------------------------------------------------------------------

    def _count(self, name, amount=1):
        with self._lock:
            self._counts[name] += amount

    def _record(self, operation, key, outcome):
        with self._lock:
            self._journal.append((time.monotonic(), operation, key, outcome))

    def _count_request(self, operation):
        with self._lock:
            requests = self._counts["requests"]
            requests[operation] = requests.get(operation, 0) + 1

    def _note(self, record, key, when):
        """Records a time in `received` or `closed` and wakes wait()."""
        with self._changed:
            record[key] = when
            self._changed.notify_all()

    def _put_started(self):
        with self._changed:
            self._in_flight += 1
            self._changed.notify_all()

    def _put_ended(self):
        with self._changed:
            self._in_flight -= 1
            self._changed.notify_all()

    def _draw(self, method):
        """The fault for one request: ("drop", fraction), ("slowdown", None), ("delay", seconds) or (None, None)."""
        with self._lock:
            faults, rng = self.faults, self._rng
            if method not in faults.fault_methods:
                return None, None
            roll = rng.random()
            if roll < faults.p_drop:
                return "drop", rng.random()
            if roll < faults.p_drop + faults.p_slowdown:
                return "slowdown", None
            low, high = faults.delay
            if method == "PUT" and high > 0 and rng.random() < faults.p_delay:
                return "delay", rng.uniform(low, high)
            return None, None

    def _object_path(self, key):
        """Where `key` is kept: None for a key S3 would refuse, "" when bodies are not kept (no root)."""
        parts = key.split("/")
        if not key or any(part in ("", ".", "..") for part in parts):
            return None
        return os.path.join(self.root, self.bucket, *parts) if self.root else ""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # socketserver listens with a backlog of 5: of 8 uploads connecting at once, some SYNs were dropped and retried a
    # second later, so their PUTs went out on the first connections freed (a benchmark job of 8 at
    # --upload-concurrency 8 took two latencies instead of one, in about one round in three).
    request_queue_size = 1024

    def handle_error(self, request, client_address):
        pass  # a client that went away mid-request is part of the game


class _Reset(Exception):
    """Raised after the handler reset its connection on purpose."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # S3 answers a head and a body without a delayed-ACK stall between them
    timeout = 60  # idle keep-alive connections are closed eventually
    fake: FakeS3 = None

    def version_string(self):
        return "fake-s3"

    def log_message(self, format, *args):
        pass

    def setup(self):
        super().setup()
        with self.fake._lock:
            self.fake._connections.add(self.connection)

    def finish(self):
        with self.fake._lock:
            self.fake._connections.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass

    def handle_one_request(self):
        try:
            super().handle_one_request()
        except _Reset:
            self.close_connection = True
        except (ConnectionError, socket.timeout, OSError):
            self.close_connection = True

    # -- plumbing -----------------------------------------------------------------------------

    def _target(self):
        """(bucket, key or None) of a path-style request."""
        path = unquote(urlsplit(self.path).path)
        bucket, _, key = path.lstrip("/").partition("/")
        return bucket, (key or None)

    def _answer(self, status, body=b"", headers=(), content_type="application/xml"):
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        if body:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)
        self.wfile.flush()

    def _reset(self):
        """Closes the connection with a RST: the client sees it reset, with no answer."""
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
        except OSError:
            pass
        raise _Reset()

    def _read_into(self, out, md5, length, delay):
        """Reads `length` body bytes (spread over `delay` seconds) into `out` and `md5`, if given: how many arrived.
        A megabyte at a time: the benchmarks send a gigabyte."""
        pieces = max(1, min(16, length // 1024)) if delay else 1
        piece = max(1, -(-length // pieces))
        received = 0
        while received < length:
            if delay:
                time.sleep(delay / pieces)
            end = min(received + piece, length)
            while received < end:
                chunk = self.rfile.read(min(end - received, 1 << 20))
                if not chunk:
                    return received
                with self.fake._lock:
                    self.fake.bytes_received += len(chunk)
                if out is not None:
                    out.write(chunk)
                    md5.update(chunk)
                received += len(chunk)
        return received

    def _read_exactly(self, count):
        """Reads `count` body bytes (less only if the client went away)."""
        chunks, remaining = [], count
        while remaining > 0:
            chunk = self.rfile.read(min(remaining, 64 << 10))
            if not chunk:
                break
            with self.fake._lock:
                self.fake.bytes_received += len(chunk)
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)

    # -- requests -----------------------------------------------------------------------------

    def do_HEAD(self):
        bucket, key = self._target()
        self.fake._count_request("HeadBucket" if key is None else "HeadObject")
        if bucket != self.fake.bucket:
            return self._answer(404)
        if key is None:
            return self._answer(200, headers=[("x-amz-bucket-region", self.fake.region)])
        path = self.fake._object_path(key)
        if not path or not os.path.isfile(path):
            return self._answer(404)
        self._answer_object_head(path)

    def _answer_object_head(self, path, with_body=False):
        with open(path, "rb") as f:
            data = f.read()
        headers = [("ETag", f'"{hashlib.md5(data).hexdigest()}"')]
        self.send_response(200)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if with_body:
            self.wfile.write(data)
        self.wfile.flush()

    def do_GET(self):
        bucket, key = self._target()
        self.fake._count_request("GetObject" if key else "ListObjects")
        if bucket != self.fake.bucket or key is None:
            return self._answer(404 if bucket != self.fake.bucket else 501,
                                _error_xml("NoSuchBucket" if bucket != self.fake.bucket else "NotImplemented", "not here"))
        path = self.fake._object_path(key)
        if not path or not os.path.isfile(path):
            return self._answer(404, _error_xml("NoSuchKey", "The specified key does not exist.", key))
        self._answer_object_head(path, with_body=True)

    def do_DELETE(self):
        bucket, key = self._target()
        self.fake._count_request("DeleteObject")
        if bucket != self.fake.bucket or key is None:
            return self._answer(404, _error_xml("NoSuchBucket", "The specified bucket does not exist."))
        fault, _ = self.fake._draw("DELETE")
        if fault == "slowdown":
            self.fake._count("slowdown_503")
            self.fake._record("DELETE", key, "503")
            return self._answer(503, _error_xml("SlowDown", "Please reduce your request rate.", key))
        if fault == "drop":
            self.fake._count("drops")
            self.fake._record("DELETE", key, "dropped")
            self._reset()
        self._remove(key)
        self._answer(204)  # S3 answers 204 whether or not the key existed

    def _remove(self, key, how=""):
        """Removes the object of `key` if there is one (a missing key is no error, as on S3), and records it."""
        path = self.fake._object_path(key)
        existed = False
        if path:
            try:
                os.unlink(path)
                existed = True
            except FileNotFoundError:
                pass
        self.fake._record("DELETE", key, ("deleted" if existed else "absent") + how)

    def do_POST(self):
        """DeleteObjects (`POST /BUCKET?delete`): each key removed as DELETE removes one; S3 refuses the request
        without a Content-MD5 of its body (400 InvalidRequest), and so does the fake, or with a wrong one (400 BadDigest)."""
        bucket, key = self._target()
        if "delete" not in parse_qs(urlsplit(self.path).query, keep_blank_values=True) or key is not None:
            self.close_connection = True
            return self._answer(501, _error_xml("NotImplemented", "only DeleteObjects is implemented for POST"))
        self.fake._count_request("DeleteObjects")
        body = self._read_exactly(int(self.headers.get("Content-Length") or 0))
        if bucket != self.fake.bucket:
            return self._answer(404, _error_xml("NoSuchBucket", "The specified bucket does not exist."))
        digest = self.headers.get("Content-MD5")
        if digest is None:
            return self._answer(400, _error_xml("InvalidRequest", "Missing required header for this request: Content-MD5"))
        if digest != base64.b64encode(hashlib.md5(body).digest()).decode():
            return self._answer(400, _error_xml("BadDigest", "The Content-MD5 you specified did not match what was received."))
        fault, _ = self.fake._draw("DELETE")
        if fault == "slowdown":
            self.fake._count("slowdown_503")
            return self._answer(503, _error_xml("SlowDown", "Please reduce your request rate."))
        if fault == "drop":
            self.fake._count("drops")
            self._reset()
        try:
            keys = [element.text or "" for element in ElementTree.fromstring(body).iter("Key")]
        except ElementTree.ParseError:
            return self._answer(400, _error_xml("MalformedXML", "The XML you provided was not well-formed."))
        for key in keys:
            self._remove(key, " (DeleteObjects)")
        self._answer(200, b"<DeleteResult></DeleteResult>")  # quiet: only failures would be listed

    def do_PUT(self):
        started = time.monotonic()
        bucket, key = self._target()
        copying = self.headers.get("x-amz-copy-source")
        if not copying:
            self.fake._count_request("PutObject")
        self.fake._put_started()
        try:
            if copying:
                self._copy(bucket, key, unquote(copying))
            else:
                self._put(bucket, key, started)
        finally:
            self.fake._put_ended()

    def _put(self, bucket, key, started):
        fake = self.fake
        length = self.headers.get("Content-Length")
        if bucket != fake.bucket or key is None or fake._object_path(key) is None:
            self.close_connection = True
            return self._answer(400, _error_xml("InvalidRequest", "bad bucket or key"))
        if length is None or not length.isdigit():
            self.close_connection = True
            return self._answer(411, _error_xml("MissingContentLength", "You must provide the Content-Length HTTP header."))
        length = int(length)
        fault, value = fake._draw("PUT")
        fake._record("PUT", key, f"started ({length} bytes, fault {fault})")
        if fault == "drop":
            fake._count("drops")
            fake._count("puts_partial")
            self._read_exactly(int(length * value))
            fake._record("PUT", key, "dropped")
            self._reset()
        if fault == "slowdown":
            body = self._read_exactly(length)
            if len(body) < length:
                fake._count("puts_partial")
                self.close_connection = True
                return
            fake._count("slowdown_503")
            fake._record("PUT", key, "503")
            return self._answer(503, _error_xml("SlowDown", "Please reduce your request rate.", key))
        delay = value if fault == "delay" else 0.0
        if delay:
            fake._count("delays")
            fake._count("delay_seconds", delay)
        with fake._lock:
            fake._put_ends[id(self)] = time.monotonic() + delay
        try:
            stored = self._store(key, length, delay)
        finally:
            with fake._lock:
                fake._put_ends.pop(id(self), None)
        if stored and fake.hang:
            self._hang(key)
        elif stored:
            fake._count("puts_completed")
            time.sleep(max(0.0, fake.latency - (time.monotonic() - started)))
            if self._peer_closed():
                # The whole body had arrived, so the object stands, as on S3; but the client gave up on the answer.
                fake._count("puts_stored_after_client_left")
                fake._record("PUT", key, "stored after the client closed the connection")
            else:
                fake._record("PUT", key, "stored")
            self._answer(200, headers=[("ETag", f'"{self._etag}"')] if self._etag else [])
            with fake._lock:
                fake.puts.append((key, started, time.monotonic()))
            hook = fake.on_put_complete
            if hook is not None:
                hook(key)
        else:
            fake._count("puts_partial")
            fake._record("PUT", key, "partial: not stored")
            self.close_connection = True

    def _copy(self, bucket, key, source):
        """CopyObject within the bucket: answered at once (the object copied when a root keeps objects), or with
        `hang_copies` never, as `hang` holds a PUT (its body, none, counts as arrived)."""
        fake = self.fake
        fake._count_request("CopyObject")
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self._read_exactly(length)
        source_bucket, _, source_key = source.lstrip("/").partition("/")
        if bucket != fake.bucket or source_bucket != fake.bucket or key is None or fake._object_path(key) is None:
            return self._answer(400, _error_xml("InvalidRequest", "bad bucket or key"))
        if fake.hang_copies:
            return self._hang(key)
        time.sleep(fake.latency)  # a copy takes its time as a PUT does: a replica can die with one in flight
        if fake.root:
            origin = fake._object_path(source_key)
            if not origin or not os.path.isfile(origin):
                return self._answer(404, _error_xml("NoSuchKey", "The specified key does not exist.", source_key))
            path = fake._object_path(key)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            shutil.copyfile(origin, path)
        fake._record("COPY", key, f"copied from {source_key}")
        self._answer(200, b"<CopyObjectResult><ETag>\"0\"</ETag></CopyObjectResult>")

    def _hang(self, key):
        """Never answers: waits (at most 120 s) for the client to close the connection, and records when."""
        self.fake._note(self.fake.received, key, time.monotonic())
        self.connection.settimeout(120)
        try:
            while self.connection.recv(1 << 16):
                pass
        except OSError:
            pass
        self.fake._note(self.fake.closed, key, time.monotonic())
        self.close_connection = True

    def _peer_closed(self):
        """Whether the client has closed its side (EOF pending). select() first: the socket is in timeout mode, where
        a recv would wait for data even with MSG_DONTWAIT."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def _store(self, key, length, delay):
        """Reads the body (spread over `delay` seconds) into a temporary file; renames it into place if complete.
        Without a root, the body is read and dropped."""
        fake = self.fake
        if not fake.root:
            self._etag = ""
            return self._read_into(None, None, length, delay) == length
        md5 = hashlib.md5()
        handle, temporary = tempfile.mkstemp(dir=os.path.join(fake.root, ".tmp"))
        try:
            with os.fdopen(handle, "wb") as out:
                received = self._read_into(out, md5, length, delay)
            if received < length:
                return False  # the client went away: a partial body is not an object
            path = fake._object_path(key)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            os.replace(temporary, path)
            temporary = None
            self._etag = md5.hexdigest()
            return True
        finally:
            if temporary is not None:
                try:
                    os.unlink(temporary)
                except FileNotFoundError:
                    pass


def _range(text):
    low, _, high = text.partition(":")
    return float(low), float(high or low)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True, help="directory the objects are kept in")
    parser.add_argument("--bucket", default="herald")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--delay", type=_range, default=(0.0, 0.0), help="PUT body read time MIN:MAX seconds")
    parser.add_argument("--p503", type=float, default=0.0, help="probability of 503 SlowDown per PUT")
    parser.add_argument("--pdrop", type=float, default=0.0, help="probability of a connection reset mid-body per PUT")
    parser.add_argument("--fault-methods", default="PUT", help="comma-separated methods faults apply to")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    faults = Faults(delay=args.delay, p_slowdown=args.p503, p_drop=args.pdrop,
                    fault_methods=tuple(m.strip().upper() for m in args.fault_methods.split(",") if m.strip()))
    fake = FakeS3(args.root, bucket=args.bucket, port=args.port, faults=faults, seed=args.seed).start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    print(f"PORT {fake.port}", flush=True)
    while not stop.wait(0.5):
        pass
    fake.stop()
    print(json.dumps(fake.counts()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
