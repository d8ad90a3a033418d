#!/usr/bin/env python3
"""A throwaway PostgreSQL server on 127.0.0.1 for the tests: started, announced, stopped when stdin closes.

Lines on stdin, `stop` and `start`, stop the server (fast shutdown) and start it again on the same port and data;
`pause` and `resume` stop and continue its processes (SIGSTOP, SIGCONT: a server that stops answering without closing
anything). Each is answered by one JSON line once done: for the tests of what Herald does while PostgreSQL is down.

Runs Debian's PostgreSQL 15 (`apt-get install postgresql`): `initdb` on a new temporary directory, then `pg_ctl start`
on a free loopback port, fsync off (a test database need not survive a power cut; `--durable` keeps it on, for the
benchmarks). PostgreSQL refuses to run as root,
so as root both run as the `postgres` user. Once the server accepts connections this prints one JSON line,
{"port": P, "user": "postgres"}, then waits for its standard input to close (the test process ended or let go)
and stops the server at once and removes the directory. A failure prints {"error": "..."} instead.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile

BIN = "/usr/lib/postgresql/15/bin"


def as_postgres(command):
    """`command` as the postgres user when this runs as root (PostgreSQL refuses root), else as is."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def cluster(data):
    """The server's processes: the postmaster (first) and its children."""
    with open(os.path.join(data, "postmaster.pid")) as pidfile:
        postmaster = int(pidfile.readline())
    children = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    # The parent's pid is the second field after the command's closing parenthesis.
                    if int(stat.read().rsplit(")", 1)[1].split()[1]) == postmaster:
                        children.append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    return [postmaster, *children]


def main():
    directory = tempfile.mkdtemp(prefix="herald-postgres-")
    data = os.path.join(directory, "data")
    if os.geteuid() == 0:
        shutil.chown(directory, "postgres", "postgres")
    started = False
    try:
        subprocess.run(as_postgres([f"{BIN}/initdb", "-D", data, "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8"]),
                       check=True, capture_output=True, timeout=120)
        # A port taken between the probe and the server's bind: try another (three times at most).
        for _ in range(3):
            port = free_port()
            # Durable (--durable, for the benchmarks: as users run it) or not (the tests: a power cut need not be survived).
            durability = "" if "--durable" in sys.argv else "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
            # HERALD_POSTGRES_OPTIONS: more server options, e.g. to profile with pg_stat_statements (Benchmarks/notes.md).
            extra = os.environ.get("HERALD_POSTGRES_OPTIONS", "")
            options = f"-p {port} -k {directory} -c listen_addresses=127.0.0.1 {durability}-c max_connections=200 {extra}"
            result = subprocess.run(as_postgres([f"{BIN}/pg_ctl", "-D", data, "-o", options, "-l", os.path.join(directory, "log"),
                                                 "-w", "-t", "60", "start"]), capture_output=True, timeout=90)
            if result.returncode == 0:
                started = True
                break
        if not started:
            with open(os.path.join(directory, "log"), errors="replace") as log:
                raise RuntimeError(f"pg_ctl start failed: {log.read()[-2000:]}")
        print(json.dumps({"port": port, "user": "postgres"}), flush=True)
        # Commands, a line each, for the tests that take the server down mid-run; each is answered with a line.
        for command in sys.stdin:
            if command.strip() == "stop":
                subprocess.run(as_postgres([f"{BIN}/pg_ctl", "-D", data, "-m", "fast", "-w", "stop"]), capture_output=True, timeout=60)
                print(json.dumps({"stopped": True}), flush=True)
            elif command.strip() == "start":
                result = subprocess.run(as_postgres([f"{BIN}/pg_ctl", "-D", data, "-o", options, "-l", os.path.join(directory, "log"),
                                                     "-w", "-t", "60", "start"]), capture_output=True, timeout=90)
                print(json.dumps({"started": result.returncode == 0}), flush=True)
            elif command.strip() == "pause":
                # The postmaster first, so that it forks no new backend meanwhile.
                for pid in cluster(data):
                    os.kill(pid, signal.SIGSTOP)
                print(json.dumps({"paused": True}), flush=True)
            elif command.strip() == "resume":
                for pid in reversed(cluster(data)):
                    os.kill(pid, signal.SIGCONT)
                print(json.dumps({"resumed": True}), flush=True)
    except Exception as error:  # noqa: BLE001 - reported to the test, which fails with it
        print(json.dumps({"error": str(error)}), flush=True)
    finally:
        if started:
            try:
                for pid in cluster(data):
                    os.kill(pid, signal.SIGCONT)
            except OSError:
                pass
            subprocess.run(as_postgres([f"{BIN}/pg_ctl", "-D", data, "-m", "immediate", "-w", "stop"]), capture_output=True, timeout=60)
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
