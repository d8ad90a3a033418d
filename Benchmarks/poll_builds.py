#!/usr/bin/env python3
"""Two Herald builds' status poll beside the C server doing Herald's product work, in turn (issue 35's before and after).

    python3 Benchmarks/poll_builds.py BEFORE_HERALD AFTER_HERALD [--rounds 5] [--seconds 5]

The first build ingests 4 media and publishes a post, and stops; each build then serves a copy of that data directory
(their answers checked byte for byte equal), and `c-status --product` reads the original's database. Neither build is
the one that did the setup, and the two swap places in every other round: either advantage was worth about 2% a
build here. Each round polls `GET /v1/jobs/{id}` on each of the three with `wrk -t1 -c32` (one untimed second first),
and reads the server's user
and system CPU from /proc/PID/stat around the run: req/s and CPU µs a poll, split into user and system time (which
`make bench` does not split), and how often wrk went to sleep a request (its voluntary context switches): each time,
the server's next answer pays for waking it (in the server's system time). Prints one line a run and the medians;
writes nothing else.
"""
import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
import run  # noqa: E402 (the benchmarks' helpers: servers, keys, the C programs)


def cpu_ticks(pid):
    """User and system CPU of `pid` so far, in clock ticks."""
    with open(f"/proc/{pid}/stat") as file:
        fields = file.read().rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])


def poll(server, path, seconds):
    """One wrk run against `server`: req/s, user and system CPU µs a poll."""
    command = ["wrk", "-t1", "-c32", f"-d{seconds}s", "-H", f"Authorization: {run.authorization(server.url(path))}", server.url(path)]
    subprocess.run(command[:3] + ["-d1s"] + command[4:], capture_output=True, check=True, timeout=60)
    user, system = cpu_ticks(server.process.pid)
    sleeps = resource.getrusage(resource.RUSAGE_CHILDREN).ru_nvcsw
    output = subprocess.run(command, capture_output=True, text=True, check=True, timeout=seconds + 60).stdout
    sleeps = resource.getrusage(resource.RUSAGE_CHILDREN).ru_nvcsw - sleeps
    user_after, system_after = cpu_ticks(server.process.pid)
    requests = int(re.search(r"(\d+) requests in", output).group(1))
    if re.search(r"Non-2xx or 3xx responses", output):
        raise SystemExit(f"{server.url(path)} answered errors:\n{output}")
    tick = os.sysconf("SC_CLK_TCK")
    per_poll = lambda ticks: ticks / tick / max(requests, 1) * 1e6  # noqa: E731
    return (float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1)), per_poll(user_after - user), per_poll(system_after - system),
            sleeps / max(requests, 1))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", help="the first Herald binary (a release build)")
    parser.add_argument("after", help="the second Herald binary")
    parser.add_argument("--rounds", type=int, default=5, choices=range(1, 21), metavar="1..20")
    parser.add_argument("--seconds", type=int, default=5, choices=range(1, 61), metavar="1..60", help="per wrk run")
    args = parser.parse_args()
    os.environ["HERALD_BIN"] = os.path.abspath(args.before)
    binaries = run.build(swift=False)
    servers = []
    directories = [tempfile.mkdtemp(prefix="herald-poll-builds-")]

    def serve(binary, name, data):
        server = run.herald_serve(dict(binaries, herald=os.path.abspath(binary)), name, data, log_level="info",
                                  rate_limit=run.POLL_RATE_LIMIT)
        servers.append(server)
        return server

    try:
        setup = serve(args.before, "herald-setup", directories[0])
        media = []
        for index in range(4):
            _, body = run.http("POST", setup.url("/v1/media"), run.PNG + bytes([index]) * 100, "image/png")
            media.append(json.loads(body)["id"])
        _, body = run.http("POST", setup.url("/v1/posts"), json.dumps({"text": "benchmark", "media_ids": media}).encode(),
                           "application/json")
        job = json.loads(body)["job"]["id"]
        _, body = run.http("GET", setup.url(f"/v1/jobs/{job}?wait=30"))
        assert json.loads(body)["state"] == "succeeded", body
        path = f"/v1/jobs/{job}"
        _, expected = run.http("GET", setup.url(path))
        key = run.KEYS[setup.port]
        servers.remove(setup)
        setup.stop()
        builds = {}
        for name, binary in (("before", args.before), ("after", args.after)):
            directories.append(run.copy_data_directory(directories[0]))
            builds[name] = serve(binary, f"herald-{name}", directories[-1])
            run.KEYS[builds[name].port] = key
            _, answer = run.http("GET", builds[name].url(path))
            assert answer == expected, f"the {name} build answers the setup's bytes:\n{expected!r}\n{answer!r}"
        database = os.path.join(directories[0], "herald.sqlite")
        port = run.free_port()
        run.KEYS[port] = key
        c_product = run.start_server("c-status-product", [binaries["status"], "--product", "--rate-limit", str(run.POLL_RATE_LIMIT),
                                                          str(port), database, run.job_tenant(database, job),
                                                          run.status_query(binaries)], port, ready_path=path)
        servers.append(c_product)
        _, answer = run.http("GET", c_product.url(path))
        assert answer == expected, "the C server answers Herald's bytes"

        contenders = [("before", builds["before"]), ("after", builds["after"]), ("C, product work", c_product)]
        results = {name: [] for name, _ in contenders}
        for round_number in range(1, args.rounds + 1):
            order = contenders if round_number % 2 else [contenders[1], contenders[0], contenders[2]]
            for name, server in order:
                results[name].append(poll(server, path, args.seconds))
                rate, user, system, sleeps = results[name][-1]
                print(f"round {round_number} {name}: {rate:,.0f} req/s, user {user:.1f} µs, system {system:.1f} µs a poll; "
                      f"wrk slept {sleeps:.2f} times a request", flush=True)
        print(f"\nmedians of {args.rounds} rounds (req/s min–max):")
        medians = {}
        for name, rows in results.items():
            rate, user, system, sleeps = (statistics.median(row[index] for row in rows) for index in range(4))
            medians[name] = (rate, user + system)
            low, high = min(row[0] for row in rows), max(row[0] for row in rows)
            print(f"{name}: {rate:,.0f} ({low:,.0f}–{high:,.0f}) req/s; user {user:.1f}, system {system:.1f}, CPU {user + system:.1f} µs a poll; "
                  f"wrk slept {sleeps:.2f} times a request")
        c_rate, c_cpu = medians["C, product work"]
        for name in ("before", "after"):
            rate, cpu = medians[name]
            print(f"{name} / C: {rate / c_rate:.2f}× by req/s, {c_cpu / cpu:.2f}× by CPU a poll")
    finally:
        for server in servers:
            server.stop()
        for directory in directories:
            subprocess.run(["rm", "-rf", directory], check=False)


if __name__ == "__main__":
    main()
