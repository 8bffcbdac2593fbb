"""Real worker processes for tests: `python manage.py qcluster` in its own
process group, pointed at the test database."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from workflows.ops.processes import Cluster, database_url

PROJECT_DIR = Path(__file__).resolve().parents[2]


# The workers this test process has running: a client that decides on what
# it just read waits, as a reviewer would, for the previews they are taking.
RUNNING: set[Worker] = set()


class Worker(Cluster):
    """A cluster on the database the test run created."""

    def __init__(self, workdir: Path, *, env: dict[str, str] | None = None, name: str = "worker"):
        super().__init__(name, workdir, {"DATABASE_URL": database_url(), **(env or {})})

    def start(self, *args, **kwargs) -> Worker:
        RUNNING.add(self)
        return super().start(*args, **kwargs)

    def stop(self, *args, **kwargs) -> None:
        RUNNING.discard(self)
        super().stop(*args, **kwargs)


def manage(*args: str, cwd=None, python=(sys.executable,), **env: str) -> subprocess.CompletedProcess:
    """`python manage.py ARGS` in a process of its own, as an operator runs it."""
    return subprocess.run(
        [*python, "manage.py", *args],
        cwd=cwd or PROJECT_DIR,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
