"""(h) Waiters: `--waiters` agents (default 200) wait at once on
`GET /api/v1/workflows/{id}/wait` for the decision on their own plan,
served by one web process started as production starts it (gunicorn with
the ASGI front, `WEB_THREADS` Django threads). When every one of them is
waiting (the process's `durable_waiters` gauge says so), a reviewer decides
the plans one after another, `DECISIONS_PER_S` a second, each in its own
transaction, and each waiter's delay is measured from its decision (the
workflow's `updated_at`, written in the deciding transaction) to its answer
arriving.

The plans are rejected: a decision like an approval to a waiter, and one
that leaves no work behind for the clusters of a later run. While they
wait, the web process's threads, memory and (on PostgreSQL) database
sessions are read: threads and sessions may not grow with the waiters.
"""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path

import requests
from django.conf import settings
from django.db import connection

from workflows.models import Workflow
from workflows.operations import approvals, tokens
from workflows.operations.deciding import Seen
from workflows.ops.bench.common import BenchError
from workflows.ops.bench.fleet import spread
from workflows.ops.processes import WebServer

SERVER_NAME = "bench:web"
WAIT_SECONDS = 60
# Reviewers decide one plan after another at this pace (each its own
# transaction): what is measured is how soon a decision reaches its waiter,
# not how fast a burst of answers can be served.
DECISIONS_PER_S = 20


class Waiter(threading.Thread):
    def __init__(self, url: str, token: str, workflow_id):
        super().__init__(daemon=True, name=f"bench-waiter-{workflow_id}")
        self.url, self.token, self.workflow_id = url, token, workflow_id
        self.answer: dict | None = None
        self.answered_at: float | None = None
        self.error: str | None = None

    def run(self):
        try:
            response = requests.get(
                f"{self.url}/api/v1/workflows/{self.workflow_id}/wait",
                params={"until": "decision", "timeout": WAIT_SECONDS},
                headers={"Authorization": f"Bearer {self.token}"},
                timeout=WAIT_SECONDS + 30,
            )
            self.answered_at = time.time()
            if response.status_code != 200:
                self.error = f"{response.status_code} {response.text[:200]}"
            else:
                self.answer = response.json()
        except requests.RequestException as exc:
            self.error = f"{type(exc).__name__}: {exc}"


class WaitersPart:
    """Part (h), run by the Bench with its personas and options."""

    def __init__(self, bench):
        self.bench, self.o = bench, bench.o

    def run(self) -> dict:
        count = self.o.waiters
        ids = self.bench.submit(count, 1, "h")
        token = tokens.issue(self.bench.agent, name="bench waiters")
        # Production settings, served over plain HTTP on loopback.
        env = {**self.bench.cluster_env, "ALLOWED_HOSTS": "127.0.0.1", "SECURE_SSL_REDIRECT": "0"}
        with WebServer(SERVER_NAME, self.bench.workdir, env) as server:
            (worker,) = server.worker_pids()
            threads_before, rss_before = _threads(worker), _rss_mib(worker)
            waiters = [Waiter(server.url, token, workflow_id) for workflow_id in ids]
            for waiter in waiters:
                waiter.start()
            _until_waiting(server.url, count, timeout=30 + count / 10)
            threads_during, rss_during, sessions_during = _threads(worker), _rss_mib(worker), _sessions(SERVER_NAME)
            self.bench.log(
                f"    {count} waiters waiting; the web process has {threads_during} threads"
                + (f" and {sessions_during} database sessions" if sessions_during is not None else "")
            )
            began = time.monotonic()
            for n, workflow in enumerate(Workflow.objects.filter(pk__in=ids)):
                time.sleep(max(0.0, began + n / DECISIONS_PER_S - time.monotonic()))
                approvals.reject(workflow, by=self.bench.reviewer, seen=Seen.current(workflow), comment="bench")
            deciding_s = time.monotonic() - began
            for waiter in waiters:
                waiter.join(WAIT_SECONDS + 40)
        if failed := [waiter.error for waiter in waiters if waiter.error]:
            raise BenchError(f"{len(failed)} of {count} waiters failed, e.g. {failed[:3]}")
        undecided = [waiter.workflow_id for waiter in waiters if (waiter.answer or {}).get("decision") != "rejected"]
        if undecided:
            raise BenchError(f"{len(undecided)} of {count} waiters were answered without their decision")
        decided_at = dict(Workflow.objects.filter(pk__in=ids).values_list("pk", "updated_at"))
        delays = [(waiter.answered_at - decided_at[waiter.workflow_id].timestamp()) * 1000 for waiter in waiters]
        result = {
            "waiters": count,
            "answered": len(waiters),
            "web_threads_setting": settings.WEB_THREADS,
            "deciding_seconds": round(deciding_s, 2),
            "decided_per_s": round(count / deciding_s, 1),
            "answer_after_decision_ms": spread(delays, 1),
            "server_threads": {"before": threads_before, "during": threads_during},
            "server_rss_mib": {
                "before": rss_before,
                "during": rss_during,
                "per_waiter_kib": round((rss_during - rss_before) * 1024 / count, 1),
            },
            "server_database_sessions_during": sessions_during,
        }
        self.bench.log(
            f"    answered after their decision: p50 {result['answer_after_decision_ms']['p50']} ms, "
            f"p95 {result['answer_after_decision_ms']['p95']} ms, "
            f"max {result['answer_after_decision_ms']['max']} ms"
        )
        return result


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    raise BenchError(f"no VmRSS for process {pid}")


def _sessions(application_name: str) -> int | None:
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [application_name])
        return cursor.fetchone()[0]


def _until_waiting(url: str, count: int, timeout: float) -> None:
    """Until the web process's gauge counts every waiter."""
    deadline = time.monotonic() + timeout
    waiting = 0
    while time.monotonic() < deadline:
        headers = {"Authorization": f"Bearer {settings.METRICS_TOKEN}"} if settings.METRICS_TOKEN else {}
        metrics = requests.get(f"{url}/metrics", headers=headers, timeout=10).text
        if found := re.search(r"^durable_waiters (\d+)$", metrics, re.M):
            waiting = int(found.group(1))
            if waiting >= count:
                return
        time.sleep(0.2)
    raise BenchError(f"only {waiting} of {count} waiters were waiting after {timeout:.0f} s")
