#!/usr/bin/env python3
"""Webhook deliveries a second, to a local receiver that answers at once (nginx, `return 204`).

    python3 Benchmarks/webhooks.py [--herald .build-release/release/herald] [--backlog 5000] [--posts 1000]

Two runs, loopback only, each bounded in count and time:
- backlog: N pending deliveries in the outbox (as after a receiver's outage), then Herald starts: deliveries a
  second from the first to the last the receiver logged, the dispatcher alone.
- live: the queue paused, M posts without media, then resumed: every job ends and its delivery is sent; deliveries
  a second at the receiver, jobs and deliveries together.
The receiver's own capacity is measured first (wrk), so it is known not to be the limit. Needs nginx and wrk
(`apt-get install nginx-light wrk`).
"""
import argparse
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts"))
from herald_support import Herald, create_key  # noqa: E402

NGINX_PORT, HERALD_PORT = 18901, 18902


def free_nginx(directory):
    log = os.path.join(directory, "access.log")
    conf = os.path.join(directory, "nginx.conf")
    with open(conf, "w") as f:
        f.write(f"""worker_processes 1; pid {directory}/nginx.pid; error_log {directory}/error.log; daemon off;
events {{ worker_connections 1024; }}
http {{ log_format t '$msec $request_uri $status'; access_log {log} t buffer=64k flush=100ms;
  server {{ listen 127.0.0.1:{NGINX_PORT}; keepalive_requests 100000; location / {{ return 204; }} }} }}
""")
    process = subprocess.Popen(["nginx", "-c", conf, "-p", directory], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(50):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{NGINX_PORT}/ping", timeout=1)
            return process, log
        except Exception:
            time.sleep(0.1)
    raise SystemExit("nginx did not start")


def call(method, path, key, body=None):
    request = urllib.request.Request(f"http://127.0.0.1:{HERALD_PORT}{path}", method=method,
                                     data=json.dumps(body).encode() if body is not None else None)
    request.add_header("Authorization", f"Bearer {key}")
    if body is not None:
        request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read() or b"null")


def start_herald(binary, data):
    herald = Herald(binary, data, "--log-level", "warning", "--rate-limit", "0", "--webhook-allow-private", port=HERALD_PORT)
    try:
        return herald.start("/readyz")
    except RuntimeError:
        raise SystemExit("herald did not start")


def received(log, path, count, timeout):
    """The receiver's log times of `path`'s requests, once there are `count` (or `timeout` passed)."""
    deadline = time.time() + timeout
    while True:
        times = []
        if os.path.exists(log):
            with open(log) as f:
                times = [float(line.split()[0]) for line in f if f" {path} " in line]
        if len(times) >= count or time.time() > deadline:
            return times
        time.sleep(0.2)


def rate(times):
    return (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 and times[-1] > times[0] else float("nan")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--herald", default=".build-release/release/herald")
    parser.add_argument("--backlog", type=int, default=5000)
    parser.add_argument("--posts", type=int, default=1000)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="herald-webhooks-")
    nginx, log = free_nginx(work)
    try:
        wrk = subprocess.run(["wrk", "-t1", "-c16", "-d3s", f"http://127.0.0.1:{NGINX_PORT}/capacity"],
                             capture_output=True, text=True, timeout=30).stdout
        capacity = next((line.split()[1] for line in wrk.splitlines() if line.startswith("Requests/sec")), "?")
        print(f"receiver alone (wrk -t1 -c16, 3 s): {capacity} requests/s")

        data = os.path.join(work, "data")
        key = create_key(args.herald, data, "bench")
        herald = start_herald(args.herald, data)
        hook = call("POST", "/v1/webhooks", key, {"url": f"http://127.0.0.1:{NGINX_PORT}/backlog"})
        call("POST", "/v1/posts", key, {"text": "seed"})
        received(log, "/backlog", 1, 30)
        herald.stop()

        # The backlog: N more deliveries of the seed's event, due now.
        database = sqlite3.connect(os.path.join(data, "herald.sqlite"))
        event = database.execute("SELECT event_id FROM webhook_deliveries LIMIT 1").fetchone()[0]
        now = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
        database.executemany(
            "INSERT INTO webhook_deliveries (id, webhook_id, event_id, status, next_attempt_at, created_at) VALUES (?, ?, ?, 'pending', ?, ?)",
            [(str(uuid.uuid4()), hook["id"], event, now, now) for _ in range(args.backlog)])
        database.commit()
        database.close()
        started = time.time()
        herald = start_herald(args.herald, data)
        times = received(log, "/backlog", args.backlog + 1, 120)[1:]
        print(f"backlog: {len(times)} of {args.backlog} delivered, {rate(times):.0f} deliveries/s "
              f"(first to last at the receiver), all within {times[-1] - started:.1f} s of the start command")

        # Live: jobs end and their deliveries go out as they do.
        call("DELETE", f"/v1/webhooks/{hook['id']}", key)
        call("POST", "/v1/webhooks", key, {"url": f"http://127.0.0.1:{NGINX_PORT}/live", "events": ["job.succeeded"]})
        call("POST", "/v1/queue/pause", key)
        for index in range(args.posts):
            call("POST", "/v1/posts", key, {"text": f"live {index}"})
        resumed = time.time()
        call("POST", "/v1/queue/resume", key)
        times = received(log, "/live", args.posts, 120)
        print(f"live: {len(times)} of {args.posts} jobs ended and delivered, {rate(times):.0f} deliveries/s at the receiver, "
              f"the last {times[-1] - resumed:.1f} s after the queue resumed")
        herald.stop()
    finally:
        nginx.send_signal(signal.SIGQUIT)
        nginx.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
