"""The Bench: one run of the parts (a) to (q) in turn, (f) sampled during
(b), each part's figures recorded under its section of the result, each
part's failure under `errors` (see workflows.ops.bench)."""

from __future__ import annotations

import math
import os
import random
import statistics
import time
import uuid
import warnings
from io import StringIO
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.db import connection, transaction
from django.db.models import Count, Max, Min
from django.test import Client
from django.test.utils import override_settings
from django.utils import timezone

from workflows import queue
from workflows.audit import keys, signing
from workflows.engine import execution, failpoints
from workflows.models import Attempt, AuditEvent, DeadLetter, Step, Workflow
from workflows.operations import approvals, plans
from workflows.operations.deciding import Seen
from workflows.ops.bench.analytics import AnalyticsPart
from workflows.ops.bench.archiving import ArchivePart
from workflows.ops.bench.bulk import BulkPart
from workflows.ops.bench.chat import ChatPart
from workflows.ops.bench.client_path import ClientPathPart
from workflows.ops.bench.common import (
    SECTIONS,
    BenchError,
    Options,
    auto_approving_agent,
    console_user,
    goals,
    host_cpu,
    personas,
    stolen_percent,
)
from workflows.ops.bench.cost import StepCost
from workflows.ops.bench.counting import counting_commits, recording_queries
from workflows.ops.bench.fleet import Fleet, approval_body, spread
from workflows.ops.bench.lanes import LanesPart
from workflows.ops.bench.memory import RssSampler
from workflows.ops.bench.policies import PoliciesPart
from workflows.ops.bench.raw import raw_clients, raw_rate
from workflows.ops.bench.remote import RemotePart
from workflows.ops.bench.slack_clicks import SlackClicksPart
from workflows.ops.bench.soak import SoakPart
from workflows.ops.bench.waiters import WaitersPart
from workflows.ops.processes import database_url, gone
from workflows.states import StepStatus, WorkflowStatus

PARKED = (StepStatus.DEAD_LETTERED, StepStatus.IN_DOUBT, StepStatus.BLOCKED)
# A plan with a parked step stops in one of these.
STOPPED = (WorkflowStatus.FAILED, WorkflowStatus.NEEDS_ATTENTION)


def _setting(name: str) -> str | None:
    """A PostgreSQL server setting (e.g. autovacuum: when off, statistics go stale and dead rows pile up)."""
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute(f"SHOW {name}")
        return cursor.fetchone()[0]


# --- the bench ------------------------------------------------------------------


class Bench:
    def __init__(self, options: Options, log=print):
        self.o, self.log = options, log
        self.workers = options.workers_per_cluster or settings.Q_CLUSTER["workers"]
        self.tag = uuid.uuid4().hex[:8]
        self.workdir = Path(options.workdir)
        # Workers as in production: DEBUG off (no per-query log), so they need the key that signs tasks,
        # and the audit and checkpoint keys of this process (under DEBUG, the generated ones: made now).
        signing.keyset()
        self.cluster_env = {
            "DATABASE_URL": options.database_url or database_url(),
            "DEBUG": "0",
            "SECRET_KEY": settings.SECRET_KEY,
            "Q_WORKERS": str(self.workers),
            "STEP_LEASE_SECONDS": str(options.lease_seconds),
            "AUDIT_KEYS": keys.as_setting(),
            "SIGNING_KEYS_FILE": str(signing.keys_path()),
        }
        self.result: dict = {"errors": {}}

    def run(self) -> dict:
        self.agent, self.reviewer = personas()
        self.result["meta"] = {
            "vendor": connection.vendor,
            "database": str(connection.settings_dict["NAME"]),
            "started": timezone.now().isoformat(),
            "cpus": os.cpu_count(),
            "load_before": os.getloadavg(),
            "workers_per_cluster": self.workers,
            "lease_seconds": self.o.lease_seconds,
            "autovacuum": _setting("autovacuum"),
            "broker": settings.Q_BROKER,
            "host_cpu_before": host_cpu(),
            "options": {
                k: sorted(v) if isinstance(v, frozenset) else v
                for k, v in vars(self.o).items()
                if k not in ("database_url", "workdir")
            },
        }
        parts = [
            ("a", self.raw),
            ("b", self.throughput),
            ("c", self.latency),
            ("d", self.recovery),
            ("e", self.pages),
            ("g", self.remote),
            ("h", self.waiters),
            ("i", self.bulk),
            ("j", self.archive),
            ("k", self.lanes),
            ("l", self.analytics),
            ("m", self.chat),
            ("n", self.slack_clicks),
            ("o", self.policies),
            ("p", self.auto_burst),
            ("q", lambda: SoakPart(self).run()),
            ("r", self.client_path),
        ]
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
        self.result["meta"]["cpu_stolen_percent"] = stolen_percent(
            self.result["meta"].pop("host_cpu_before"), host_cpu()
        )
        self.result["goals"] = goals(self.result)
        return self.result

    # -- helpers -----------------------------------------------------------

    def submit(self, count: int, steps: int, label: str, agent=None) -> list:
        """PLANNED `noop` plans, submitted as an agent would (`agent`: another
        than the bench's), 200 per transaction."""
        ids = []
        for first in range(0, count, 200):
            with transaction.atomic():
                for n in range(first, min(count, first + 200)):
                    body = {
                        "name": f"bench {label} {n}",
                        "submission_key": f"bench-{self.tag}-{label}-{n}",
                        "steps": [{"key": f"s{k}", "action": "noop", "args": {"n": k}} for k in range(steps)],
                    }
                    ids.append(plans.submit(agent or self.agent, body).workflow.pk)
        return ids

    def approve_all(self, ids: list) -> None:
        """One transaction: every plan becomes due at the same commit."""
        with transaction.atomic():
            for workflow in Workflow.objects.filter(pk__in=ids):
                approvals.approve(workflow, by=self.reviewer, seen=Seen.current(workflow))

    def wait_queue_idle(self, stalled_after: float = 60.0) -> None:
        """Until no queued task is ready: the submissions' reviewer notices,
        and wake-ups a burst of approvals left behind once its work was done
        (a task that finds nothing due). However long the queue, it must keep
        draining: no progress for `stalled_after` seconds is an error."""
        lanes = queue.brokers().values()
        left, progress_at = sum(broker.queue_size() for broker in lanes), time.monotonic()
        while left:
            time.sleep(0.5)
            now_left = sum(broker.queue_size() for broker in lanes)
            if now_left < left:
                progress_at = time.monotonic()
            elif time.monotonic() - progress_at > stalled_after:
                raise BenchError(f"the task queue stopped draining: {now_left} task(s) left")
            left = now_left
        time.sleep(0.5)  # the task in hand finishes

    def wait_steps(self, ids: list, total: int, clusters, timeout: float) -> None:
        """Until every step of these plans is COMPLETE. Once a second, counts
        these plans not yet COMPLETE by status, naming the shorter list in
        the query: these plans, or the other unfinished ones (read once, the
        inbox a seeded history leaves), left out of every unfinished plan.
        The bench then takes little of the CPU it measures, where a poll
        naming a burst's 20,000 plans took a tenth of a core. The rate comes
        from the rows' own timestamps, not from when this loop noticed."""
        unfinished = Workflow.objects.exclude(status=WorkflowStatus.COMPLETE).order_by()
        others = list(unfinished.exclude(pk__in=ids).values_list("pk", flat=True))
        unfinished = unfinished.exclude(pk__in=others) if len(others) < len(ids) else unfinished.filter(pk__in=ids)
        deadline = time.monotonic() + timeout
        while True:
            counts = dict(unfinished.values_list("status").annotate(n=Count("id")))
            if not counts:
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
        with raw_clients() as client:
            for threads in self.o.raw_clients:
                rates[str(threads)] = round(raw_rate(client, threads, self.o.raw_seconds), 1)
                self.log(f"    {threads} client(s): {rates[str(threads)]:,.0f} steps/s")
        return {"seconds_per_run": self.o.raw_seconds, "steps_per_s": rates}

    # -- (b) + (f) ---------------------------------------------------------

    def throughput(self) -> dict:
        # Recorded as they come: a run that fails keeps the figures of those before it.
        result = self.result["throughput"] = {"protocol": self.protocol_cost(), "runs": []}
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
        return {
            "steps": done,
            "queries_per_step": round(len(queries) / done, 2),
            "commits_per_step": round(counter["commits"] / done, 2),
            "serial_steps_per_s": round(done / elapsed, 1),
        }

    def cluster_run(self, count: int, auto: bool = False):
        """The run's figures, and (unless f is skipped) a callable summing up
        its memory samples. `auto`: the plans are submitted by an agent
        whose team's policy set approves them at submission (`auto_burst`),
        in place of the reviewer's approvals."""
        per = self.o.steps_per_workflow
        submitted = time.time()
        agent = auto_approving_agent() if auto else None
        ids = self.submit(math.ceil(self.o.steps / per), per, f"{'o' if auto else 'b'}{count}", agent=agent)
        submit_seconds = time.time() - submitted
        total = len(ids) * per
        # Every claim looks past the PENDING steps of plans that are not running (the inbox, failed plans).
        backlog = Step.objects.filter(status=StepStatus.PENDING).exclude(workflow_id__in=ids).count()
        self.log(
            f"    {count} cluster(s): {len(ids)} plans of {per} steps submitted; "
            f"{backlog:,} other steps PENDING in the database"
        )
        # As a user's burst arrives: each plan approved on its own (its own
        # transaction and wake-up) while no worker runs; the statistics left
        # as they are (no ANALYZE: autovacuum may be off or behind).
        began = time.time()
        if auto:
            unapproved = Workflow.objects.filter(pk__in=ids).exclude(status=WorkflowStatus.APPROVED).count()
            if unapproved:
                raise BenchError(f"{unapproved} plan(s) were not approved by policy at submission")
        else:
            for workflow in Workflow.objects.filter(pk__in=ids):
                approvals.approve(workflow, by=self.reviewer, seen=Seen.current(workflow))
        approved = time.time()
        sampler = None
        with StepCost() as cost, Fleet(self.workdir, self.cluster_env) as fleet:
            started = time.time()
            clusters = [cost.watch(fleet.start(f"b{count}-{n + 1}")) for n in range(count)]
            try:
                if "f" not in self.o.skip and not auto:
                    sampler = RssSampler(clusters)
                    sampler.start()
                self.wait_steps(ids, total, clusters, timeout=max(120.0, total / 20))
            finally:
                if sampler:
                    sampler.stop()
            self.wait_queue_idle()  # the burst's leftover wake-ups, so that the next run starts idle
            cost.finish()
        attempts = Attempt.objects.filter(step__workflow_id__in=ids)
        first = attempts.aggregate(t=Min("started_at"))["t"]
        last = Step.objects.filter(workflow_id__in=ids).aggregate(t=Max("updated_at"))["t"]
        seconds = (last - first).total_seconds()
        run = {
            "clusters": count,
            "workers": count * self.workers,
            "workflows": len(ids),
            "steps": total,
            "other_pending_steps": backlog,
            "approve_seconds": round(approved - began, 2),
            "submit_seconds": round(submit_seconds, 2),
            "seconds": round(seconds, 2),
            "steps_per_s": round(total / seconds, 1),
            "first_effect_after_start_s": round(first.timestamp() - started, 2),
            "seconds_from_start": round(last.timestamp() - started, 2),
            "cost_per_step": cost.per_step(total),
            **by_tenth(Step.objects.filter(workflow_id__in=ids).values_list("updated_at", flat=True), first),
        }
        if raw := self.result.get("raw", {}).get("steps_per_s"):
            if "4" in raw:
                run["ratio_to_raw_4"] = round(run["steps_per_s"] / raw["4"], 3)
            run["ratio_to_raw_best"] = round(run["steps_per_s"] / max(raw.values()), 3)
        self.log(f"    {count} cluster(s): {run['steps_per_s']:,.0f} steps/s ({total} steps in {seconds:.1f} s)")
        if sampler is None:
            return run, None
        # "<host>:<pid>": every attempt of these plans was made by a worker of these clusters.
        steps_by_pid = {
            int(worker.rpartition(":")[2]): n for worker, n in attempts.values_list("worker").annotate(n=Count("id"))
        }
        return run, lambda: sampler.summary(steps_by_pid)

    # -- (c) ---------------------------------------------------------------

    def latency(self) -> dict:
        """Approval to the attempt's REQUESTED and to COMPLETE, for one-step `noop` plans approved through the
        API (the view, with a reviewer's token) against a real cluster of this run's broker; the clock starts
        when the approval's answer arrives, after its commit (the view then reads the plan again: on a busy
        host the worker may write REQUESTED first, a figure below zero)."""
        from workflows.operations import tokens

        ids = self.submit(self.o.latency_samples, 1, "c")
        reviewer = Client(HTTP_AUTHORIZATION=f"Bearer {tokens.issue(self.reviewer)}")
        rng = random.Random(1)
        requested, complete, approve_ms = [], [], []
        with (
            Fleet(self.workdir, self.cluster_env) as fleet,
            override_settings(ALLOWED_HOSTS=["testserver"], SECURE_SSL_REDIRECT=False),
        ):
            fleet.start("c-1")
            self.wait_queue_idle()
            for workflow_id in ids:
                time.sleep(rng.uniform(0.1, 0.3))  # the workers go idle between samples
                # What the reviewer read before deciding: the approval names it (not timed).
                body = approval_body(workflow_id)
                began = time.perf_counter()
                response = reviewer.post(
                    f"/api/v1/workflows/{workflow_id}/approve", body, content_type="application/json"
                )
                answered = timezone.now()
                if response.status_code != 200:
                    raise BenchError(f"approve answered {response.status_code}: {response.content[:200]!r}")
                approve_ms.append((time.perf_counter() - began) * 1000)
                step = self.wait_step(workflow_id, timeout=20)
                attempt = step.attempts.order_by("number").first()
                requested.append((attempt.started_at - answered).total_seconds() * 1000)
                complete.append((step.updated_at - answered).total_seconds() * 1000)
        return {
            "broker": settings.Q_BROKER,
            "listen": "broker_class" in settings.Q_CLUSTER,
            "approval_to_requested_ms": spread(requested),
            "approval_to_complete_ms": spread(complete),
            "approve_call_ms": spread(approve_ms),
        }

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
        approvals.approve(workflow_id, by=self.reviewer, seen=Seen.current(workflow_id))
        deadline = time.monotonic() + 30
        while not (marker.exists() and marker.read_text().strip()):
            if time.monotonic() > deadline:
                raise BenchError("the failpoint did not fire within 30 s")
            time.sleep(0.01)
        pid = int(marker.read_text().split()[0])
        if not gone([pid]):
            raise BenchError(f"worker {pid} hit the failpoint but is still alive")
        return workflow_id, marker.stat().st_mtime, pid

    def recovered(self, killed: tuple) -> dict:
        workflow_id, killed_at, pid = killed
        step = self.wait_step(workflow_id, timeout=60)
        return {
            "seconds": round(step.updated_at.timestamp() - killed_at, 3),
            "killed_pid": pid,
            "attempts": step.attempts.count(),
        }

    # -- (g) ---------------------------------------------------------------

    def remote(self) -> dict:
        return RemotePart(self).run()

    # -- (j) ---------------------------------------------------------------

    def archive(self) -> dict:
        return ArchivePart(self).run()

    # -- (k) ---------------------------------------------------------------

    def lanes(self) -> dict:
        return LanesPart(self).run()

    # -- (h) ---------------------------------------------------------------

    def waiters(self) -> dict:
        return WaitersPart(self).run()

    def auto_burst(self) -> dict:
        """(b)'s burst on one cluster, its plans approved by policy at
        submission: no reviewer's approval, the same steps, the same ratio
        to the raw ceiling; beside (b)'s run on as many clusters when it ran."""
        count = self.o.clusters[0]
        run, _ = self.cluster_run(count, auto=True)
        human = next((r for r in self.result.get("throughput", {}).get("runs", []) if r["clusters"] == count), None)
        if human:
            run["ratio_to_human_burst"] = round(run["steps_per_s"] / human["steps_per_s"], 3)
        return {"runs": [run]}

    def analytics(self) -> dict:
        return AnalyticsPart(self).run()

    # -- (i) ---------------------------------------------------------------

    def bulk(self) -> dict:
        return BulkPart(self).run()

    def chat(self) -> dict:
        return ChatPart(self).run()

    def slack_clicks(self) -> dict:
        return SlackClicksPart(self).run()

    def policies(self) -> dict:
        return PoliciesPart(self).run()

    def client_path(self) -> dict:
        return ClientPathPart(self).run()

    # -- (e) ---------------------------------------------------------------

    def pages(self) -> dict:
        scale = self.seed()
        user = console_user()
        target = (
            Workflow.objects.filter(status=WorkflowStatus.FAILED).order_by("-created_at").first()
            or Workflow.objects.order_by("-created_at").first()
        )
        urls = {
            "inbox": "/",
            "workflows": "/workflows/",
            "workflow": f"/workflows/{target.pk}/",
            "dead_letters": "/dead-letters/",
            "audit": "/audit/",
        }
        pages = {}
        # As served in production (DEBUG off: no query log), by the test client's host, over plain HTTP;
        # WhiteNoise warns that static files were never collected, which these pages do not need.
        with (
            override_settings(DEBUG=False, ALLOWED_HOSTS=["testserver"], SECURE_SSL_REDIRECT=False),
            warnings.catch_warnings(),
        ):
            warnings.filterwarnings("ignore", "No directory at", UserWarning)
            client = Client()
            client.force_login(user, backend="workflows.web.auth.LocalPasswords")
            for name, url in urls.items():
                pages[name] = self.time_page(client, url)
                self.log(
                    f"    {url}: p50 {pages[name]['p50']} ms, p95 {pages[name]['p95']} ms, "
                    f"{pages[name]['queries']} queries"
                )
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
            seeded = {"workflows": add_workflows, "events": add_events, "seconds": round(time.monotonic() - began, 1)}
        return {
            "workflows": Workflow.objects.count(),
            "audit_events": AuditEvent.objects.count(),
            "dead_letters": DeadLetter.objects.count(),
            "seeded": seeded,
        }

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


def by_tenth(finished, began) -> dict:
    """A burst's rate over each tenth of its steps, in the order they
    finished (`finished`: their COMPLETE times; `began`: its first
    attempt's), and the last tenth's rate against the first's: a burst that
    fades as dead rows pile up shows it here, whatever its mean."""
    times = sorted(finished)
    if len(times) < 10:
        return {}
    bounds = [began] + [times[round(len(times) * k / 10) - 1] for k in range(1, 11)]
    rates = []
    for k in range(10):
        steps = round(len(times) * (k + 1) / 10) - round(len(times) * k / 10)
        seconds = (bounds[k + 1] - bounds[k]).total_seconds()
        rates.append(round(steps / seconds, 1) if seconds > 0 else None)
    fade = round(rates[-1] / rates[0], 3) if rates[0] and rates[-1] else None
    return {"steps_per_s_by_tenth": rates, "last_tenth_to_first": fade}


def run(options: Options, log=print) -> dict:
    return Bench(options, log).run()
