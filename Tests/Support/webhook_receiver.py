#!/usr/bin/env python3
"""A webhook endpoint on 127.0.0.1 for the tests: records Herald's Standard Webhooks deliveries.

Started as `python3 webhook_receiver.py [--port N]` (default 0, any free port). Prints one line
`PORT <n>` once listening and serves until SIGTERM/SIGINT.

Deliveries: every request whose path does not start with `/_control/`, any method. The body is read
(Content-Length, or chunked), the request is recorded, and only then answered, following the plan
queued for its path (the raw request path, query included, first; then the path without its query).
With no plan entry left the answer is 200 `ok`.

Control endpoints:
  POST /_control/plan      {"path": "/hook", "responses": [...]} appends to that path's queue; 204.
                           Entries: 500 (status, body `status 500`); "hang" (never answered, until the
                           client closes the connection or the server stops);
                           {"status": 302, "location": "/elsewhere"} (status with a Location header).
  GET  /_control/requests?min=N&timeout=S
                           waits until at least N deliveries are recorded or S seconds pass
                           (defaults 0 and 10), then 200 with the JSON list of all records:
                           {"seq", "method", "path", "headers": {lowercased: value}, "body": base64,
                           "received_at"}.
  POST /_control/verify    {"secret": "whsec_..."} -> 200 with one entry per delivery, in order:
                           {"seq", "webhook_id", "ok", "error"}, checked with the `standardwebhooks`
                           package against the raw body and the recorded headers.
  POST /_control/reset     forgets the records and the plans; 204.
"""
import argparse
import base64
import json
import os
import select
import signal
import sys
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from standardwebhooks.webhooks import Webhook

CONTROL_PREFIX = "/_control/"

_lock = threading.Lock()
_changed = threading.Condition(_lock)
_records = []   # recorded deliveries, in arrival order
_raw = []       # (raw body bytes, headers dict) per record, for verification
_plans = {}     # path -> deque of plan entries
_next_seq = 1
_stopping = threading.Event()


def _record(method, path, headers, body):
    global _next_seq
    with _changed:
        entry = {
            "seq": _next_seq,
            "method": method,
            "path": path,
            "headers": headers,
            "body": base64.b64encode(body).decode("ascii"),
            "received_at": time.time(),
        }
        _next_seq += 1
        _records.append(entry)
        _raw.append((body, headers))
        _changed.notify_all()
        return entry["seq"]


def _next_plan(path):
    with _lock:
        candidates = [path]
        bare = urlsplit(path).path
        if bare != path:
            candidates.append(bare)
        for key in candidates:
            queue = _plans.get(key)
            if queue:
                return queue.popleft()
    return None


def _valid_entry(entry):
    if entry == "hang":
        return True
    if isinstance(entry, int) and not isinstance(entry, bool):
        return 100 <= entry <= 599
    if isinstance(entry, dict):
        status = entry.get("status")
        location = entry.get("location")
        return (isinstance(status, int) and not isinstance(status, bool) and 100 <= status <= 599
                and (location is None or isinstance(location, str)))
    return False


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def version_string(self):
        return "webhook-receiver"

    def log_message(self, format, *args):  # quiet
        pass

    # -- plumbing -----------------------------------------------------------------------------

    def _read_body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while True:
                line = self.rfile.readline(65537)
                if not line:
                    raise ConnectionError("connection closed inside a chunked body")
                size = int(line.split(b";", 1)[0].strip(), 16)
                if size == 0:
                    while True:  # trailers, up to the blank line
                        trailer = self.rfile.readline(65537)
                        if trailer in (b"\r\n", b"\n", b""):
                            break
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline(65537)  # CRLF after the chunk
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _respond(self, status, body=b"", content_type="text/plain; charset=utf-8", extra=()):
        if isinstance(body, str):
            body = body.encode("utf-8")
        no_body = status in (204, 304) or 100 <= status < 200
        if no_body:
            body = b""
        self.send_response(status)
        for name, value in extra:
            self.send_header(name, value)
        if body:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)
        self.wfile.flush()

    def _json(self, status, value):
        self._respond(status, json.dumps(value), "application/json")

    def _hang(self):
        """Never answer: wait until the client closes the connection or the server stops."""
        self.close_connection = True
        sock = self.connection
        while not _stopping.is_set():
            try:
                readable, _, _ = select.select([sock], [], [], 0.2)
                if readable:
                    if not sock.recv(65536):  # EOF: the client gave up
                        return
            except (OSError, ValueError):
                return

    def _dispatch(self):
        try:
            body = self._read_body()
        except (ValueError, ConnectionError):
            self.close_connection = True
            try:
                self._respond(400, "bad body")
            except OSError:
                pass
            return
        if self.path.startswith(CONTROL_PREFIX):
            self._control(body)
        else:
            self._delivery(body)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _dispatch

    # -- deliveries ---------------------------------------------------------------------------

    def _delivery(self, body):
        headers = {}
        for name, value in self.headers.items():
            key = name.lower()
            headers[key] = value if key not in headers else headers[key] + ", " + value
        _record(self.command, self.path, headers, body)
        entry = _next_plan(self.path)
        if entry is None:
            self._respond(200, "ok")
        elif entry == "hang":
            self._hang()
        elif isinstance(entry, int):
            self._respond(entry, f"status {entry}")
        else:
            status = entry["status"]
            extra = [("Location", entry["location"])] if entry.get("location") is not None else []
            self._respond(status, f"status {status}", extra=extra)

    # -- control ------------------------------------------------------------------------------

    def _control(self, body):
        url = urlsplit(self.path)
        route = (self.command, url.path)
        if route == ("POST", "/_control/plan"):
            self._plan(body)
        elif route == ("GET", "/_control/requests"):
            self._requests(parse_qs(url.query))
        elif route == ("POST", "/_control/verify"):
            self._verify(body)
        elif route == ("POST", "/_control/reset"):
            global _next_seq
            with _changed:
                _records.clear()
                _raw.clear()
                _plans.clear()
                _next_seq = 1
                _changed.notify_all()
            self._respond(204)
        else:
            self._respond(404, f"no control endpoint {self.command} {url.path}")

    def _plan(self, body):
        try:
            request = json.loads(body or b"null")
            path = request["path"]
            responses = request["responses"]
            if not isinstance(path, str) or not isinstance(responses, list):
                raise ValueError("path must be a string and responses a list")
            for entry in responses:
                if not _valid_entry(entry):
                    raise ValueError(f"bad plan entry {entry!r}")
        except (ValueError, KeyError, TypeError) as error:
            self._respond(400, f"bad plan: {error}")
            return
        with _lock:
            _plans.setdefault(path, deque()).extend(responses)
        self._respond(204)

    def _requests(self, query):
        try:
            minimum = int(query.get("min", ["0"])[-1])
            timeout = float(query.get("timeout", ["10"])[-1])
        except ValueError as error:
            self._respond(400, f"bad query: {error}")
            return
        deadline = time.monotonic() + max(timeout, 0.0)
        with _changed:
            while len(_records) < minimum and not _stopping.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                _changed.wait(remaining)
            snapshot = [dict(r) for r in _records]
        self._json(200, snapshot)

    def _verify(self, body):
        try:
            secret = json.loads(body or b"null")["secret"]
            if not isinstance(secret, str):
                raise TypeError("secret must be a string")
        except (ValueError, KeyError, TypeError) as error:
            self._respond(400, f"bad verify request: {error}")
            return
        with _lock:
            deliveries = [(r["seq"], raw_body, raw_headers)
                          for r, (raw_body, raw_headers) in zip(_records, _raw)]
        try:
            webhook, secret_error = Webhook(secret), None
        except Exception as error:  # an unusable secret fails every delivery
            webhook, secret_error = None, f"bad secret: {type(error).__name__}: {error}"
        results = []
        for seq, raw_body, raw_headers in deliveries:
            ok, error = False, secret_error
            if webhook is not None:
                try:
                    webhook.verify(raw_body, raw_headers, json_parse=False)
                    ok, error = True, None
                except Exception as failure:
                    error = f"{type(failure).__name__}: {failure}"
            results.append({"seq": seq, "webhook_id": raw_headers.get("webhook-id"),
                            "ok": ok, "error": error})
        self._json(200, results)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--tls-cert", help="serve HTTPS with this PEM certificate (and --tls-key)")
    parser.add_argument("--tls-key")
    parser.add_argument("--exit-on-stdin-eof", action="store_true",
                        help="exit once standard input closes (the test process that started it has ended)")
    args = parser.parse_args()

    if args.exit_on_stdin_eof:
        def watch_stdin():
            while sys.stdin.buffer.read(4096):
                pass
            os._exit(0)

        threading.Thread(target=watch_stdin, daemon=True).start()

    server = Server(("127.0.0.1", args.port), Handler)
    if args.tls_cert:
        import ssl
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(args.tls_cert, args.tls_key)
        # The handshake happens as a connection is accepted; one a client refuses is dropped there.
        server.socket = context.wrap_socket(server.socket, server_side=True)

    def stop(signum, frame):
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # A parent that blocks these (a Swift test process does, for its own signal handling) passes its mask on.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})

    print(f"PORT {server.server_address[1]}", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except (SystemExit, KeyboardInterrupt):
        pass
    finally:
        _stopping.set()
        with _changed:
            _changed.notify_all()
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
