"""What durable execution costs on this machine, measured in one run
(`python manage.py bench`).

    a  raw ceiling: the database alone, looping two commits per step (insert
       the attempt, then update its outcome) from 1, 4 and 8 client threads
    b  durable steps per second: `noop` plans approved in one transaction and
       run by real `qcluster` processes (one cluster, then two) through the
       whole checkpoint protocol; first the protocol's queries and commits
       per step, counted in this process
    c  approval-to-first-effect latency: one-step plans approved one at a time
       while a cluster idles
    d  recovery: a worker SIGKILLed mid-step (failpoint `after_requested`)
       until the step is COMPLETE, once with the cluster respawning the
       worker, once with the whole cluster killed and a fresh one started
    e  server time and query count of the console's pages at a seeded scale
    f  RSS of every cluster process, sampled four times a second during b

Goals are reported, never asserted. Every process started here is stopped
in a `finally`; a part that fails is recorded under `errors` and the rest
still runs.
"""

from __future__ import annotations

import math
import os
import random
import sqlite3
import statistics
import threading
import time
import uuid
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from io import StringIO
from pathlib import Path
from urllib.parse import quote

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.db import connection, transaction
from django.db.models import Count, Max, Min
from django.test import Client
from django.test.utils import override_settings
from django.utils import timezone
from django_q.brokers import get_broker

from workflows import approvals, chaos, execution, failpoints, plans, roles
from workflows.models import Approval, Attempt, AuditEvent, DeadLetter, Step, Workflow
from workflows.states import StepStatus, WorkflowStatus

AGENT, REVIEWER, CONSOLE = "bench-agent", "bench-reviewer", "bench-console"
SECTIONS = {"a": "raw", "b": "throughput", "c": "latency", "d": "recovery", "e": "pages", "f": "memory"}
PARKED = (StepStatus.DEAD_LETTERED, StepStatus.IN_DOUBT, StepStatus.BLOCKED)
# A plan with a parked step stops in one of these.
STOPPED = (WorkflowStatus.FAILED, WorkflowStatus.NEEDS_ATTENTION)
MIB = 1024
# (f) is judged only over runs of at least this many steps.
MEMORY_STEPS = 100_000


class BenchError(Exception):
    """A part could not measure what it set out to."""


@dataclass
class Options:
    steps: int = 100_000
    steps_per_workflow: int = 10
    clusters: tuple[int, ...] = (1, 2)
    workers_per_cluster: int = 0  # 0: Q_WORKERS
    raw_seconds: float = 5.0
    raw_clients: tuple[int, ...] = (1, 4, 8)
    latency_samples: int = 50
    recovery_runs: int = 3
    seed_workflows: int = 10_000
    seed_events: int = 100_000
    page_requests: int = 30
    lease_seconds: float = 10.0
    skip: frozenset[str] = frozenset()
    database_url: str = ""
    workdir: Path = field(default_factory=lambda: Path(settings.VAR_DIR) / "bench")


def database_url() -> str:
    """A URL for child processes that points at the database this process uses."""
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"
    auth = quote(db["USER"] or "") + (f":{quote(db['PASSWORD'])}" if db.get("PASSWORD") else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def personas():
    """The submitter and the reviewer of benchmarked (and seeded) plans."""
    User = get_user_model()
    agent, _ = User.objects.get_or_create(username=AGENT)
    reviewer, _ = User.objects.get_or_create(username=REVIEWER)
    # get_or_create: a flushed test database has lost the groups the migration made.
    reviewer.groups.add(Group.objects.get_or_create(name=roles.REVIEWERS)[0])
    return agent, reviewer


def console_user():
    """One user in every role, so that every page shows all it can."""
    user, _ = get_user_model().objects.get_or_create(username=CONSOLE)
    user.groups.add(*(Group.objects.get_or_create(name=role)[0] for role in roles.ALL))
    return user


def _setting(name: str) -> str | None:
    """A PostgreSQL server setting (e.g. autovacuum: when off, statistics go stale and dead rows pile up)."""
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute(f"SHOW {name}")
        return cursor.fetchone()[0]


def spread(values: list[float], digits: int = 1) -> dict:
    """n, p50, p95 (nearest rank) and max."""
    ordered = sorted(values)

    def rank(p):
        return round(ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)], digits)

    return {"n": len(ordered), "p50": rank(50), "p95": rank(95), "max": round(ordered[-1], digits)}


# --- processes ----------------------------------------------------------------


class Fleet:
    """The clusters one part started; every one is stopped on exit, whatever happened."""

    def __init__(self, workdir: Path, env: dict[str, str]):
        self.workdir, self.env = workdir, env
        self.started: list[chaos.Cluster] = []

    def start(self, name: str, **env) -> chaos.Cluster:
        cluster = chaos.Cluster(name, self.workdir, {**self.env, "PGAPPNAME": f"bench:{name}", **env})
        self.started.append(cluster)
        return cluster.start()

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc_info) -> None:
        for cluster in self.started:
            cluster.stop(timeout=10)


def _proc(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, RSS in KiB) from /proc; None once the process is gone."""
    try:
        lines = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    except (OSError, ValueError):
        return None
    rss = lines.get("VmRSS", "0 kB").split()[0]
    return lines["State"].split()[0], int(lines["PPid"]), int(rss)


def _dead(pid: int, timeout: float = 2.0) -> bool:
    """Gone, or a zombie waiting to be reaped."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = _proc(pid)
        if info is None or info[0] in ("Z", "X"):
            return True
        time.sleep(0.02)
    return False


class RssSampler(threading.Thread):
    """The RSS of each process of the given clusters, from /proc, a few times a second."""

    def __init__(self, clusters, interval: float = 0.25):
        super().__init__(name="bench-rss", daemon=True)
        self.groups = {cluster.process.pid: cluster.name for cluster in clusters}
        self.interval = interval
        self.samples: list[dict[int, int]] = []  # {pid: KiB}
        self.parents: dict[int, tuple[int, int]] = {}  # pid -> (process group, parent pid)
        self.stopped = threading.Event()

    def run(self) -> None:
        while True:
            sample = {}
            for pgid in self.groups:
                for pid in chaos.group_pids(pgid):
                    info = _proc(pid)
                    if info and info[2]:
                        sample[pid] = info[2]
                        self.parents[pid] = (pgid, info[1])
            self.samples.append(sample)
            if self.stopped.wait(self.interval):
                return

    def stop(self) -> None:
        self.stopped.set()
        self.join()

    def summary(self, steps_by_pid: dict[int, int]) -> dict:
        """First, peak and last RSS per process; workers are the processes that
        recorded attempts. Growth is a worker's last RSS against its RSS a fifth
        into its life (start-up and first-use caches behind it), per step it ran
        meanwhile, over the workers that ran 1,000 steps or more when there are
        any: django-q replaces a worker after Q_RECYCLE tasks, and a fresh one
        is still warming up."""
        roles = {pid: "main" if pid == pgid else "sentinel" if ppid == pgid
                 else "worker" if pid in steps_by_pid else "pusher/monitor"
                 for pid, (pgid, ppid) in self.parents.items()}
        series: dict[int, list[int]] = {}
        for sample in self.samples:
            for pid, rss in sample.items():
                series.setdefault(pid, []).append(rss)
        processes = []
        for pid, rss in series.items():
            process = {"pid": pid, "cluster": self.groups[self.parents[pid][0]], "role": roles[pid],
                       "steps": steps_by_pid.get(pid, 0), "samples": len(rss), "first_mib": round(rss[0] / MIB, 1),
                       "peak_mib": round(max(rss) / MIB, 1), "last_mib": round(rss[-1] / MIB, 1)}
            if roles[pid] == "worker" and len(rss) >= 5:
                process["growth_after_warmup_mib"] = round((rss[-1] - rss[len(rss) // 5]) / MIB, 2)
            processes.append(process)
        workers = [p for p in processes if p["role"] == "worker"]
        if not workers:
            raise BenchError("no worker process was sampled")
        measured = [p for p in workers if "growth_after_warmup_mib" in p]
        measured = [p for p in measured if p["steps"] >= 1000] or measured
        grown = sum(p["growth_after_warmup_mib"] for p in measured)
        steps = sum(p["steps"] for p in measured) * 0.8  # a worker's steps spread over its life

        def stats(group):
            return {"start": max(p["first_mib"] for p in group), "peak": max(p["peak_mib"] for p in group),
                    "end": max(p["last_mib"] for p in group)}

        return {"samples": len(self.samples), "interval_s": self.interval, "worker_processes": len(workers),
                "worker_rss_mib": stats(workers), "main_rss_mib": stats([p for p in processes if p["role"] == "main"]),
                "worker_rss_mib_by_tenth": self._by_tenth({p["pid"] for p in workers}),
                "growth_mib_per_10k_steps": round(grown / max(steps, 1) * 10_000, 3), "processes": processes}

    def _by_tenth(self, pids: set[int]) -> list[float | None]:
        """The largest worker RSS at the start, at each tenth of the run and
        at its end: flat after the first tenth is what no growth looks like."""
        last = len(self.samples) - 1
        timeline = []
        for tenth in range(11):
            sample = self.samples[round(tenth * last / 10)]
            values = [rss for pid, rss in sample.items() if pid in pids]
            timeline.append(round(max(values) / MIB, 1) if values else None)
        return timeline


def _vacuum() -> None:
    """What autovacuum would have done by now: clear the dead rows earlier
    runs left in the hot tables and refresh the planner's statistics (a
    server may run with autovacuum off; `meta.autovacuum` says)."""
    if connection.vendor != "postgresql":
        return
    tables = [model._meta.db_table for model in (Workflow, Step, Attempt, Approval)]
    tables += ["workflows_audithead", "django_q_ormq"]
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM ANALYZE {', '.join(tables)}")
        cursor.execute(f"ANALYZE {AuditEvent._meta.db_table}")


# --- the raw ceiling ------------------------------------------------------------


@contextmanager
def _raw_clients():
    """A factory of clients, each on its own connection, each running one raw
    step: insert an attempt row and commit, then update its outcome and commit.
    PostgreSQL: Django's own connection parameters and a real table (a
    temporary one is not WAL-logged, so its commits skip the flush a checkpoint
    pays). SQLite: a scratch file beside the database, WAL, synchronous=FULL."""
    name, scratch = f"bench_raw_{uuid.uuid4().hex[:8]}", None
    if connection.vendor == "postgresql":
        mark, id_type = "%s", "bigserial"

        def connect():
            return connection.get_new_connection(connection.get_connection_params())
    else:
        mark, id_type = "?", "integer"
        scratch = Path(connection.settings_dict["NAME"]).with_name(f"{name}.sqlite3")

        def connect():
            raw = sqlite3.connect(scratch, timeout=20, isolation_level="IMMEDIATE", check_same_thread=False)
            raw.execute("PRAGMA journal_mode=WAL")
            raw.execute("PRAGMA synchronous=FULL")
            return raw

    insert = f"INSERT INTO {name} (operation_key, status) VALUES ({mark}, 'REQUESTED') RETURNING id"
    update = f"UPDATE {name} SET status = 'SUCCEEDED', finished_at = CURRENT_TIMESTAMP WHERE id = {mark}"

    def client():
        raw = connect()
        cursor = raw.cursor()

        def step(key):
            cursor.execute(insert, [key])
            ((pk,),) = cursor.fetchall()
            raw.commit()
            cursor.execute(update, [pk])
            raw.commit()

        return step, raw.close

    setup = connect()
    setup.cursor().execute(f"CREATE TABLE {name} (id {id_type} PRIMARY KEY, operation_key text NOT NULL, status text"
                           " NOT NULL, started_at timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP, finished_at timestamp)")
    setup.commit()
    try:
        yield client
    finally:
        setup.cursor().execute(f"DROP TABLE {name}")
        setup.commit()
        setup.close()
        if scratch:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{scratch}{suffix}").unlink(missing_ok=True)


def _raw_rate(client, threads: int, seconds: float) -> float:
    clients = [client() for _ in range(threads)]
    counts, errors = [0] * threads, []
    go, stop = threading.Barrier(threads + 1), threading.Event()

    def loop(number, step):
        go.wait()
        try:
            while not stop.is_set():
                step(f"{number}:{counts[number]}")
                counts[number] += 1
        except Exception as exc:  # reported below, in the measuring thread
            errors.append(exc)

    pool = [threading.Thread(target=loop, args=(n, step)) for n, (step, _) in enumerate(clients)]
    for thread in pool:
        thread.start()
    go.wait()
    began = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for thread in pool:
        thread.join()
    elapsed = time.perf_counter() - began
    for _, close in clients:
        close()
    if errors:
        raise BenchError(f"raw loop failed: {errors[0]!r}")
    return sum(counts) / elapsed


# --- the bench ------------------------------------------------------------------


@contextmanager
def recording_queries():
    """The statements this thread's connection runs (Django's debug log keeps
    at most 9,000 and costs time on every query)."""
    statements: list[str] = []

    def record(execute, sql, params, many, context):
        statements.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        yield statements


@contextmanager
def counting_commits():
    """Count the commits of this thread's connection (an outermost
    transaction.atomic ends in connection.commit())."""
    counter = {"commits": 0}
    commit = connection.commit

    def counted():
        counter["commits"] += 1
        commit()

    connection.commit = counted
    try:
        yield counter
    finally:
        del connection.commit


class Bench:
    def __init__(self, options: Options, log=print):
        self.o, self.log = options, log
        self.workers = options.workers_per_cluster or settings.Q_CLUSTER["workers"]
        self.tag = uuid.uuid4().hex[:8]
        self.workdir = Path(options.workdir)
        # Workers as in production: DEBUG off (no per-query log), so they need the key that signs tasks.
        self.cluster_env = {"DATABASE_URL": options.database_url or database_url(), "DEBUG": "0",
                            "SECRET_KEY": settings.SECRET_KEY, "Q_WORKERS": str(self.workers),
                            "STEP_LEASE_SECONDS": str(options.lease_seconds)}
        self.result: dict = {"errors": {}}

    def run(self) -> dict:
        self.agent, self.reviewer = personas()
        self.result["meta"] = {
            "vendor": connection.vendor, "database": str(connection.settings_dict["NAME"]),
            "started": timezone.now().isoformat(), "cpus": os.cpu_count(), "load_before": os.getloadavg(),
            "workers_per_cluster": self.workers, "lease_seconds": self.o.lease_seconds,
            "autovacuum": _setting("autovacuum"), "broker": settings.Q_BROKER,
            "options": {k: sorted(v) if isinstance(v, frozenset) else v for k, v in vars(self.o).items()
                        if k not in ("database_url", "workdir")},
        }
        parts = [("a", self.raw), ("b", self.throughput), ("c", self.latency), ("d", self.recovery), ("e", self.pages)]
        for letter, measure in parts:
            if letter in self.o.skip:
                self.result[SECTIONS[letter]] = {"skipped": True}
                continue
            self.log(f"({letter}) {SECTIONS[letter]} ...")
            began = time.monotonic()
            try:
                self.result[SECTIONS[letter]] = measure()
            except Exception as exc:  # one part failing must not lose the others' figures
                self.result["errors"][letter] = f"{type(exc).__name__}: {exc}"
                self.log(f"({letter}) failed: {exc}")
            self.log(f"({letter}) done in {time.monotonic() - began:.1f} s")
        if {"b", "f"} & self.o.skip:
            self.result["memory"] = {"skipped": True}
        self.result["meta"]["load_after"] = os.getloadavg()
        self.result["goals"] = goals(self.result)
        return self.result

    # -- helpers -----------------------------------------------------------

    def submit(self, count: int, steps: int, label: str) -> list:
        """PLANNED `noop` plans, submitted as an agent would, 200 per transaction."""
        ids = []
        for first in range(0, count, 200):
            with transaction.atomic():
                for n in range(first, min(count, first + 200)):
                    body = {"name": f"bench {label} {n}", "submission_key": f"bench-{self.tag}-{label}-{n}",
                            "steps": [{"key": f"s{k}", "action": "noop", "args": {"n": k}} for k in range(steps)]}
                    ids.append(plans.submit(self.agent, body).workflow.pk)
        return ids

    def approve_all(self, ids: list) -> None:
        """One transaction: every plan becomes due at the same commit."""
        with transaction.atomic():
            for workflow in Workflow.objects.filter(pk__in=ids):
                approvals.approve(workflow, by=self.reviewer)

    def wait_queue_idle(self, timeout: float = 120.0) -> None:
        """Until no queued task is ready (e.g. the submissions' reviewer notices)."""
        broker = get_broker()
        deadline = time.monotonic() + timeout
        while broker.queue_size():
            if time.monotonic() > deadline:
                raise BenchError(f"the task queue did not empty within {timeout} s")
            time.sleep(0.2)
        time.sleep(0.5)  # the task in hand finishes

    def wait_steps(self, ids: list, total: int, clusters, timeout: float) -> None:
        """Until every step of these plans is COMPLETE. Polls the plans'
        statuses (a tenth of the rows their steps are) once a second, so that
        the bench takes little of the CPU it measures; the rate comes from the
        rows' own timestamps, not from when this loop noticed."""
        workflows = Workflow.objects.filter(pk__in=ids).order_by()
        deadline = time.monotonic() + timeout
        while True:
            counts = dict(workflows.values_list("status").annotate(n=Count("id")))
            if counts.get(WorkflowStatus.COMPLETE, 0) >= len(ids):
                done = Step.objects.filter(workflow_id__in=ids, status=StepStatus.COMPLETE).count()
                if done != total:
                    raise BenchError(f"every plan is COMPLETE but only {done}/{total} of their steps")
                return
            if stopped := {status: counts[status] for status in STOPPED if counts.get(status)}:
                raise BenchError(f"plans stopped instead of completing: {stopped}")
            if dead := [cluster.name for cluster in clusters if not cluster.alive]:
                raise BenchError(f"cluster(s) {dead} exited; see the logs in {self.workdir}")
            if time.monotonic() > deadline:
                raise BenchError(f"plans not COMPLETE after {timeout:.0f} s: {counts}")
            time.sleep(1.0)

    def wait_step(self, workflow_id, timeout: float) -> Step:
        """The (only) step of a one-step plan, once COMPLETE."""
        deadline = time.monotonic() + timeout
        while True:
            step = Step.objects.filter(workflow_id=workflow_id).first()
            if step.status == StepStatus.COMPLETE:
                return step
            if step.status in PARKED:
                raise BenchError(f"step of {workflow_id} went {step.status}")
            if time.monotonic() > deadline:
                raise BenchError(f"step of {workflow_id} still {step.status} after {timeout:.0f} s")
            time.sleep(0.02)

    # -- (a) ---------------------------------------------------------------

    def raw(self) -> dict:
        rates = {}
        with _raw_clients() as client:
            for threads in self.o.raw_clients:
                rates[str(threads)] = round(_raw_rate(client, threads, self.o.raw_seconds), 1)
                self.log(f"    {threads} client(s): {rates[str(threads)]:,.0f} steps/s")
        return {"seconds_per_run": self.o.raw_seconds, "steps_per_s": rates}

    # -- (b) + (f) ---------------------------------------------------------

    def throughput(self) -> dict:
        result = {"protocol": self.protocol_cost(), "runs": []}
        memory = self.result["memory"] = {"runs": []}
        for count in self.o.clusters:
            run, sampled = self.cluster_run(count)
            result["runs"].append(run)
            if sampled:
                try:
                    memory["runs"].append({"clusters": count, "steps": run["steps"], **sampled()})
                except BenchError as exc:  # the throughput still counts
                    self.result["errors"]["f"] = f"{type(exc).__name__}: {exc}"
        return result

    def protocol_cost(self) -> dict:
        """Queries and commits per step of the checkpoint protocol, in this
        process, with no queue and no concurrency: 100 steps one at a time
        (one 10-step plan after another: every batch holds one step), then
        100 steps in shared batches (a drain of 50 two-step plans)."""
        alone = self.submit(10, 10, "protocol-alone")
        self.approve_all(alone)
        shared = self.submit(50, 2, "protocol-shared")
        result = {"alone": self._count(lambda: sum(execution.run_workflow(pk) for pk in alone))}
        self.approve_all(shared)
        result["shared"] = self._count(lambda: execution.run_workflow(shared))
        return result

    def _count(self, run) -> dict:
        # DEBUG off, as in a worker: no query log.
        with override_settings(DEBUG=False), counting_commits() as counter, recording_queries() as queries:
            began = time.perf_counter()
            done = run()
            elapsed = time.perf_counter() - began
        if done != 100:
            raise BenchError(f"in-process run completed {done} of 100 steps")
        return {"steps": done, "queries_per_step": round(len(queries) / done, 2),
                "commits_per_step": round(counter["commits"] / done, 2), "serial_steps_per_s": round(done / elapsed, 1)}

    def cluster_run(self, count: int):
        """The run's figures, and (unless f is skipped) a callable summing up its memory samples."""
        per = self.o.steps_per_workflow
        ids = self.submit(math.ceil(self.o.steps / per), per, f"b{count}")
        total = len(ids) * per
        # Every claim looks past the PENDING steps of plans that are not running (the inbox, failed plans).
        backlog = Step.objects.filter(status=StepStatus.PENDING).exclude(workflow_id__in=ids).count()
        self.log(f"    {count} cluster(s): {len(ids)} plans of {per} steps submitted; "
                 f"{backlog:,} other steps PENDING in the database")
        _vacuum()
        sampler = None
        with Fleet(self.workdir, self.cluster_env) as fleet:
            clusters = [fleet.start(f"b{count}-{n + 1}") for n in range(count)]
            self.wait_queue_idle()
            try:
                began = time.time()
                self.approve_all(ids)
                approved = time.time()
                if "f" not in self.o.skip:  # from the moment the work is due: idle time is not warm-up
                    sampler = RssSampler(clusters)
                    sampler.start()
                self.wait_steps(ids, total, clusters, timeout=max(120.0, total / 20))
            finally:
                if sampler:
                    sampler.stop()
        attempts = Attempt.objects.filter(step__workflow_id__in=ids)
        first = attempts.aggregate(t=Min("started_at"))["t"]
        last = Step.objects.filter(workflow_id__in=ids).aggregate(t=Max("updated_at"))["t"]
        seconds = (last - first).total_seconds()
        run = {"clusters": count, "workers": count * self.workers, "workflows": len(ids), "steps": total,
               "other_pending_steps": backlog,
               "approve_seconds": round(approved - began, 2), "seconds": round(seconds, 2),
               "steps_per_s": round(total / seconds, 1),
               "seconds_from_approval_commit": round(last.timestamp() - approved, 2)}
        if raw := self.result.get("raw", {}).get("steps_per_s"):
            if "4" in raw:
                run["ratio_to_raw_4"] = round(run["steps_per_s"] / raw["4"], 3)
            run["ratio_to_raw_best"] = round(run["steps_per_s"] / max(raw.values()), 3)
        self.log(f"    {count} cluster(s): {run['steps_per_s']:,.0f} steps/s ({total} steps in {seconds:.1f} s)")
        if sampler is None:
            return run, None
        # "<host>:<pid>": every attempt of these plans was made by a worker of these clusters.
        steps_by_pid = {int(worker.rpartition(":")[2]): n for worker, n in
                        attempts.values_list("worker").annotate(n=Count("id"))}
        return run, lambda: sampler.summary(steps_by_pid)

    # -- (c) ---------------------------------------------------------------

    def latency(self) -> dict:
        ids = self.submit(self.o.latency_samples, 1, "c")
        rng = random.Random(1)
        requested, complete, approve_ms = [], [], []
        with Fleet(self.workdir, self.cluster_env) as fleet:
            fleet.start("c-1")
            self.wait_queue_idle()
            for workflow in Workflow.objects.filter(pk__in=ids):
                time.sleep(rng.uniform(0.1, 0.3))  # the workers go idle between samples
                began = time.perf_counter()
                approvals.approve(workflow, by=self.reviewer)
                committed = timezone.now()
                approve_ms.append((time.perf_counter() - began) * 1000)
                step = self.wait_step(workflow.pk, timeout=20)
                attempt = step.attempts.order_by("number").first()
                requested.append((attempt.started_at - committed).total_seconds() * 1000)
                complete.append((step.updated_at - committed).total_seconds() * 1000)
        return {"approval_to_requested_ms": spread(requested), "approval_to_complete_ms": spread(complete),
                "approve_call_ms": spread(approve_ms)}

    # -- (d) ---------------------------------------------------------------

    def recovery(self) -> dict:
        marker = self.workdir / f"failpoint-{self.tag}.marker"
        failing = {"FAILPOINTS": failpoints.AFTER_REQUESTED, "FAILPOINT_MARKER": str(marker)}
        ids = iter(self.submit(2 * self.o.recovery_runs, 1, "d"))
        respawned, restarted = [], []
        with Fleet(self.workdir, self.cluster_env) as fleet:
            fleet.start("d-respawn", **failing)
            self.wait_queue_idle()
            for _ in range(self.o.recovery_runs):
                respawned.append(self.recovered(self.kill_mid_step(next(ids), marker)))
        for n in range(self.o.recovery_runs):
            with Fleet(self.workdir, self.cluster_env) as fleet:
                crashing = fleet.start(f"d-crash-{n + 1}", **failing)
                self.wait_queue_idle()
                killed = self.kill_mid_step(next(ids), marker)
                crashing.kill()
                fleet.start(f"d-fresh-{n + 1}")
                restarted.append(self.recovered(killed))

        def summary(runs):
            seconds = [run["seconds"] for run in runs]
            return {"median_s": round(statistics.median(seconds), 3), "max_s": max(seconds), "runs": runs}

        return {"worker_respawned": summary(respawned), "cluster_restarted": summary(restarted)}

    def kill_mid_step(self, workflow_id, marker: Path) -> tuple:
        """Approve a one-step plan into a worker that dies by SIGKILL right
        after its attempt is REQUESTED: (workflow id, time of death, pid)."""
        marker.unlink(missing_ok=True)  # re-arms the failpoint
        approvals.approve(Workflow.objects.get(pk=workflow_id), by=self.reviewer)
        deadline = time.monotonic() + 30
        while not (marker.exists() and marker.read_text().strip()):
            if time.monotonic() > deadline:
                raise BenchError("the failpoint did not fire within 30 s")
            time.sleep(0.01)
        pid = int(marker.read_text().split()[0])
        if not _dead(pid):
            raise BenchError(f"worker {pid} hit the failpoint but is still alive")
        return workflow_id, marker.stat().st_mtime, pid

    def recovered(self, killed: tuple) -> dict:
        workflow_id, killed_at, pid = killed
        step = self.wait_step(workflow_id, timeout=60)
        return {"seconds": round(step.updated_at.timestamp() - killed_at, 3), "killed_pid": pid,
                "attempts": step.attempts.count()}

    # -- (e) ---------------------------------------------------------------

    def pages(self) -> dict:
        scale = self.seed()
        user = console_user()
        target = (Workflow.objects.filter(status=WorkflowStatus.FAILED).order_by("-created_at").first()
                  or Workflow.objects.order_by("-created_at").first())
        urls = {"inbox": "/", "workflows": "/workflows/", "workflow": f"/workflows/{target.pk}/",
                "dead_letters": "/dead-letters/", "audit": "/audit/"}
        pages = {}
        # As served in production (DEBUG off: no query log), by the test client's host, over plain HTTP;
        # WhiteNoise warns that static files were never collected, which these pages do not need.
        with (override_settings(DEBUG=False, ALLOWED_HOSTS=["testserver"], SECURE_SSL_REDIRECT=False),
              warnings.catch_warnings()):
            warnings.filterwarnings("ignore", "No directory at", UserWarning)
            client = Client()
            client.force_login(user, backend="django.contrib.auth.backends.ModelBackend")
            for name, url in urls.items():
                pages[name] = self.time_page(client, url)
                self.log(f"    {url}: p50 {pages[name]['p50']} ms, p95 {pages[name]['p95']} ms, "
                         f"{pages[name]['queries']} queries")
        return {"scale": scale, "pages": pages}

    def seed(self) -> dict:
        """Seed the shortfall up to --seed-workflows / --seed-events."""
        workflows, events = Workflow.objects.count(), AuditEvent.objects.count()
        add_events = max(0, self.o.seed_events - events)
        add_workflows = max(self.o.seed_workflows - workflows, math.ceil(add_events / 10))
        seeded = None
        if add_workflows or add_events:
            self.log(f"    seeding {add_workflows:,} workflows and {add_events:,} audit events")
            began = time.monotonic()
            call_command("seed_scale", workflows=add_workflows, events=add_events, batch=5000, stdout=StringIO())
            seeded = {"workflows": add_workflows, "events": add_events,
                      "seconds": round(time.monotonic() - began, 1)}
        return {"workflows": Workflow.objects.count(), "audit_events": AuditEvent.objects.count(),
                "dead_letters": DeadLetter.objects.count(), "seeded": seeded}

    def time_page(self, client: Client, url: str) -> dict:
        def get():
            response = client.get(url)
            if response.status_code != 200:
                raise BenchError(f"{url} answered {response.status_code}")

        get()
        with recording_queries() as queries:
            get()
        times = []
        for _ in range(self.o.page_requests):
            began = time.perf_counter()
            get()
            times.append((time.perf_counter() - began) * 1000)
        counting = [sql for sql in queries if "COUNT(" in sql.upper()]
        return {"url": url, "queries": len(queries), "count_queries": counting, **spread(times)}


# --- goals ------------------------------------------------------------------------


def goals(result: dict) -> list[dict]:
    rows = []

    def add(part, goal, value, met):
        rows.append({"part": part, "goal": goal, "value": value, "met": met})

    if runs := result.get("throughput", {}).get("runs"):
        best = max(run["steps_per_s"] for run in runs)
        add("b", ">= 600 durable steps/s", best, best >= 600)
    if "approval_to_requested_ms" in result.get("latency", {}):
        p50 = result["latency"]["approval_to_requested_ms"]["p50"]
        add("c", "approval -> first effect p50 <= 150 ms", p50, p50 <= 150)
    if "worker_respawned" in result.get("recovery", {}):
        worst = result["recovery"]["worker_respawned"]["max_s"]
        add("d", "recovery after SIGKILL mid-step <= 5 s", worst, worst <= 5)
    if pages := result.get("pages", {}).get("pages"):
        worst = max(page["p95"] for page in pages.values())
        scale = result["pages"]["scale"]
        at_scale = scale["workflows"] >= 100_000 and scale["audit_events"] >= 1_000_000
        add("e", "page p95 <= 100 ms at 100k workflows / 1M events", worst,
            worst <= 100 if at_scale else None)
    if runs := result.get("memory", {}).get("runs"):
        growth = max(run["growth_mib_per_10k_steps"] for run in runs)
        # The goal speaks of 100k steps; over a short run the first-use
        # caches still dominate the slope.
        long_enough = min(run["steps"] for run in runs) >= MEMORY_STEPS
        add("f", f"no worker memory growth (<= 1 MiB per 10k steps, over >= {MEMORY_STEPS:,} steps)", growth,
            growth <= 1 if long_enough else None)
    return rows


def run(options: Options, log=print) -> dict:
    return Bench(options, log).run()
