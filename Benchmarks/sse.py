#!/usr/bin/env python3
"""1,000 idle Server-Sent Events streams on one Herald: RSS growth and CPU while idle; fan-out latency to 100 streams.

    python3 Benchmarks/sse.py [HERALD_BINARY]    (default .build-release/release/herald; `make bench-sse`)

Loopback only; the streams and the rounds are bounded in count and time. 100 streams follow `GET /v1/events`, 900
one scheduled job's `GET /v1/jobs/{id}/events`; `--max-streams` and the connection limits are raised for it.
"""
import json, os, selectors, socket, sys, tempfile, time, urllib.request
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts"))
from herald_support import Herald, create_key  # noqa: E402
BIN = sys.argv[1] if len(sys.argv) > 1 else ".build-release/release/herald"
PNG = bytes([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 0x0D, 0x49, 0x48, 0x44, 0x52]) + bytes(100)

def http(method, url, body=None, ctype=None, key=None):
    r = urllib.request.Request(url, data=body, method=method)
    if ctype: r.add_header("Content-Type", ctype)
    if key: r.add_header("Authorization", f"Bearer {key}")
    with urllib.request.urlopen(r, timeout=30) as resp:
        return json.loads(resp.read() or b"{}")

data = tempfile.mkdtemp(prefix="sse-")
key = create_key(BIN, data, "s")
herald = Herald(BIN, data, "--log-level", "warning", "--rate-limit", "0", "--max-streams", "2000", "--max-connections", "3000",
                "--max-connections-per-ip", "3000").start("/healthz")
port = herald.port
base = f"http://127.0.0.1:{port}"
socks = []
try:
    job = http("POST", base + "/v1/posts", json.dumps({"text": "idle", "scheduled_at": "2099-01-01T00:00:00Z"}).encode(), "application/json", key)["job"]["id"]
    time.sleep(0.5)
    rss0, cpu0 = herald.rss_kib(), herald.cpu_seconds()
    sel = selectors.DefaultSelector()
    N = 1000
    for i in range(N):
        s = socket.create_connection(("127.0.0.1", port))
        path = "/v1/events" if i < 100 else f"/v1/jobs/{job}/events"
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\r\n".encode())
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, i)
        socks.append(s)
    got = set(); deadline = time.monotonic() + 60
    while len(got) < N and time.monotonic() < deadline:
        for k, _ in sel.select(timeout=1):
            if k.fileobj.recv(65536): got.add(k.data)
    print(f"{len(got)} of {N} streams opened and got their first bytes")
    time.sleep(1)
    rss1, cpu1 = herald.rss_kib(), herald.cpu_seconds()
    time.sleep(10)
    rss2, cpu2 = herald.rss_kib(), herald.cpu_seconds()
    print(f"RSS before {rss0/1024:.1f} MiB, with {N} streams {rss1/1024:.1f} MiB (+{(rss1-rss0)/1024:.1f} MiB, {(rss1-rss0)/N:.1f} KiB a stream); "
          f"CPU over 10 idle seconds: {cpu2-cpu1:.2f} s ({(cpu2-cpu1)/10*100:.1f}%)")
    # Fan-out: a change of a job of this tenant reaches each of the 100 /v1/events streams.
    for s in socks[:100]:
        try:
            while s.recv(65536): pass
        except BlockingIOError: pass
    latencies = []
    for round_ in range(5):
        t0 = time.monotonic()
        http("POST", base + "/v1/posts", json.dumps({"text": f"fan {round_}", "scheduled_at": "2099-01-01T00:00:00Z"}).encode(), "application/json", key)
        seen = {}
        deadline = time.monotonic() + 10
        while len(seen) < 100 and time.monotonic() < deadline:
            for k, _ in sel.select(timeout=0.5):
                if k.data < 100:
                    try:
                        if k.fileobj.recv(65536) and k.data not in seen: seen[k.data] = time.monotonic() - t0
                    except BlockingIOError: pass
                else:
                    try: k.fileobj.recv(65536)
                    except BlockingIOError: pass
        latencies += list(seen.values())
        time.sleep(0.2)
    latencies.sort()
    p99 = latencies[int(len(latencies) * 0.99) - 1] * 1000
    print(f"fan-out to 100 streams, 5 changes: {len(latencies)} deliveries, p50 {latencies[len(latencies)//2]*1000:.1f} ms, p99 {p99:.1f} ms, max {latencies[-1]*1000:.1f} ms (from the POST's start)")
finally:
    for s in socks:
        s.close()
    herald.stop()
