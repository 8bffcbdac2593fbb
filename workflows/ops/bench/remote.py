"""(g) Remote steps per second: `ticket.create` steps run by real clusters
against a real ticket desk process with its latency fault at each of
`--remote-latency-ms`, beside, in the same run and against the same desk,
the ceilings an engine is judged by:

    thread pool  a plain pool of WORKER_CONCURRENCY threads per worker of the
                 clusters (as many effects in flight as the engine may hold),
                 each with a keep-alive session, making the same POST /tickets
                 with the same kind of Idempotency-Key (`<uuid>:<step key>`):
                 the physical ceiling of this host for these calls, measured
                 right before the engine's run and again right after it, the
                 engine judged against the mean of the two (on a shared host
                 that ceiling drifts within minutes);
    desk         the same pool at twice the threads: the desk's own ceiling,
                 reported so that a slow desk is never mistaken for a slow
                 engine (when it is no higher, the pool was the limit).

Each run has two phases. The rate: plans of five steps, submitted and
approved one at a time through the operations (a user's burst) before the
clusters start, then run; steps per second from the first attempt to the
last step's completion. The wait a user sees: with the clusters still
running and idle, one-step plans approved one at a time at half the rate
just measured; a step's approval-to-effect time runs from the call that
approves it (its commit included) to its attempt's `started_at` (the
REQUESTED commit, just before the call). On PostgreSQL the rate phase also
reports what the database wrote per remote step (every session: the
workers, their loops, the queue): transactions that wrote, and kilobytes of
write-ahead log (`counting.database_counters`). Every step must have
taken effect exactly once, by the desk's ledger; an attempt a busy host
timed out, and the engine settled by lookup or tried again with the same
key, is counted in the run's `attempts`, not taken for a failed run.
"""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import requests
from django.conf import settings
from django.db.models import Count, F, Max, Min
from django.test.utils import override_settings

from workflows.engine import previews
from workflows.models import Attempt, Step, Workflow, operation_key_for
from workflows.operations import approvals, plans
from workflows.operations.deciding import Seen
from workflows.ops.bench.common import BenchError, host_cpu, stolen_percent
from workflows.ops.bench.cost import StepCost
from workflows.ops.bench.counting import database_counters, per_unit
from workflows.ops.bench.fleet import Fleet, spread
from workflows.ops.bench.memory import RssSampler
from workflows.ops.processes import DeskProcess
from workflows.states import AttemptStatus

STEPS_PER_PLAN = 5
# One-step plans approved one at a time to time approval -> effect.
PACED_PLANS = 40
DEFAULT_CONCURRENCY = 64  # WORKER_CONCURRENCY's default (docs/explanation/concurrency.md#effects-in-flight)


def concurrency() -> int:
    return int(getattr(settings, "WORKER_CONCURRENCY", DEFAULT_CONCURRENCY))


def set_latency(desk: DeskProcess, ms: int) -> list[dict]:
    """Clear the desk's faults and inject this latency; the faults it then holds, as it reports them."""
    requests.delete(f"{desk.url}/_faults", timeout=5).raise_for_status()
    if ms:
        requests.post(f"{desk.url}/_faults", json={"mode": "latency", "ms": ms}, timeout=5).raise_for_status()
    answer = requests.get(f"{desk.url}/_faults", timeout=5)
    answer.raise_for_status()
    return answer.json()


def pool_rate(url: str, threads: int, calls: int) -> dict:
    """`calls` POST /tickets from `threads` threads, each call with a fresh
    operation key: calls per second from the first call to the last answer."""
    keys = iter(range(calls))
    lock = threading.Lock()
    run = uuid.uuid4()
    errors: list[str] = []

    def worker() -> int:
        session, done = requests.Session(), 0
        while True:
            with lock:
                n = next(keys, None)
            if n is None:
                return done
            key = operation_key_for(run, f"s{n}")
            try:
                response = session.post(
                    f"{url}/tickets",
                    json={"title": f"pool {n}", "body": "ceiling"},
                    headers={"Idempotency-Key": key},
                    timeout=30,
                )
                if response.status_code != 201:
                    errors.append(f"{response.status_code}")
            except requests.RequestException as exc:
                errors.append(type(exc).__name__)
            done += 1

    began = time.perf_counter()
    with ThreadPoolExecutor(threads, thread_name_prefix="bench-pool") as pool:
        done = sum(pool.map(lambda _: worker(), range(threads)))
    seconds = time.perf_counter() - began
    if errors:
        raise BenchError(f"the thread pool saw {len(errors)} failed call(s) of {calls}, e.g. {errors[:3]}")
    return {"threads": threads, "calls": done, "seconds": round(seconds, 2), "calls_per_s": round(done / seconds, 1)}


def ceilings(desk: DeskProcess, threads: int, calls: int) -> dict:
    pool = pool_rate(desk.url, threads, calls)
    doubled = pool_rate(desk.url, threads * 2, calls)
    return {"thread_pool": pool, "desk": doubled, "desk_above_pool": doubled["calls_per_s"] > pool["calls_per_s"] * 1.1}


class RemotePart:
    """Part (g), run by the Bench with its personas, fleet and options."""

    def __init__(self, bench):
        self.bench, self.o = bench, bench.o

    def run(self) -> dict:
        result = self.bench.result["remote"] = {"concurrency_per_worker": concurrency(), "runs": []}
        desk = DeskProcess(self.bench.workdir / f"desk-{self.bench.tag}.sqlite3")
        desk.start()
        try:
            for latency in self.o.remote_latency_ms:
                faults = set_latency(desk, latency)
                for count in self.o.clusters:
                    began = host_cpu()
                    threads = concurrency() * self.bench.workers * count
                    # A few calls per thread, so that starting the threads is not what is measured.
                    calls = min(threads * 4, max(self.o.remote_steps, threads))
                    limits = ceilings(desk, threads, calls)
                    self.bench.log(
                        f"    {latency} ms, {count} cluster(s): thread pool of {threads} "
                        f"{limits['thread_pool']['calls_per_s']:,.0f} calls/s, desk at "
                        f"{2 * threads} {limits['desk']['calls_per_s']:,.0f}"
                    )
                    run = {
                        "latency_ms": latency,
                        "clusters": count,
                        "desk_faults": faults,
                        "ceilings": limits,
                        **self.engine_run(desk, latency, count),
                    }
                    # A shared host's speed drifts within minutes (its neighbours, the hypervisor's steal):
                    # the pool runs again right after the engine, which is judged against the mean of the two.
                    limits["thread_pool_after"] = pool_rate(desk.url, threads, calls)
                    pool = limits["thread_pool_mean_calls_per_s"] = round(
                        (limits["thread_pool"]["calls_per_s"] + limits["thread_pool_after"]["calls_per_s"]) / 2, 1
                    )
                    # Ceilings and engine alike: a shared host's ceiling falls when its neighbours are busy.
                    run["cpu_stolen_percent"] = stolen_percent(began, host_cpu())
                    run["ratio_to_thread_pool"] = round(run["steps_per_s"] / pool, 3)
                    run["ratio_to_best_ceiling"] = round(
                        run["steps_per_s"] / max(pool, limits["desk"]["calls_per_s"]), 3
                    )
                    self.bench.log(
                        f"    {latency} ms, {count} cluster(s): {run['steps_per_s']:,.1f} remote steps/s "
                        f"({run['ratio_to_thread_pool']} x thread pool; "
                        f"{limits['thread_pool_after']['calls_per_s']:,.0f} calls/s after), "
                        f"approval -> effect p50 {run['approval_to_effect_ms']['p50']:,.0f} ms"
                    )
                    result["runs"].append(run)
        finally:
            desk.stop()
        return result

    def submit(self, count: int, label: str, steps: int = STEPS_PER_PLAN) -> list:
        body = lambda n: {  # noqa: E731
            "name": f"bench {label} {n}",
            "submission_key": f"bench-{self.bench.tag}-{label}-{n}",
            "steps": [
                {"key": f"s{k}", "action": "ticket.create", "args": {"title": f"{label} {n}.{k}", "body": "b"}}
                for k in range(steps)
            ],
        }
        return [plans.submit(self.bench.agent, body(n)).workflow.pk for n in range(count)]

    def engine_run(self, desk: DeskProcess, latency: int, count: int) -> dict:
        label = f"g{latency}-{count}"
        ids = self.submit(max(1, -(-self.o.remote_steps // STEPS_PER_PLAN)), label)
        for workflow in Workflow.objects.filter(pk__in=ids):
            # No worker runs yet: the previews a reviewer approves are taken here (no remote read),
            # of the requests to the desk the fleet will call.
            with override_settings(TICKET_DESK_URL=desk.url):
                previews.compute(workflow.pk)
            approvals.approve(workflow, by=self.bench.reviewer, seen=Seen.current(workflow))
        paced = self.submit(min(PACED_PLANS, self.o.remote_steps), f"{label}-paced", steps=1)
        total = len(ids) * STEPS_PER_PLAN
        env = {**self.bench.cluster_env, "TICKET_DESK_URL": desk.url}
        sampler = None
        counted = database_counters()
        with StepCost() as cost, Fleet(self.bench.workdir, env) as fleet:
            clusters = [cost.watch(fleet.start(f"{label}-{n + 1}")) for n in range(count)]
            try:
                sampler = RssSampler(clusters, others={"desk": desk.process.pid})
                sampler.start()
                self.bench.wait_steps(ids, total, clusters, timeout=max(120.0, total / 2))
                database = per_unit(counted, database_counters(), total)
                attempts = Attempt.objects.filter(step__workflow_id__in=ids)
                first = attempts.aggregate(t=Min("started_at"))["t"]
                last = Step.objects.filter(workflow_id__in=ids).aggregate(t=Max("updated_at"))["t"]
                seconds = (last - first).total_seconds()
                self.bench.wait_queue_idle()
                cost.finish()  # the rate phase's cost; the paced phase is not in it
                approved_at = {}
                interval = 2 / (total / seconds)
                for workflow in Workflow.objects.filter(pk__in=paced):
                    with override_settings(TICKET_DESK_URL=desk.url):
                        previews.compute(workflow.pk)  # the fleet took them already, unless it is behind
                    began = time.monotonic()
                    approved_at[workflow.pk] = time.time()
                    approvals.approve(workflow, by=self.bench.reviewer, seen=Seen.current(workflow))
                    time.sleep(max(0.0, interval - (time.monotonic() - began)))
                self.bench.wait_steps(paced, len(paced), clusters, timeout=120.0)
            finally:
                if sampler:
                    sampler.stop()
        # A busy host may time an answer out: the engine then settles that
        # attempt by lookup (or tries again with the same key), as it should.
        # That is counted, not a failure; an attempt left open is one, and the
        # desk's ledger below shows each step took effect exactly once.
        by_status = dict(attempts.order_by().values_list("status").annotate(n=Count("id")))
        if unsettled := sum(by_status.get(status, 0) for status in (AttemptStatus.REQUESTED, AttemptStatus.UNKNOWN)):
            raise BenchError(f"{unsettled} of {sum(by_status.values())} attempts for {total} steps left unsettled")
        effect_ms = [
            (started.timestamp() - approved_at[workflow]) * 1000
            for workflow, started in Attempt.objects.filter(step__workflow_id__in=paced).values_list(
                "step__workflow_id", "started_at"
            )
        ]
        steps_by_pid = {
            int(worker.rpartition(":")[2]): n for worker, n in attempts.values_list("worker").annotate(n=Count("id"))
        }
        cpu = sampler.cpu_per_step(
            steps_by_pid, [at.timestamp() for at in attempts.values_list("started_at", flat=True)]
        )
        keys = set(Attempt.objects.filter(step__workflow_id__in=ids + paced).values_list(F("operation_key"), flat=True))
        ledger = [
            row
            for row in requests.get(f"{desk.url}/_ledger", timeout=30).json()
            if row["idempotency_key"] in keys and row["status"] == 201
        ]
        if len(ledger) != total + len(paced):
            raise BenchError(f"the desk created {len(ledger)} tickets for {total + len(paced)} steps")
        return {
            "workflows": len(ids),
            "steps": total,
            "seconds": round(seconds, 2),
            "steps_per_s": round(total / seconds, 1),
            "approval_to_effect_ms": spread(effect_ms, 0),
            "paced_per_s": round(1 / interval, 1),
            "memory": sampler.summary(steps_by_pid),
            "database_per_step": database,
            "cost_per_step": cost.per_step(total),
            "cpu_ms_per_step": cpu,
            "attempts": {"total": sum(by_status.values()), "by_status": by_status},
        }
