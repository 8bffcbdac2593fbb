"""Processes the chaos soak and the bench start and watch: the ticket desk,
web servers and `qcluster` clusters as child processes, each server and
cluster in its own process group, and whether processes are still alive
(from /proc: Linux).

Used by workflows.ops.chaos, workflows.ops.bench, `manage.py chaos` and
the tests that need real processes.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import requests
from django.conf import settings
from django.db import connection

from workflows.engine import leases


def database_url() -> str:
    """A URL for child processes that points at the database this process uses."""
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"
    auth = quote(db["USER"] or "") + (f":{quote(db['PASSWORD'])}" if db.get("PASSWORD") else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def session_name(cluster_name: str) -> str:
    """The PostgreSQL application_name of a chaos cluster's sessions (PGAPPNAME)."""
    return f"chaos:{cluster_name}"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _manage(*args: str) -> list[str]:
    return [sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), *args]


class _ChildServer:
    """A `manage.py` server as a child process, started once it answers a
    readiness URL, its output in a log file."""

    what = "the server"
    process: subprocess.Popen | None = None

    def _spawn(self, args: list[str], log_path: Path, ready_url: str, timeout: float) -> None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as out:
            self.process = subprocess.Popen(_manage(*args), cwd=settings.BASE_DIR, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.what} exited at start; see {log_path}")
            try:
                if requests.get(ready_url, timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{self.what} did not answer within {timeout} s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


class DeskProcess(_ChildServer):
    """`manage.py ticketdesk` as a child process with its own data file."""

    what = "the ticket desk"

    def __init__(self, data_path: Path, port: int | None = None, *, jwks: Path | None = None):
        self.data_path = Path(data_path)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # The console's key set: the desk then requires an approval proof of every write.
        self.jwks = jwks

    def start(self, timeout: float = 15.0) -> DeskProcess:
        args = ["ticketdesk", "--port", str(self.port), "--data", str(self.data_path)]
        if self.jwks is not None:
            args += ["--require-approval-proof", "--jwks", str(self.jwks), "--audience", self.url]
        self._spawn(args, self.data_path.with_suffix(".log"), f"{self.url}/tickets", timeout)
        return self


class SlackStandinProcess(_ChildServer):
    """`manage.py slack_standin` as a child process (workflows.ops.slack_standin).
    The port is chosen once: a restarted stand-in answers on the same URL,
    with no messages and no calls (Slack's own state is not what tests pin)."""

    what = "the Slack stand-in"

    def __init__(self, log_path: Path, *, token: str, channels: list[str], port: int | None = None):
        self.log_path = Path(log_path)
        self.token = token
        self.channels = list(channels)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.api_url = f"{self.url}/api/"

    def start(self, timeout: float = 15.0) -> SlackStandinProcess:
        channels = [arg for channel in self.channels for arg in ("--channel", channel)]
        args = ["slack_standin", "--port", str(self.port), "--token", self.token, *channels]
        self._spawn(args, self.log_path, f"{self.url}/_standin/ready", timeout)
        return self

    def kill(self) -> None:
        """SIGKILL (Slack unreachable: connections refused until start())."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.process = None

    def calls(self) -> list[dict]:
        response = requests.get(f"{self.url}/_standin/calls", timeout=10)
        response.raise_for_status()
        return response.json()

    def clear(self) -> None:
        requests.delete(f"{self.url}/_standin/calls", timeout=10).raise_for_status()

    def rate_limit(self, calls: int, retry_after: int) -> None:
        """The next `calls` API calls answer 429 with Retry-After: retry_after."""
        response = requests.post(
            f"{self.url}/_standin/rate_limit", json={"calls": calls, "retry_after": retry_after}, timeout=10
        )
        response.raise_for_status()


class WebServer:
    """The web process as production starts it (docs/deploying.md#serving-the-console):
    `gunicorn durableconsole.asgi -k asgi`, in its own process group."""

    def __init__(self, name: str, workdir: Path, env: dict[str, str], *, workers: int = 1):
        self.name = name
        self.workdir = Path(workdir)
        self.env = {"PGAPPNAME": name, **env}
        self.workers = workers
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = self.workdir / f"{name}.log"
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 30.0) -> WebServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        command = [
            sys.executable,
            "-m",
            "gunicorn",
            "durableconsole.asgi",
            "-k",
            "asgi",
            "--bind",
            f"127.0.0.1:{self.port}",
            "--workers",
            str(self.workers),
            "--graceful-timeout",
            "5",
        ]
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                command,
                cwd=settings.BASE_DIR,
                env={**os.environ, **self.env},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"web server {self.name} did not start; {self.log_path}:\n"
                    f"{self.log_path.read_text(errors='replace')[-4000:]}"
                )
            try:
                if (
                    len(self.worker_pids()) == self.workers
                    and requests.get(f"{self.url}/healthz", timeout=1).status_code == 200
                ):
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.1)

    def worker_pids(self) -> list[int]:
        """gunicorn's workers: the children of its master process."""
        return sorted(pid for pid, ppid, _ in _live_processes() if ppid == self.process.pid)

    def stop(self, timeout: float = 20.0) -> None:
        if self.process is None:
            return
        for signum in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.process.pid, signum)
            except ProcessLookupError:
                pass
            try:
                self.process.wait(timeout)
                break
            except subprocess.TimeoutExpired:
                continue
        self.process = None

    def __enter__(self) -> WebServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class Cluster:
    """`manage.py qcluster` in its own process group, as one host runs it.
    Each start writes its own log; the cluster's liveness signal
    (WORKER_HEARTBEAT_FILE) says it is up."""

    def __init__(self, name: str, workdir: Path, env: dict[str, str]):
        self.name = name
        self.workdir = Path(workdir)
        self.heartbeat_file = self.workdir / f"{name}.heartbeat"
        self.env = {"PGAPPNAME": session_name(name), **env}
        self.process: subprocess.Popen | None = None
        self.starts = 0
        self.log_path: Path | None = None

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, timeout: float = 30.0) -> Cluster:
        self.starts += 1
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.heartbeat_file.unlink(missing_ok=True)
        self.log_path = self.workdir / f"{self.name}-{self.starts}.log"
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "WORKER_HEARTBEAT_FILE": str(self.heartbeat_file), **self.env}
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                _manage("qcluster"),
                cwd=settings.BASE_DIR,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while not self.heartbeat_file.exists():
            exited = self.process.poll() is not None
            if exited or time.monotonic() > deadline:
                self.kill()
                why = "exited while starting" if exited else f"did not start within {timeout} s"
                raise RuntimeError(f"cluster {self.name} {why}; {self.log_path}:\n{self.log()[-4000:]}")
            time.sleep(0.05)
        return self

    def log(self) -> str:
        """What the latest start has written so far."""
        return self.log_path.read_text(errors="replace") if self.log_path else ""

    def wait_dead(self, timeout: float = 30.0) -> int:
        """Wait for the cluster's main process to die (e.g. at a failpoint)."""
        return self.process.wait(timeout)

    def kill(self) -> None:
        """SIGKILL the whole process group: main loop, sentinel and workers."""
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()
        self.process = None

    def stop(self, timeout: float = 20.0) -> None:
        if self.alive:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        self.kill()


def _live_processes() -> list[tuple[int, int, int]]:
    """(pid, parent pid, process group) of every live process, from /proc
    (Linux; psutil is not among the dependencies). A zombie counts as dead:
    it was killed and only waits to be reaped."""
    table = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        state, ppid, pgid = stat.rsplit(")", 1)[1].split()[:3]
        if state not in ("Z", "X"):
            table.append((int(entry.name), int(ppid), int(pgid)))
    return table


def group_pids(pgid: int) -> set[int]:
    return {pid for pid, _, group in _live_processes() if group == pgid}


def sentinel_children(pgid: int) -> list[int]:
    """django-q's workers, pusher and monitor: the children of the sentinel,
    which is the only child of the cluster's main process."""
    members = [(pid, ppid) for pid, ppid, group in _live_processes() if group == pgid]
    sentinels = {pid for pid, ppid in members if ppid == pgid}
    return sorted(pid for pid, ppid in members if ppid in sentinels)


def descendants(pid: int) -> set[int]:
    """The live processes below `pid` (its children, theirs, ...)."""
    children: dict[int, list[int]] = {}
    for child, parent, _ in _live_processes():
        children.setdefault(parent, []).append(child)
    found, frontier = set(), [pid]
    while frontier:
        for child in children.get(frontier.pop(), []):
            if child not in found:
                found.add(child)
                frontier.append(child)
    return found


def alive(pid: int) -> bool:
    return any(live == pid for live, _, _ in _live_processes())


def gone(pids, timeout: float = 2.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        live = {pid for pid, _, _ in _live_processes()}
        if not live & set(pids):
            return True
        time.sleep(0.02)
    return False


def owner_pid(lease_owner: str) -> int | None:
    host, _, pid = lease_owner.rpartition(":")
    return int(pid) if host == leases.LOCAL_PREFIX and pid.isdigit() else None
