#!/usr/bin/env python3
"""Abuse from the network, loopback only: does Herald keep answering a well-behaved client, and free what abusers hold?

    python3 Reliability/abuse.py [--herald PATH] [--json-out PATH] [--time-limit S] [--only|--skip NAME,...] [--rounds N]

Starts Herald (temporary data directory, `--auth off`, `--log-level warning`, `--connection-timeout 5`,
`--max-connections 200`, `--max-connections-per-ip 24`), then runs these scenarios one after another, twice
(`--rounds`, so that a leak shows as growth from one round to the next):

  slowloris     150 connections from 127.0.0.2-9 send a request head one byte a second for 8 s, then go silent.
  flood         8 addresses open 32 idle connections each (256, past --max-connections): the per-IP limit keeps
                them below it, and a new client still gets in.
  global-flood  12 addresses open 24 idle connections each (288): --max-connections itself is reached.
  big-headers   one huge header line (20 KiB, 64 KiB, 1 MiB, 256 KiB unterminated), 1,000 and 20,000 headers, a
                100 KiB URL, for 3 s: each answered 431 (414 for the URL) or its connection closed.
  pipelined     10,000 `GET /healthz` pipelined on 4 connections; every answer read and counted.
  uploads       `POST /v1/media`, 20 MiB of PNG: 4 clients send it all and never read the answer, 4 stop after
                5 MiB, 1 stops inside a chunk of a chunked body; 1 more pipelines 100 `GET /openapi.yaml` (~12 MB of
                answers) and reads none.

Throughout, a probe (its own process, from 127.0.0.1) asks every 100 ms `GET /healthz` on a fresh connection and
`GET /healthz` and `GET /v1/posts?limit=5` on a keep-alive one. Requirements, per scenario (exit 1 if any fails):
  * every probe request is answered 200 within 1 s (`--probe-limit`);
  * once the abusers are silent (still holding their sockets open), Herald holds none of their connections
    (accepted, or waiting in its listen backlog) within --connection-timeout + 3 s (`--free-margin`);
  * Herald is alive, and the scenario's own expectations hold (its `checks`: limits enforced, answers counted,
    no partial staging file left, RSS bounded while bodies stream in).
And at the end: Herald answers, its RSS grew at most 8 MiB from the first round's end to the last's, its log has
no error/critical line, and it exits 0 on SIGTERM.
Measured: Herald's RSS (VmRSS) before, peak (every 100 ms) and after each scenario; the connections it holds (its
socket file descriptors on the port, matched to /proc/net/tcp) and those waiting in its listen backlog.

Fixed by what these scenarios found (MicroHTTP's ConnectionTable): a full table used to leave new clients in the
kernel's accept queue behind idle connections (libmicrohttpd stops accepting at its limit), and a head trickled in
a byte at a time used to hold its connection for ever (libmicrohttpd's idle timeout restarts at every byte).
Reported, not failed: heads past libmicrohttpd's memory pool (over ~30 KiB) get its own HTML 431/414 page rather
than a problem document (`answers_html_not_problem_json`): 0.9.75 has no way to replace it.

Everything is bounded: connection counts are fixed, every wait has a deadline, the whole run stops at
--time-limit (default 240 s; two rounds take about 95 s).
"""
import argparse
import json
import math
import multiprocessing
import os
import re
import resource
import selectors
import shutil
import socket
import sys
import tempfile
import threading
import time
import http.client
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import herald_support  # noqa: E402
from herald_support import Herald, get_status  # noqa: E402

PROBE_HOST = "127.0.0.1"
SOURCES = [f"127.0.0.{i}" for i in range(2, 10)]          # 8 abusive source addresses
FLOOD_SOURCES = [f"127.0.0.{i}" for i in range(10, 22)]   # 12 more, for the global flood
TIMEOUT = 5              # --connection-timeout
MAX_CONNECTIONS = 200    # --max-connections
PER_IP = 24              # --max-connections-per-ip
MARGIN = 3               # seconds past the timeout within which abusive connections must be gone
PROBE_LIMIT = 1.0        # seconds a probe answer may take
PNG = bytes([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 0x0D, 0x49, 0x48, 0x44, 0x52])
MiB = 1 << 20


# ---------------------------------------------------------------- Herald and /proc

def rss_kib(pid):
    return herald_support.rss_kib(pid) or 0  # 0 once Herald is gone: the figures stay numbers


def socket_inodes(pid):
    inodes = set()
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return inodes
    for fd in names:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    return inodes


def hex_ip(h):
    return ".".join(str(b) for b in bytes.fromhex(h)[::-1])


def connections(pid, port):
    """Herald's TCP connections on `port`: (held, queued), lists of the peers' (ip, port).

    held: sockets Herald has accepted and not closed (its file descriptors); queued: handshaken connections
    waiting in the listen backlog (not yet accepted)."""
    inodes = socket_inodes(pid)
    local = "0100007F:%04X" % port
    held, queued = [], []
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            p = line.split()
            if p[1] != local or p[3] == "0A":
                continue
            rh, rp = p[2].split(":")
            peer = (hex_ip(rh), int(rp, 16))
            if p[9] in inodes:
                held.append(peer)
            elif p[3] == "01" and p[9] == "0":
                queued.append(peer)
    return held, queued


def start_herald(binary, workdir):
    """Herald on a new data directory with the limits under test, once /healthz answers; its log in the work dir."""
    herald = Herald(binary, os.path.join(workdir, "data"), "--auth", "off", "--log-level", "warning",
                    "--connection-timeout", TIMEOUT, "--max-connections", MAX_CONNECTIONS,
                    "--max-connections-per-ip", PER_IP, log_path=os.path.join(workdir, "herald.log"))
    try:
        return herald.start("/healthz")
    except RuntimeError as error:
        raise SystemExit(str(error))


class Sampler(threading.Thread):
    """Every 100 ms: Herald's RSS and the abusive (not 127.0.0.1) connections it holds or has queued."""

    def __init__(self, herald, stop_at):
        super().__init__(daemon=True)
        self.herald, self.stop_at = herald, stop_at
        self.samples = []        # (t, rss KiB, held total, held abusive, queued abusive)
        self.lock = threading.Lock()
        self.done = threading.Event()

    def run(self):
        while not self.done.is_set() and time.monotonic() < self.stop_at:
            t = time.monotonic()
            held, queued = connections(self.herald.pid, self.herald.port)
            sample = (t, rss_kib(self.herald.pid), len(held),
                      sum(1 for ip, _ in held if ip != PROBE_HOST), sum(1 for ip, _ in queued if ip != PROBE_HOST))
            with self.lock:
                self.samples.append(sample)
            self.done.wait(max(0.0, 0.1 - (time.monotonic() - t)))

    def window(self, t0, t1):
        with self.lock:
            return [s for s in self.samples if t0 <= s[0] <= t1]


# ---------------------------------------------------------------- the probe (its own process: no GIL shared with the abusers)

PROBE_CALLS = (("fresh /healthz", "/healthz", False), ("keep-alive /healthz", "/healthz", True),
               ("keep-alive /v1/posts", "/v1/posts?limit=5", True))


def probe_main(port, stop, pipe, stop_at):
    samples = []   # (t start, kind, seconds, ok, detail)
    keep = None
    next_t = time.monotonic()
    while not stop.is_set() and time.monotonic() < stop_at:
        for kind, path, keep_alive in PROBE_CALLS:
            t0 = time.monotonic()
            detail = ""
            try:
                if keep_alive:
                    if keep is None:
                        keep = http.client.HTTPConnection(PROBE_HOST, port, timeout=3)
                    conn = keep
                else:
                    conn = http.client.HTTPConnection(PROBE_HOST, port, timeout=3)
                conn.request("GET", path)
                r = conn.getresponse()
                r.read()
                ok = r.status == 200
                detail = str(r.status)
                if not keep_alive:
                    conn.close()
                elif r.will_close:
                    keep.close()
                    keep = None
            except (OSError, http.client.HTTPException) as e:
                ok, detail = False, repr(e)[:120]
                if keep_alive and keep is not None:
                    keep.close()
                    keep = None
            samples.append((t0, kind, time.monotonic() - t0, ok, detail))
        next_t += 0.1
        delay = next_t - time.monotonic()
        if delay > 0:
            stop.wait(delay)
        else:
            next_t = time.monotonic()
    pipe.send(samples)
    pipe.close()


def probe_figures(samples, t0, t1, limit):
    out = {}
    for kind, _, _ in PROBE_CALLS:
        rows = [s for s in samples if s[1] == kind and t0 <= s[0] <= t1]
        lat = sorted(s[2] for s in rows)
        bad = [s for s in rows if not s[3] or s[2] > limit]
        out[kind] = {
            "requests": len(rows),
            "failures": len(bad),
            "max_ms": round(lat[-1] * 1000, 1) if lat else None,
            "p99_ms": round(lat[math.ceil(len(lat) * 0.99) - 1] * 1000, 1) if lat else None,   # nearest rank
            "first_failures": [f"+{s[0] - t0:.1f}s {s[4]} in {s[2] * 1000:.0f} ms" for s in bad[:3]],
        }
    return out


# ---------------------------------------------------------------- abusive clients

class Abuser:
    """Client sockets of one scenario, from chosen source addresses; all closed at the scenario's end."""

    def __init__(self, port):
        self.port = port
        self.socks = []      # (socket, (local ip, local port))
        self.connect_errors = 0

    def open(self, source, timeout=2.0):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            s.bind((source, 0))
            s.settimeout(timeout)
            s.connect(("127.0.0.1", self.port))
        except OSError:
            s.close()
            self.connect_errors += 1
            return None
        self.socks.append((s, s.getsockname()))
        return s

    @staticmethod
    def closed_by_server(s):
        """True when the server closed (EOF or reset), False while open; data waiting counts as open."""
        blocking = s.gettimeout()
        s.setblocking(False)
        try:
            return s.recv(1, socket.MSG_PEEK) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True
        finally:
            s.settimeout(blocking)

    def classify(self, herald):
        held, queued = connections(herald.pid, herald.port)
        held, queued = set(held), set(queued)
        counts = {"accepted": 0, "queued": 0, "refused": 0, "unknown": 0}
        for s, name in self.socks:
            if name in held:
                counts["accepted"] += 1
            elif name in queued:
                counts["queued"] += 1
            elif self.closed_by_server(s):
                counts["refused"] += 1
            else:
                counts["unknown"] += 1
        return counts

    def settle(self, herald, limit=3.0):
        """Classifies once Herald has caught up: no connection unaccounted for and two equal readings in a row."""
        stop, last = time.monotonic() + limit, None
        while True:
            counts = self.classify(herald)
            if (counts["unknown"] == 0 and counts == last) or time.monotonic() > stop:
                return counts
            last = counts
            time.sleep(0.2)

    def close(self):
        for s, _ in self.socks:
            try:
                s.close()
            except OSError:
                pass
        self.socks = []


def read_answer(s, timeout):
    """Reads until the server closes or `timeout`: (status or None, raw bytes, how it ended)."""
    s.settimeout(0.2)
    buf, end, deadline = b"", "timeout", time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            d = s.recv(65536)
        except socket.timeout:
            if b"\r\n\r\n" in buf:
                end = "open"
                break
            continue
        except OSError:
            end = "reset"
            break
        if not d:
            end = "closed"
            break
        buf += d
    status = int(buf[9:12]) if buf.startswith(b"HTTP/1.") and len(buf) >= 12 else None
    return status, buf, end


def parse_responses(buf):
    """Complete responses at the start of `buf`: ([(status, close?)], rest)."""
    out, i = [], 0
    while True:
        j = buf.find(b"\r\n\r\n", i)
        if j < 0:
            break
        lines = buf[i:j].split(b"\r\n")
        length, close = 0, False
        for line in lines[1:]:
            k, _, v = line.partition(b":")
            k = k.strip().lower()
            if k == b"content-length":
                length = int(v)
            elif k == b"connection" and v.strip().lower() == b"close":
                close = True
        if len(buf) < j + 4 + length:
            break
        out.append((int(lines[0][9:12]), close))
        i = j + 4 + length
    return out, buf[i:]


# ---------------------------------------------------------------- scenarios
# Each takes (herald, abuser, deadline) and returns (figures, checks, idle_at): checks is a list of
# (name, ok, detail); idle_at is when the last abuser went silent (the freeing clock starts there).

def slowloris(herald, ab, deadline, n=150, trickle=8):
    head = b"GET /healthz HTTP/1.1\r\nHost: herald\r\nUser-Agent: slowloris\r\nX-Slow: " + b"a" * 200
    for i in range(n):
        ab.open(SOURCES[i % len(SOURCES)])
    start = ab.settle(herald)
    sent = 0
    for step in range(min(trickle, len(head))):
        t = time.monotonic()
        if t > deadline:
            break
        for s, _ in ab.socks:
            try:
                s.send(head[step:step + 1])
            except OSError:
                pass
        sent += 1
        if step < trickle - 1:
            time.sleep(max(0.0, 1.0 - (time.monotonic() - t)))
    idle_at = time.monotonic()
    end = ab.classify(herald)
    figures = {"opened": len(ab.socks), "connect_errors": ab.connect_errors, "accepted": start["accepted"],
               "refused": start["refused"], "queued": start["queued"], "bytes_sent_each": sent,
               "trickle_seconds": trickle, "still_held_after_trickle": end["accepted"]}
    checks = [("every slowloris connection accepted (150 < 8 x per-IP limit, < max-connections)",
               start["accepted"] == n, f"{start}"),
              # Trickling bytes does not extend the deadline: a head is due within --connection-timeout (5 s) of
              # the connection opening, so none is left after the 8 s trickle.
              ("no slowloris connection held after trickling past --connection-timeout",
               end["accepted"] == 0, f"{end['accepted']} still held")]
    return figures, checks, idle_at


def flood(herald, ab, deadline, sources, each):
    for source in sources:
        for _ in range(each):
            if time.monotonic() > deadline:
                break
            ab.open(source)
    idle_at = time.monotonic()
    c = ab.settle(herald)
    # Two readings 0.5 s apart, the lower count per address kept: a connection over the per-IP limit is accepted and
    # closed at once by libmicrohttpd, and a loaded machine can catch it in between (a held one is in both readings).
    readings = []
    for attempt in range(2):
        if attempt:
            time.sleep(0.5)
        held, _ = connections(herald.pid, herald.port)
        counted = {}
        for ip, _ in held:
            counted[ip] = counted.get(ip, 0) + 1
        readings.append((held, counted))
    per_source = {ip: min(counts.get(ip, 0) for _, counts in readings) for ip in readings[0][1]}
    peak_total = max(len(held) for held, _ in readings)
    figures = {"opened": len(ab.socks), "connect_errors": ab.connect_errors, "attempted": len(sources) * each, **c,
               "held_per_source_max": max(per_source.values(), default=0), "held_total": peak_total}
    checks = [
        ("per-IP limit enforced", max(per_source.values(), default=0) <= PER_IP, f"max {max(per_source.values(), default=0)} from one address"),
        ("max-connections enforced", peak_total <= MAX_CONNECTIONS, f"{peak_total} held"),
        ("more opened than --max-connections", len(ab.socks) > MAX_CONNECTIONS, f"{len(ab.socks)} opened"),
    ]
    return figures, checks, idle_at


def per_ip_flood(herald, ab, deadline):
    return flood(herald, ab, deadline, SOURCES, 32)


def global_flood(herald, ab, deadline):
    return flood(herald, ab, deadline, FLOOD_SOURCES, PER_IP)


BIG_HEADS = {
    "header 20 KiB": (b"GET /healthz HTTP/1.1\r\nHost: h\r\nX-Big: " + b"a" * (20 << 10) + b"\r\n\r\n", {431}),
    "header 64 KiB": (b"GET /healthz HTTP/1.1\r\nHost: h\r\nX-Big: " + b"a" * (64 << 10) + b"\r\n\r\n", {431}),
    "header 1 MiB": (b"GET /healthz HTTP/1.1\r\nHost: h\r\nX-Big: " + b"a" * MiB + b"\r\n\r\n", {431}),
    "header 256 KiB unterminated": (b"GET /healthz HTTP/1.1\r\nHost: h\r\nX-Big: " + b"a" * (256 << 10), {431}),
    "1,000 headers": (b"GET /healthz HTTP/1.1\r\nHost: h\r\n" + b"".join(b"X-H%d: vvvvvvvvvvvvvvvv\r\n" % i for i in range(1000)) + b"\r\n", {431}),
    "20,000 headers": (b"GET /healthz HTTP/1.1\r\nHost: h\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(20000)) + b"\r\n", {431}),
    "URL 100 KiB": (b"GET /healthz?q=" + b"a" * (100 << 10) + b" HTTP/1.1\r\nHost: h\r\n\r\n", {414, 431}),
    "POST, header 20 KiB": (b"POST /v1/media HTTP/1.1\r\nHost: h\r\nContent-Type: image/png\r\nContent-Length: 100\r\nX-Big: "
                            + b"a" * (20 << 10) + b"\r\n\r\n" + PNG + bytes(84), {431}),
}


def big_headers(herald, ab, deadline, rounds=40, seconds=3.0):
    results = {name: {} for name in BIG_HEADS}
    html = 0
    bad = []
    stop = min(deadline, time.monotonic() + seconds)
    for r in range(rounds):
        pending = []
        for k, (name, (data, _)) in enumerate(BIG_HEADS.items()):
            s = ab.open(SOURCES[(r * len(BIG_HEADS) + k) % len(SOURCES)])
            if s is None:
                continue
            try:
                s.settimeout(5)
                s.sendall(data)
            except OSError:
                pass   # the server may close before it has read it all
            pending.append((name, s))
        for name, s in pending:
            status, raw, end = read_answer(s, timeout=min(5.0, max(0.5, deadline - time.monotonic())))
            outcome = str(status) if status else end
            results[name][outcome] = results[name].get(outcome, 0) + 1
            if b"<html" in raw.lower():
                html += 1
            if not (status in BIG_HEADS[name][1] or (status is None and end in ("closed", "reset"))):
                bad.append(f"{name}: {outcome}")
        if time.monotonic() > stop:
            break
        time.sleep(0.05)
    idle_at = time.monotonic()
    figures = {"opened": len(ab.socks), "connect_errors": ab.connect_errors, "outcomes": results,
               "answers_html_not_problem_json": html}
    checks = [("every oversized head answered 431 (414 for the URL) or closed", not bad, "; ".join(bad[:5]) or "ok")]
    return figures, checks, idle_at


def pipelined(herald, ab, deadline, total=10_000, conns=4):
    request = b"GET /healthz HTTP/1.1\r\nHost: herald\r\n\r\n"
    each = total // conns
    sel = selectors.DefaultSelector()
    state = {}
    for i in range(conns):
        s = ab.open(SOURCES[i % len(SOURCES)])
        if s is None:
            continue
        s.setblocking(False)
        state[s] = {"out": memoryview(request * each), "in": b"", "statuses": [], "closed": False, "close_hdr": 0}
        sel.register(s, selectors.EVENT_READ | selectors.EVENT_WRITE)
    accepted = ab.settle(herald)["accepted"]
    t0 = time.monotonic()
    stop = min(deadline, t0 + 60)
    while time.monotonic() < stop and any(len(v["statuses"]) < each and not v["closed"] for v in state.values()):
        for key, ev in sel.select(timeout=0.5):
            s, st = key.fileobj, state[key.fileobj]
            if ev & selectors.EVENT_WRITE and st["out"]:
                try:
                    n = s.send(st["out"][:65536])
                    st["out"] = st["out"][n:]
                except BlockingIOError:
                    pass
                except OSError:
                    st["closed"] = True
                if not st["out"]:
                    sel.modify(s, selectors.EVENT_READ)
            if ev & selectors.EVENT_READ:
                try:
                    d = s.recv(1 << 20)
                except BlockingIOError:
                    continue
                except OSError:
                    d = b""
                if not d:
                    st["closed"] = True
                    sel.unregister(s)
                    continue
                answers, st["in"] = parse_responses(st["in"] + d)
                st["statuses"] += [a[0] for a in answers]
                st["close_hdr"] += sum(1 for a in answers if a[1])
    elapsed = time.monotonic() - t0
    sel.close()
    idle_at = time.monotonic()
    answered = sum(len(v["statuses"]) for v in state.values())
    ok200 = sum(v["statuses"].count(200) for v in state.values())
    figures = {"opened": len(ab.socks), "connect_errors": ab.connect_errors, "accepted": accepted,
               "requests_sent": each * len(state),
               "answers": answered, "answers_200": ok200, "seconds": round(elapsed, 2),
               "requests_per_second": round(answered / elapsed) if elapsed else None,
               "closed_by_server_early": sum(1 for v in state.values() if v["closed"])}
    checks = [(f"all {total} pipelined requests answered 200", ok200 == total and answered == total,
               f"{answered} answered, {ok200} with 200")]
    return figures, checks, idle_at


def uploads(herald, ab, deadline, full=4, partial=4, size=20 * MiB, partial_bytes=5 * MiB):
    body = memoryview(PNG + bytes(size - len(PNG)))
    head = (b"POST /v1/media?description=abuse HTTP/1.1\r\nHost: herald\r\nContent-Type: image/png\r\n"
            b"Content-Length: %d\r\n\r\n" % size)
    last_send = []
    lock = threading.Lock()
    staging = Path(herald.data_dir) / "staging"
    socks = {"full": [], "partial": [], "chunked": [], "unread": [],
             "staged_before": set(os.listdir(staging)) if staging.is_dir() else set()}
    kinds = ["full"] * full + ["partial"] * partial + ["chunked", "unread"]
    for i, kind in enumerate(kinds):
        s = ab.open(SOURCES[i % len(SOURCES)], timeout=10)
        if s is not None:
            socks[kind].append(s)
    accepted = ab.settle(herald)["accepted"]

    def send(s, kind):
        try:
            if kind == "unread":   # 100 pipelined GET /openapi.yaml (~12 MB of answers), none read
                s.sendall(b"GET /openapi.yaml HTTP/1.1\r\nHost: herald\r\n\r\n" * 100)
            elif kind == "chunked":
                s.sendall(b"POST /v1/media HTTP/1.1\r\nHost: herald\r\nContent-Type: image/png\r\n"
                          b"Transfer-Encoding: chunked\r\n\r\n")
                s.sendall(b"%x\r\n" % (64 << 10) + bytes(body[:64 << 10]) + b"\r\n")
                s.sendall(b"%x\r\n" % MiB + bytes(1000))    # a chunk announced, 1,000 of its bytes sent
            else:
                s.sendall(head)
                n = size if kind == "full" else partial_bytes
                for off in range(0, n, MiB):
                    s.sendall(body[off:min(n, off + MiB)])
        except OSError:
            pass
        with lock:
            last_send.append(time.monotonic())

    threads = [threading.Thread(target=send, args=(s, kind), daemon=True)
               for kind in ("full", "partial", "chunked", "unread") for s in socks[kind]]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=max(1.0, min(60.0, deadline - time.monotonic())))
    idle_at = max(last_send) if last_send else time.monotonic()
    figures = {"opened": len(ab.socks), "connect_errors": ab.connect_errors, "accepted": accepted,
               "full_uploads": len(socks["full"]),
               "stopped_mid_body": len(socks["partial"]), "stopped_mid_chunk": len(socks["chunked"]),
               "never_reading_100_openapi_gets": len(socks["unread"]),
               "body_mib_sent": round((len(socks["full"]) * size + len(socks["partial"]) * partial_bytes) / MiB),
               "send_seconds": round(idle_at - t0, 2)}
    # What the full uploads were answered is read once the connections are freed (see `after_uploads`).
    return figures, [], idle_at, socks


def after_uploads(herald, socks, figures):
    """Once Herald let go: the never-read answers (still in the clients' buffers), and what staging holds."""
    statuses = []
    for s in socks["full"]:
        status, _, _ = read_answer(s, timeout=1.0)
        statuses.append(status)
    stopped = []
    for s in socks["partial"] + socks["chunked"]:
        status, _, end = read_answer(s, timeout=0.5)
        stopped.append(str(status) if status else end)
    staging = Path(herald.data_dir) / "staging"
    partials, finals = [], []
    deadline = time.monotonic() + 3
    while True:
        names = [n for n in (os.listdir(staging) if staging.is_dir() else []) if n not in socks["staged_before"]]
        partials = [n for n in names if n.endswith(".partial")]
        finals = [n for n in names if not n.endswith(".partial")]
        if not partials or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    figures.update({"full_upload_answers": statuses, "stopped_upload_outcomes": stopped,
                    "new_staged_files": len(finals), "partial_files_left": len(partials)})
    return [
        ("every full upload answered 201 (read afterwards from the client's buffer)",
         statuses.count(201) == len(socks["full"]), f"{statuses}"),
        ("no partial staging file left once the stopped uploads were dropped", not partials, f"{partials[:3]}"),
        ("one staged file per completed upload", len(finals) == statuses.count(201), f"{len(finals)} files"),
    ]


SCENARIOS = [("slowloris", slowloris), ("flood", per_ip_flood), ("global-flood", global_flood),
             ("big-headers", big_headers), ("pipelined", pipelined), ("uploads", uploads)]


# ---------------------------------------------------------------- driver

def wait_freed(herald, idle_at, limit, extra):
    """Seconds from `idle_at` until Herald holds and queues no abusive connection (None if not within limit+extra)."""
    stop = idle_at + limit + extra
    while time.monotonic() < stop:
        if not herald.alive():
            return None
        held, queued = connections(herald.pid, herald.port)
        if not any(ip != PROBE_HOST for ip, _ in held + queued):
            return time.monotonic() - idle_at
        time.sleep(0.1)
    return None


def mib(kib):
    return round(kib / 1024, 1)


def run_scenario(name, fn, herald, sampler, deadline, free_limit):
    """One scenario: the abuse, the wait for Herald to let go while the abusers stay silent, the figures."""
    print(f"-- {name}", flush=True)
    ab = Abuser(herald.port)
    t0 = time.monotonic()
    rss_before = rss_kib(herald.pid)
    figures, checks, idle_at, extra = {}, [], time.monotonic(), None
    try:
        out = fn(herald, ab, deadline)
        figures, checks, idle_at = out[:3]
        extra = out[3] if len(out) > 3 else None
    except Exception as e:   # a driver bug or an unexpected answer: the scenario fails, the run goes on
        checks = [("scenario ran without error", False, repr(e)[:300])]
    freed = wait_freed(herald, idle_at, free_limit, 0)
    actual = freed
    if freed is None:   # how long it really takes, bounded, for the figures
        actual = wait_freed(herald, idle_at, free_limit, 3 * TIMEOUT)
    checks.append((f"abusive connections freed within {free_limit:g} s of going idle", freed is not None,
                   f"{actual:.1f} s" if actual is not None else f"not after {free_limit + 3 * TIMEOUT:g} s"))
    if extra is not None:
        checks += after_uploads(herald, extra, figures)
    ab.close()
    time.sleep(0.5)
    t1 = time.monotonic()
    samples = sampler.window(t0, t1)
    rss = {"before": mib(rss_before), "peak": mib(max((s[1] for s in samples), default=0)), "after": mib(rss_kib(herald.pid))}
    if extra is not None:   # the uploads: bodies are streamed to disk, never held whole
        growth = rss["peak"] - rss["before"]
        checks.append(("RSS peak within 32 MiB of before while 100 MiB of bodies arrive", growth <= 32, f"+{growth:.1f} MiB"))
    alive = herald.alive()
    checks.append(("herald alive", alive, "" if alive else f"exit {herald.process.returncode}"))
    return {
        "name": name, "seconds": round(t1 - t0, 1), **figures,
        "freed_seconds": round(actual, 2) if actual is not None else None,
        "rss_mib": rss,
        "herald_connections_peak": max((s[2] for s in samples), default=0),
        "abusive_queued_peak": max((s[4] for s in samples), default=0),
        "checks": [list(c) for c in checks],
        "window": (t0, t1),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--herald", default=str(ROOT / ".build-release/release/herald"))
    ap.add_argument("--json-out", help="write the figures and checks of every scenario here (JSON)")
    ap.add_argument("--time-limit", type=float, default=240, help="seconds for the whole run (default 240)")
    ap.add_argument("--only", help="comma-separated scenario names (default: all): " + ",".join(n for n, _ in SCENARIOS))
    ap.add_argument("--skip", help="comma-separated scenario names to leave out")
    ap.add_argument("--rounds", type=int, default=2,
                    help="times the scenarios run on one Herald (default 2: the second round shows a leak as growth)")
    ap.add_argument("--free-margin", type=float, default=MARGIN,
                    help=f"seconds past --connection-timeout allowed for freeing (default {MARGIN})")
    ap.add_argument("--probe-limit", type=float, default=PROBE_LIMIT,
                    help=f"seconds a probe answer may take (default {PROBE_LIMIT:g})")
    args = ap.parse_args()
    started = time.monotonic()
    hard_stop = started + args.time_limit
    chosen = [s for s in SCENARIOS if (not args.only or s[0] in args.only.split(","))
              and not (args.skip and s[0] in args.skip.split(","))]
    unknown = set((args.only or "").split(",") + (args.skip or "").split(",")) - {n for n, _ in SCENARIOS} - {""}
    if unknown or not chosen:
        ap.error(f"unknown scenario {sorted(unknown)}; the scenarios: {', '.join(n for n, _ in SCENARIOS)}")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4096:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 65536), hard))

    workdir = tempfile.mkdtemp(prefix="herald-abuse-")
    herald = start_herald(args.herald, workdir)
    ctx = multiprocessing.get_context("fork")
    stop_probe = ctx.Event()
    parent_end, child_end = ctx.Pipe(duplex=False)
    probe = ctx.Process(target=probe_main, args=(herald.port, stop_probe, child_end, hard_stop + 5), daemon=True)
    probe.start()
    sampler = Sampler(herald, hard_stop + 5)
    sampler.start()
    print(f"herald pid {herald.pid} on 127.0.0.1:{herald.port}; connection timeout {TIMEOUT} s, "
          f"max connections {MAX_CONNECTIONS}, per IP {PER_IP}; {args.rounds} round(s); work dir {workdir}", flush=True)

    results, end_checks, baseline, probe_samples, round_rss = [], [], {}, [], []
    baseline_window = (started, started)
    free_limit = TIMEOUT + args.free_margin
    try:
        time.sleep(2)   # probe and sampler warm up: the baseline window
        baseline_window = (started, time.monotonic())
        rss_start = rss_kib(herald.pid)
        for round_ in range(1, args.rounds + 1):
            for name, fn in chosen:
                label = name if round_ == 1 else f"{name}#{round_}"
                if time.monotonic() > hard_stop - 15:
                    results.append({"name": label, "checks": [["ran within --time-limit", False, "skipped"]]})
                    continue
                if not herald.alive():
                    results.append({"name": label, "checks": [["herald alive", False, "dead before it"]]})
                    continue
                results.append(run_scenario(label, fn, herald, sampler, min(hard_stop - 10, time.monotonic() + 60), free_limit))
            time.sleep(1)
            round_rss.append(rss_kib(herald.pid))
        final = {path: get_status(herald.port, path) for path in ("/healthz", "/v1/posts?limit=5")}
        end_checks.append(("herald alive and answering at the end",
                           herald.alive() and all(status == 200 for status in final.values()),
                           ", ".join(f"{p} {status}" for p, status in final.items())))
        rss_end = rss_kib(herald.pid)
        end_checks.append(("RSS at the end within 64 MiB of the start", rss_end - rss_start <= 64 * 1024,
                           f"{mib(rss_start)} -> {mib(rss_end)} MiB"))
        if len(round_rss) > 1:
            growth = mib(round_rss[-1] - round_rss[0])
            end_checks.append(("RSS after the last round within 8 MiB of after the first (no leak)", growth <= 8,
                               " -> ".join(f"{mib(r)}" for r in round_rss) + f" MiB ({growth:+} MiB)"))
    finally:
        stop_probe.set()
        probe_samples = parent_end.recv() if parent_end.poll(15) else []
        probe.join(timeout=5)
        sampler.done.set()
        herald_log = herald.log_text()[-1_000_000:]
        herald.stop()

    baseline = probe_figures(probe_samples, *baseline_window, args.probe_limit) if probe_samples else {}
    for r in results:
        if "window" not in r:
            continue
        r["probe"] = figures = probe_figures(probe_samples, *r.pop("window"), args.probe_limit)
        for kind, f in figures.items():
            r["checks"].append([f"probe {kind}: every answer 200 within {args.probe_limit:g} s",
                                f["requests"] > 0 and f["failures"] == 0,
                                f"{f['requests']} requests, {f['failures']} failed, max {f['max_ms']} ms, p99 {f['p99_ms']} ms"
                                + (f"; {f['first_failures']}" if f["failures"] else "")])
    for r in results:
        r["ok"] = all(c[1] for c in r["checks"])
    fatal = [l for l in herald_log.splitlines()
             if re.match(r"\S+ (error|critical) ", l) or any(w in l for w in ("Fatal error", "Segmentation fault", "Illegal instruction"))]
    end_checks.append(("no error, critical or fatal line in Herald's log", not fatal, "; ".join(fatal[:3])))
    end_checks.append(("herald exited 0 on SIGTERM", herald.process.returncode == 0, f"exit {herald.process.returncode}"))
    ok = bool(results) and all(r["ok"] for r in results) and all(c[1] for c in end_checks)
    run_seconds = time.monotonic() - started

    # ---- the human summary
    print()
    if baseline:
        print("baseline probe: " + "; ".join(f"{k} max {f['max_ms']} ms" for k, f in baseline.items()))
    for r in results:
        print(f"{'PASS' if r['ok'] else 'FAIL'}  {r['name']}  ({r.get('seconds', '-')} s)")
        keys = [k for k in ("opened", "accepted", "refused", "queued", "still_held_after_trickle", "answers",
                            "requests_per_second", "body_mib_sent", "full_upload_answers", "stopped_upload_outcomes",
                            "new_staged_files", "partial_files_left", "answers_html_not_problem_json") if k in r]
        if keys:
            print("      " + ", ".join(f"{k} {r[k]}" for k in keys))
        if "outcomes" in r:
            print("      outcomes " + "; ".join(f"{n}: {o}" for n, o in r["outcomes"].items()))
        if "rss_mib" in r:
            m = r["rss_mib"]
            print(f"      RSS MiB before {m['before']}, peak {m['peak']}, after {m['after']}; Herald connections peak "
                  f"{r['herald_connections_peak']}, abusive in its backlog peak {r['abusive_queued_peak']}; "
                  f"abusive connections freed {r['freed_seconds']} s after going idle")
        for kind, f in r.get("probe", {}).items():
            print(f"      probe {kind:22s} {f['requests']:4d} req, {f['failures']} failed, max {f['max_ms']} ms, p99 {f['p99_ms']} ms")
        for name, passed, detail in r["checks"]:
            if not passed:
                print(f"      FAILED: {name}: {detail}")
    for name, passed, detail in end_checks:
        print(f"{'PASS' if passed else 'FAIL'}  {name}: {detail}")
    print(f"\n{'ALL PASSED' if ok else 'FAILED'} in {run_seconds:.0f} s"
          + ("" if ok else f" (Herald's log and data kept in {workdir})"))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"ok": ok, "run_seconds": round(run_seconds, 1),
                       "configuration": {"connection_timeout": TIMEOUT, "max_connections": MAX_CONNECTIONS,
                                         "max_connections_per_ip": PER_IP, "free_limit_seconds": free_limit,
                                         "probe_limit_seconds": args.probe_limit, "rounds": args.rounds},
                       "baseline_probe": baseline, "rss_mib_after_each_round": [mib(r) for r in round_rss],
                       "scenarios": results, "end": [list(c) for c in end_checks]}, f, indent=2)
    if ok:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
