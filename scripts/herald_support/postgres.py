"""A PostgreSQL 15 of this run (Tests/Support/postgres_server.py) on loopback, for the scripts that run Herald on it."""
import json
import os
import subprocess
import sys
import time
import uuid

from . import cpu_seconds

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PSQL = "/usr/lib/postgresql/15/bin/psql"


class Postgres:
    """Started on entering (durable, as users run it, or with fsync off as the tests do), stopped on leaving."""

    def __init__(self, durable=True):
        self.durable = durable

    def __enter__(self):
        script = os.path.join(ROOT, "Tests", "Support", "postgres_server.py")
        arguments = [sys.executable, script] + (["--durable"] if self.durable else [])
        self.process = subprocess.Popen(arguments, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        handshake = json.loads(self.process.stdout.readline() or '{"error": "no answer"}')
        if "port" not in handshake:
            self.process.kill()
            raise RuntimeError(f"PostgreSQL did not start: {handshake}")
        self.port, self.user = handshake["port"], handshake["user"]
        return self

    def __exit__(self, *_):
        self.process.stdin.close()
        self.process.wait(timeout=120)

    def sql(self, statement, database="postgres"):
        """One statement through psql (trust on loopback): its output, unaligned."""
        command = [PSQL, "-h", "127.0.0.1", "-p", str(self.port), "-U", self.user, "-d", database, "-At", "-c", statement]
        return subprocess.run(command, capture_output=True, text=True, check=True, timeout=120).stdout.strip()

    def database(self):
        """A new database: its `--database` URL."""
        name = "herald_" + uuid.uuid4().hex
        self.sql(f"CREATE DATABASE {name}")
        return f"postgres://{self.user}@127.0.0.1:{self.port}/{name}?sslmode=disable"

    @staticmethod
    def name_of(url):
        """The database name of a `--database` URL made by database()."""
        return url.rsplit("/", 1)[1].split("?")[0]

    def wal_syncs(self, settle=0.0):
        """WAL flushes so far (pg_stat_wal.wal_sync): the durable commits, grouped as PostgreSQL groups them. A server
        process reports its counts at most once a second while busy, and an idle one within 10 s: `settle` seconds are
        waited first (11 after a workload whose connections stay open; 2 once they have closed, which reports them)."""
        time.sleep(settle)
        return int(self.sql("SELECT wal_sync FROM pg_stat_wal"))

    def cpu_seconds(self):
        """CPU seconds of the server's processes alive now (the postmaster and its children)."""
        total = 0.0
        for pid in subprocess.run(["pgrep", "-u", "postgres"], capture_output=True, text=True).stdout.split():
            try:
                total += cpu_seconds(int(pid))
            except (OSError, ValueError):
                pass
        return total
