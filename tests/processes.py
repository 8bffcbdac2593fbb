"""Real worker processes for tests: `python manage.py qcluster` in its own
process group, pointed at the test database."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from workflows.processes import database_url

PROJECT_DIR = Path(__file__).resolve().parent.parent


class Worker:
    def __init__(self, workdir: Path, *, env: dict[str, str] | None = None, name: str = "worker"):
        self.workdir = Path(workdir)
        self.name = name
        self.env = env or {}
        self.process: subprocess.Popen | None = None
        self.starts = 0
        self.heartbeat_file = self.workdir / f"{name}.heartbeat"
        self.log_path: Path | None = None

    def start(self, timeout: float = 20.0, **extra_env) -> Worker:
        self.starts += 1
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.heartbeat_file.unlink(missing_ok=True)
        self.log_path = self.workdir / f"{self.name}-{self.starts}.log"
        env = {
            **os.environ,
            "DATABASE_URL": database_url(),
            "WORKER_HEARTBEAT_FILE": str(self.heartbeat_file),
            "PYTHONUNBUFFERED": "1",
            **self.env,
            **extra_env,
        }
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "manage.py", "qcluster"],
                cwd=PROJECT_DIR, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while not self.heartbeat_file.exists():
            if self.process.poll() is not None:
                raise AssertionError(f"worker exited while starting:\n{self.log()}")
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"worker did not start within {timeout} s:\n{self.log()}")
            time.sleep(0.05)
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path else ""

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def wait_dead(self, timeout: float = 30.0) -> int:
        """Wait for the cluster's main process to die (e.g. after a failpoint)."""
        return self.process.wait(timeout)

    def kill(self) -> None:
        """SIGKILL the whole process group: cluster, sentinel and workers."""
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()
        self.process = None

    def stop(self, timeout: float = 20.0) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        self.kill()
