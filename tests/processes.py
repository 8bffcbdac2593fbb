"""Real worker processes for tests: `python manage.py qcluster` in its own
process group, pointed at the test database."""

from __future__ import annotations

from pathlib import Path

from workflows.ops.processes import Cluster, database_url

PROJECT_DIR = Path(__file__).resolve().parent.parent


class Worker(Cluster):
    """A cluster on the database the test run created."""

    def __init__(self, workdir: Path, *, env: dict[str, str] | None = None, name: str = "worker"):
        super().__init__(name, workdir, {"DATABASE_URL": database_url(), **(env or {})})
