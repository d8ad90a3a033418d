"""What the Python scripts of Reliability/ and Benchmarks/ share: starting Herald and other servers on 127.0.0.1."""
# A script puts scripts/ on sys.path, then imports herald_support (and herald_support.fake_s3 for the S3 fake).
# Standard library only; every wait is bounded.
import http.client
import os
import signal
import socket
import subprocess
import time

HOST = "127.0.0.1"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def free_port():
    """A port nothing listens on now (another process may take it before the server binds it)."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def create_key(binary, data_dir, name, database=None):
    """`herald keys create` with the admin scope, before the server starts (as an operator would), in `data_dir`'s
    SQLite or the PostgreSQL `database` URL: the new key."""
    command = [str(binary), "keys", "create", "--name", name, "--scope", "admin", "--data-dir", str(data_dir)]
    command += ["--database", database] if database else []
    created = subprocess.run(command, capture_output=True, text=True, check=True, timeout=60)
    return created.stdout.split("\n", 1)[0]


def rss_kib(pid, field="VmRSS"):
    """A size of /proc/PID/status in KiB (VmRSS, or VmHWM for the peak); None if unreadable."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def cpu_seconds(pid):
    """User and system CPU seconds of `pid` so far (utime + stime of /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def get_status(port, path, headers=None, timeout=2.0):
    """The status of `GET path` on a new connection, None if there was no answer."""
    connection = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        connection.request("GET", path, headers={"Connection": "close", **(headers or {})})
        response = connection.getresponse()
        response.read()
        return response.status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        connection.close()


class Server:
    """A server process on 127.0.0.1:`port`; its stdout and stderr go to `log_path` (or nowhere)."""

    # `env` adds variables to ours. `append_log`: a server restarted on the same data directory keeps one log.
    def __init__(self, command, port, name=None, log_path=None, append_log=False, env=None):
        self.command = [str(part) for part in command]
        self.port = port
        self.name = name or (os.path.basename(self.command[0]) if self.command else "server")
        self.log_path = str(log_path) if log_path else None
        self.append_log = append_log
        self.env = dict(os.environ, **env) if env else None
        self.process = None
        self._log = None

    def start(self, ready_path="/readyz", timeout=20.0, headers=None):
        """Starts it, then waits until GET `ready_path` is 200; RuntimeError (with the log's tail) if not in time."""
        self.spawn()
        if not self.wait_ready(ready_path, timeout, headers):
            self.kill()
            raise RuntimeError(f"{self.name} did not become ready: {self.log_tail()}")
        return self

    def spawn(self):
        if self.log_path:
            self._log = open(self.log_path, "ab" if self.append_log else "wb")
        output = self._log or subprocess.DEVNULL
        self.process = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=output, stderr=output,
                                        env=self.env)

    def wait_ready(self, ready_path, timeout, headers=None):
        """True once GET `ready_path` answers 200 (no other sign that it listens); False if it exits or time runs out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            if get_status(self.port, ready_path, headers) == 200:
                return True
            time.sleep(0.02)
        return False

    def url(self, path):
        return f"http://{HOST}:{self.port}{path}"

    @property
    def pid(self):
        return self.process.pid

    def alive(self):
        return self.process is not None and self.process.poll() is None

    def terminate(self):
        self.process.send_signal(signal.SIGTERM)

    def kill(self):
        """SIGKILL, then reap; returns the exit status."""
        if self.alive():
            self.process.send_signal(signal.SIGKILL)
        return self.wait(10)

    def wait(self, timeout):
        """The exit status, or None if still running after `timeout` seconds."""
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        if self._log is not None:
            self._log.close()
            self._log = None
        return code

    def stop(self, timeout=30.0):
        """SIGTERM, wait; SIGKILL if it does not exit in time. Returns the exit status."""
        if not self.alive():
            return self.wait(1)
        self.terminate()
        code = self.wait(timeout)
        return code if code is not None else self.kill()

    def rss_kib(self, field="VmRSS"):
        return rss_kib(self.pid, field)

    def cpu_seconds(self):
        return cpu_seconds(self.pid)

    def log_text(self):
        """Everything the server wrote so far ("" without a log file)."""
        if not self.log_path or not os.path.exists(self.log_path):
            return ""
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def log_tail(self, lines=20):
        return "\n".join(self.log_text().splitlines()[-lines:])


class Herald(Server):
    """`herald serve --host 127.0.0.1 --port P --data-dir D FLAGS...`, on a free port unless `port` is given."""

    def __init__(self, binary, data_dir, *flags, port=None, name="herald", **options):
        super().__init__([], port, name=name, **options)
        self.binary = str(binary)
        self.data_dir = str(data_dir)
        self.flags = [str(flag) for flag in flags]
        self.fixed_port = port

    def start(self, ready_path="/readyz", timeout=20.0, headers=None):
        # A port taken between free_port() and Herald's bind: try another (twice at most).
        for _ in range(1 if self.fixed_port else 3):
            self.port = self.fixed_port or free_port()
            self.command = [self.binary, "serve", "--host", HOST, "--port", str(self.port), "--data-dir", self.data_dir,
                            *self.flags]
            self.spawn()
            if self.wait_ready(ready_path, timeout, headers):
                return self
            self.kill()
        raise RuntimeError(f"herald did not become ready: {self.log_tail()}")
