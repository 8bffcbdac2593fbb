"""Chaos soak: many workflows while worker processes die and their database
sessions are cut.

The driver submits and approves three-step ticket plans while, every few
seconds, it picks a cluster at random and does one of:

- `worker`: SIGKILL a django-q worker that holds a step's lease (mid-step);
- `child`: SIGKILL a random child of the cluster's sentinel (a worker, the
  pusher or the monitor, often idle);
- `group`: SIGKILL the cluster's whole process group, then start it again;
- `sessions` (PostgreSQL only): `pg_terminate_backend` on every session the
  cluster holds (recognised by its `application_name`).

The kinds come in seeded, shuffled rounds, so every kind happens once per
round. The driver is also the clusters' supervisor (docs/explanation/architecture.md#the-queue): a cluster
whose main process exited or whose heartbeat went stale is killed as a group
and started again.

After each kill it measures the time to recover: until the steps the killed
processes held are out of their hands (reclaimed, finished or parked) and
progress resumed (one more step COMPLETE than at the kill, or nothing left
to do). At the end every workflow must be settled (terminal, or waiting for
an operator), the desk's ledger must hold each effect at most once, every
effect must follow a REQUESTED attempt of its operation key, no step may
have two SUCCEEDED attempts, and the audit trail must verify.

What it found is a `SoakResult` (`workflows.ops.chaos_results`). Used by
`manage.py chaos` and tests/ops/test_chaos.py.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
import uuid
from collections import Counter
from datetime import datetime

import requests
from django.contrib.auth.models import Group, User
from django.db import connection
from django.db.models import Count

from workflows import roles
from workflows.audit import journal
from workflows.models import Attempt, Step, Workflow
from workflows.operations import plans
from workflows.ops.chaos_load import Reviewers, Storm, preview_and_queue
from workflows.ops.chaos_results import KINDS, Kill, Restart, SoakResult
from workflows.ops.processes import gone, group_pids, owner_pid, sentinel_children, session_name
from workflows.states import AttemptStatus, StepStatus, WorkflowStatus

# Environment of the clusters under chaos. Short task timeouts bound how long
# a wedged cluster takes to withhold its heartbeat (workflows.engine.worker.StallWatch).
# Each worker keeps 64 effects in flight (docs/deploying.md#remote-effects-in-flight);
# webhook deliveries refused while the receiver is down are retried soon.
CLUSTER_ENV = {
    "STEP_LEASE_SECONDS": "2",
    "ACTION_TIMEOUT_SECONDS": "3",
    "Q_TIMEOUT": "6",
    "Q_RETRY": "10",
    "WORKER_CONCURRENCY": "64",
    "WEBHOOK_RETRY_SECONDS": "0.5",
    "WEBHOOK_MAX_ATTEMPTS": "20",
}
SUBMIT_AT_ONCE = 4
IN_FLIGHT = (StepStatus.RUNNING, StepStatus.VERIFYING)
UNFINISHED = (StepStatus.PENDING, StepStatus.RUNNING, StepStatus.VERIFYING, StepStatus.WAITING_RETRY)
# A workflow is settled when no worker will touch it again without a person.
SETTLED = frozenset(WorkflowStatus) - {
    WorkflowStatus.PLANNED,
    WorkflowStatus.APPROVED,
    WorkflowStatus.RUNNING,
    WorkflowStatus.COMPENSATING,
}


def ticket_plan(key: str) -> dict:
    """Open a ticket, comment on it, close it: later steps use $from."""
    ticket = {"$from": "open.result.id"}
    return {
        "name": f"chaos {key}",
        "submission_key": key,
        "steps": [
            {"key": "open", "action": "ticket.create", "args": {"title": f"Chaos {key}", "body": "soak"}},
            {"key": "note", "action": "ticket.comment", "args": {"ticket_id": ticket, "body": "still here"}},
            {"key": "close", "action": "ticket.close", "args": {"ticket_id": ticket}},
        ],
    }


# --- sessions ---------------------------------------------------------------


def terminate_sessions(cluster_name: str) -> list[int]:
    """pg_terminate_backend every session of one chaos cluster on this database."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name = %s",
            [session_name(cluster_name)],
        )
        return [pid for pid, terminated in cursor.fetchall() if terminated]


# --- the soak ---------------------------------------------------------------


def personas() -> tuple[User, list[User]]:
    """An agent that submits and two reviewers that approve (four eyes)."""
    reviewers_group, _ = Group.objects.get_or_create(name=roles.REVIEWERS)
    agent, _ = User.objects.get_or_create(username="chaos-agent")
    reviewers = []
    for name in ("chaos-reviewer", "chaos-reviewer2"):
        reviewer, _ = User.objects.get_or_create(username=name)
        reviewer.groups.add(reviewers_group)
        reviewers.append(reviewer)
    return agent, reviewers


class Soak:
    """One run: workload, faults, supervision and recovery timing in a single
    polling loop, then the verdict. Use `soak()`."""

    def __init__(
        self,
        clusters,
        *,
        desk_url: str,
        workflows: int,
        seconds: float,
        kill_every: float,
        seed: int,
        settle_seconds: float,
        stale_after: float,
        desk_faults,
        kinds,
        log,
        workdir=None,
        storm: bool = False,
        proofs: bool = False,
    ):
        self.clusters = list(clusters)
        self.desk_url = desk_url.rstrip("/")
        self.seconds, self.kill_every, self.settle_seconds = seconds, kill_every, settle_seconds
        self.stale_after = stale_after
        self.desk_faults = list(desk_faults)
        self.rng = random.Random(seed)
        self.log = log
        if set(kinds) - set(KINDS):
            raise ValueError(f"unknown kinds of kill {sorted(set(kinds) - set(KINDS))}; known: {', '.join(KINDS)}")
        # Only PostgreSQL has sessions to terminate.
        self.kinds = [kind for kind in kinds if kind != "sessions" or connection.vendor == "postgresql"]
        self.planned = workflows
        self.tag = f"{seed}-{uuid.uuid4().hex[:8]}"
        self.workflow_ids: list = []
        self.pending: list[Kill] = []
        self.restarting: dict[str, threading.Thread] = {}
        self.proofs = proofs
        self.storm = (
            Storm(self, workdir=workdir, seed=seed, desk_faults=True, archive_run=True, bulk_run=True)
            if storm
            else None
        )
        self.result = SoakResult(
            vendor=connection.vendor,
            workflows=workflows,
            steps=0,
            clusters=len(self.clusters),
            seconds=seconds,
            kill_every=kill_every,
            seed=seed,
            storm=storm,
            proofs_required=proofs,
        )

    def now(self) -> float:
        return time.monotonic() - self.began

    # -- the loop -----------------------------------------------------------

    def run(self) -> SoakResult:
        self.agent, reviewers = personas()
        # Two reviewers approve from their own threads while the driver submits.
        self.reviewers = Reviewers(reviewers, self.rng.randrange(2**32), self.log).start()
        injected = [
            requests.post(f"{self.desk_url}/_faults", json=spec, timeout=10).json() for spec in self.desk_faults
        ]
        try:
            if self.storm:
                self.storm.start(self.agent)
            return self._run()
        finally:
            self.reviewers.stop()
            if self.storm:
                self.storm.finish()
            for fault in injected:
                requests.delete(f"{self.desk_url}/_faults/{fault['id']}", timeout=10)

    def _run(self) -> SoakResult:
        self.began = time.monotonic()
        kinds = self._kind_rounds()
        next_kill = self.kill_every
        while self.now() < self.seconds:
            self._submit_due()
            self._supervise()
            self._observe()
            if self.storm:
                self.storm.tick(self.now())
            if self.now() >= next_kill:
                self._kill(next(kinds))
                next_kill = self.now() + self.kill_every * self.rng.uniform(0.5, 1.5)
            time.sleep(0.05)
        self._submit(self.planned - len(self.workflow_ids))
        if self.storm:
            self.storm.wrap_up(self.now())
        settle_by = time.monotonic() + self.settle_seconds
        while time.monotonic() < settle_by and not (
            self._settled()
            and not self.pending
            and not self.restarting
            and self.reviewers.idle
            and (self.storm is None or self.storm.settled())
        ):
            self._supervise()
            self._observe()
            if self.storm:
                self.storm.settling(self.now())
            time.sleep(0.1)
        for thread in list(self.restarting.values()):
            thread.join()
        self.result.elapsed = self.now()
        self._check()
        return self.result

    def _kind_rounds(self):
        """Every kind once per round, in a seeded random order."""
        while True:
            round_ = list(self.kinds)
            self.rng.shuffle(round_)
            yield from round_

    # -- workload -----------------------------------------------------------

    def _submit_due(self) -> None:
        # Spread the workflows over the first 60% of the soak, so that kills
        # land while work is in flight rather than after it has all finished.
        # A few at a time, so that kills and the storm's turns keep their pace.
        share = min(1.0, 0.15 + self.now() / (0.6 * self.seconds))
        self._submit(min(SUBMIT_AT_ONCE, round(self.planned * share) - len(self.workflow_ids)))

    def submit_one_more(self) -> None:
        """One plan beyond those planned (the storm's, after the window)."""
        self.planned += 1
        self.result.workflows += 1
        self._submit(1)

    def _submit(self, count: int) -> None:
        for _ in range(max(0, count)):
            key = f"chaos-{self.tag}-{len(self.workflow_ids)}"
            workflow = plans.submit(self.agent, ticket_plan(key)).workflow
            self.workflow_ids.append(workflow.pk)
            preview_and_queue(workflow, self.reviewers)

    def _steps(self):
        return Step.objects.filter(workflow_id__in=self.workflow_ids)

    def _completed(self) -> int:
        """Steps COMPLETE so far, counting those an archive run took out of the tables."""
        archived = sum(done.counts.get("steps.jsonl.gz", 0) for done in self.storm.archives) if self.storm else 0
        return self._steps().filter(status=StepStatus.COMPLETE).count() + archived

    def _settled(self) -> bool:
        return (
            len(self.workflow_ids) == self.planned
            and not Workflow.objects.filter(pk__in=self.workflow_ids).exclude(status__in=SETTLED).exists()
        )

    # -- faults -------------------------------------------------------------

    def _kill(self, kind: str) -> None:
        candidates = [c for c in self.clusters if c.name not in self.restarting and c.process is not None]
        if not candidates:
            return
        cluster = self.rng.choice(candidates)
        if kind == "worker":
            busy = self._busy_worker(candidates)
            if busy is None:
                kind = "child"
            else:
                cluster, victim = busy
        pgid = cluster.process.pid
        if kind == "child":
            children = sentinel_children(pgid)
            if not children:
                return
            victim = self.rng.choice(children)
        in_flight = list(self._steps().filter(status__in=IN_FLIGHT).values_list("pk", "lease_owner", "fence"))
        completed = self._completed()
        kill = Kill(
            number=len(self.result.kills) + 1,
            kind=kind,
            cluster=cluster.name,
            at=round(self.now(), 3),
            targets=[],
            proven=False,
            completed_before=completed,
        )
        if kind in ("worker", "child"):
            os.kill(victim, signal.SIGKILL)
            kill.targets, kill.proven = [victim], gone([victim])
            held = {victim}
        elif kind == "group":
            held = group_pids(pgid)
            cluster.kill()
            kill.targets, kill.proven = sorted(held), gone(held)
            self._restart(cluster, "group kill")
        else:
            held = group_pids(pgid)
            kill.targets = terminate_sessions(cluster.name)
            kill.proven = bool(kill.targets)
        kill.orphans = {pk: fence for pk, owner, fence in in_flight if owner_pid(owner) in held}
        self.result.kills.append(kill)
        self.pending.append(kill)
        self.log(
            f"{kill.at:7.2f}s kill #{kill.number} {kind} on {cluster.name}: {kill.targets}"
            f" (orphaned steps {len(kill.orphans)}, proven {kill.proven})"
        )

    def _busy_worker(self, clusters, wait: float = 1.5):
        """(cluster, pid) of a worker that holds a step's lease right now."""
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            owners = {
                owner_pid(owner)
                for owner in self._steps().filter(status=StepStatus.RUNNING).values_list("lease_owner", flat=True)
            }
            busy = [
                (cluster, pid)
                for cluster in clusters
                for pid in sentinel_children(cluster.process.pid)
                if pid in owners
            ]
            if busy:
                return self.rng.choice(busy)
            self._observe()  # keep timing the recoveries under way
            time.sleep(0.02)
        return None

    # -- supervision --------------------------------------------------------

    def _supervise(self) -> None:
        for name, thread in list(self.restarting.items()):
            if not thread.is_alive():
                del self.restarting[name]
        for cluster in self.clusters:
            if cluster.name in self.restarting:
                continue
            if cluster.process is None or cluster.process.poll() is not None:
                self._restart(cluster, "exited")
                continue
            try:
                age = time.time() - cluster.heartbeat_file.stat().st_mtime
            except FileNotFoundError:
                continue
            if age > self.stale_after:
                # Alive but not working, e.g. a worker killed while it held the
                # task queue's lock: only a restart of the whole group helps.
                cluster.kill()
                self._restart(cluster, "stale heartbeat")

    def _restart(self, cluster, reason: str) -> None:
        self.result.restarts.append(Restart(cluster.name, reason, round(self.now(), 3)))
        self.log(f"{self.now():7.2f}s restart {cluster.name} ({reason})")

        def start():
            cluster.kill()
            try:
                cluster.start()
            except Exception as exc:  # the next supervision round tries again
                self.log(f"{self.now():7.2f}s {cluster.name} failed to start: {exc}")

        thread = threading.Thread(target=start, name=f"restart-{cluster.name}", daemon=True)
        self.restarting[cluster.name] = thread
        thread.start()

    # -- recovery -----------------------------------------------------------

    def _observe(self) -> None:
        if not self.pending:
            return
        completed = self._completed()
        idle = (
            not self._steps()
            .filter(status__in=UNFINISHED, workflow__status__in=[WorkflowStatus.APPROVED, WorkflowStatus.RUNNING])
            .exists()
        )
        orphans = set().union(*(kill.orphans for kill in self.pending))
        now_held = {
            pk: (status, fence)
            for pk, status, fence in Step.objects.filter(pk__in=orphans).values_list("pk", "status", "fence")
        }
        for kill in list(self.pending):
            # A step no longer in the tables was finished and archived.
            released = all(
                pk not in now_held or now_held[pk][0] not in IN_FLIGHT or now_held[pk][1] != fence
                for pk, fence in kill.orphans.items()
            )
            if released and (idle or completed > kill.completed_before):
                kill.recovery_seconds = round(self.now() - kill.at, 3)
                self.pending.remove(kill)

    # -- verdict ------------------------------------------------------------

    def _check(self) -> None:
        result = self.result
        # What an archive run moved out of the tables is read back from its files.
        rows = self.storm.archived_rows() if self.storm else {}
        workflows = Workflow.objects.filter(pk__in=self.workflow_ids)
        statuses = Counter(dict(workflows.values_list("status").annotate(n=Count("id"))))
        statuses.update(row["status"] for row in rows.get("workflows.jsonl.gz", []))
        result.workflow_statuses = dict(statuses)
        steps = {
            key: (action, status, ref, str(workflow))
            for key, action, status, ref, workflow in self._steps().values_list(
                "operation_key", "action", "status", "external_ref", "workflow_id"
            )
        }
        for row in rows.get("steps.jsonl.gz", []):
            steps.setdefault(
                row["operation_key"], (row["action"], row["status"], row["external_ref"], row["workflow_id"])
            )
        result.step_statuses = dict(Counter(status for _, status, _, _ in steps.values()))
        result.steps = len(steps)
        result.unsettled = [
            f"{pk} {status}" for pk, status in workflows.exclude(status__in=SETTLED).values_list("pk", "status")
        ]
        attempts = list(
            Attempt.objects.filter(step__workflow_id__in=self.workflow_ids).values_list(
                "operation_key", "number", "status", "started_at", "error"
            )
        )
        attempts += [
            (
                row["operation_key"],
                row["number"],
                row["status"],
                datetime.fromisoformat(row["started_at"]),
                row["error"],
            )
            for row in rows.get("attempts.jsonl.gz", [])
        ]
        self._check_effects(steps, attempts)
        result.repeated_attempts = sum(1 for _, number, _, _, _ in attempts if number > 1)
        successes = Counter(key for key, _, status, _, _ in attempts if status == AttemptStatus.SUCCEEDED)
        result.double_successes = [f"{key}: {n} SUCCEEDED attempts" for key, n in successes.items() if n > 1]
        verdict = journal.verify(streams=[str(pk) for pk in self.workflow_ids])
        streams = verdict.streams + len(rows.get("workflows.jsonl.gz", []))
        result.audit_ok = verdict.ok and streams == len(self.workflow_ids)
        result.audit_events, result.audit_problems = verdict.events, verdict.problems[:50]
        if streams != len(self.workflow_ids):
            result.audit_problems.append(f"{streams} audit streams for {len(self.workflow_ids)} workflows")
        if self.storm:
            self.storm.check(result, rows, SETTLED)
            result.reviewer_approvals = self.reviewers.approvals
            result.reviewer_races = self.reviewers.lost_races
            result.reviewer_errors = list(self.reviewers.errors)

    def _check_effects(self, steps: dict, attempts: list) -> None:
        result = self.result
        ledger = requests.get(f"{self.desk_url}/_ledger", timeout=30).json()
        ours = [entry for entry in ledger if entry["idempotency_key"] in steps]
        result.effects = len(ours)
        result.keyless_effects = sum(1 for entry in ledger if not entry["idempotency_key"])
        per_key = Counter(entry["idempotency_key"] for entry in ours)
        result.duplicates = [f"{key}: {n} effects in the ledger" for key, n in per_key.items() if n > 1]
        first_request: dict[str, datetime] = {}
        for key, _, _, started_at, _ in attempts:
            if key in per_key and (key not in first_request or started_at < first_request[key]):
                first_request[key] = started_at
        for entry in ours:
            at = datetime.fromisoformat(entry["at"])
            first = first_request.get(entry["idempotency_key"])
            if first is None or first >= at:
                result.unrequested.append(
                    f"{entry['method']} {entry['path']} {entry['idempotency_key']} at {at}"
                    f" (first REQUESTED attempt: {first})"
                )
        if self.proofs:
            # The desk verified each proof before it changed anything (a
            # refused one is answered 403 and changes nothing): each entry
            # must name the proof it took, for its own plan.
            for entry in ours:
                proof, workflow = entry["proof"], steps[entry["idempotency_key"]][3]
                result.proofs_verified += bool(proof and proof["approvers"] and proof["wf"] == workflow)
                if not (proof and proof["approvers"] and proof["wf"] == workflow):
                    result.proof_problems.append(f"{entry['idempotency_key']}: ledger entry with proof {proof}")
            result.proof_problems += [
                f"{key} attempt {number}: {error[:200]}"
                for key, number, _, _, error in attempts
                if "approval_proof_invalid" in (error or "") or "approval proof refused" in (error or "")
            ]
        tickets = requests.get(f"{self.desk_url}/tickets", timeout=30).json()
        by_key: dict[str, list[dict]] = {}
        for ticket in tickets:
            by_key.setdefault(ticket["idempotency_key"], []).append(ticket)
        for key, (action, status, ref, _) in steps.items():
            if action != "ticket.create":
                continue
            held = by_key.get(key, [])
            if len(held) > 1 or (status == StepStatus.COMPLETE and len(held) != 1):
                result.ticket_problems.append(f"{key} ({status}): {len(held)} tickets on the desk")
            elif status == StepStatus.COMPLETE and ref != f"ticket:{held[0]['id']}":
                result.ticket_problems.append(f"{key}: step says {ref!r}, desk holds ticket {held[0]['id']}")


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def soak(
    clusters,
    *,
    desk_url: str,
    workflows: int = 12,
    seconds: float = 20.0,
    kill_every: float = 1.5,
    seed: int = 1,
    settle_seconds: float = 60.0,
    stale_after: float = 6.0,
    desk_faults=(),
    kinds=KINDS,
    log=None,
    workdir=None,
    storm: bool = False,
    proofs: bool = False,
) -> SoakResult:
    """Run the soak against started clusters (`processes.Cluster`); the
    caller stops them. `desk_faults` are injected into the desk for the soak (POST /_faults
    specs), e.g. latency, so that more kills land while an effect is in flight."""
    return Soak(
        clusters,
        desk_url=desk_url,
        workflows=workflows,
        seconds=seconds,
        kill_every=kill_every,
        seed=seed,
        settle_seconds=settle_seconds,
        stale_after=stale_after,
        desk_faults=desk_faults,
        kinds=kinds,
        log=log or (lambda line: None),
        workdir=workdir,
        storm=storm,
        proofs=proofs,
    ).run()
