"""(i) Reconcile before replay, in bulk: `--dead-letters` (default 2,000)
one-step `ticket.create` plans run by a real cluster into a desk outage in
which half of the creates land and lose their answer (`commit_then_drop`)
and half are refused (503), one attempt each, so that every one is
dead-lettered. Then a reconciliation job and a replay job of the safe group
(`workflows.operations.bulk`), advanced by the cluster's workers, against a
desk that would open a second ticket for a repeated key
(`ignore_idempotency`): how long each job takes, and whether every
operation key ends up on the desk exactly once.
"""

from __future__ import annotations

import time

import requests
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction
from django.test.utils import override_settings

from workflows import roles
from workflows.engine import policy, previews
from workflows.models import DeadLetter, Job, Step, Workflow
from workflows.operations import approvals, bulk, plans
from workflows.operations.deciding import Seen
from workflows.ops.bench.common import BenchError
from workflows.ops.bench.fleet import Fleet
from workflows.ops.processes import DeskProcess
from workflows.states import WorkflowStatus

OPERATOR = "bench-operator"
ACTION = "ticket.create"


def operator():
    user, _ = get_user_model().objects.get_or_create(username=OPERATOR)
    user.groups.add(Group.objects.get_or_create(name=roles.OPERATORS)[0])
    return user


def fault(desk: DeskProcess, **spec) -> None:
    requests.post(f"{desk.url}/_faults", json=spec, timeout=5).raise_for_status()


class BulkPart:
    """Part (i), run by the Bench with its personas and options."""

    def __init__(self, bench):
        self.bench, self.o = bench, bench.o

    def run(self) -> dict:
        count, by = self.o.dead_letters, operator()
        landed, lost = count // 2, count - count // 2
        before = policy.policy_for(ACTION).max_attempts
        desk = DeskProcess(self.bench.workdir / f"desk-bulk-{self.bench.tag}.sqlite3")
        desk.start()
        env = {**self.bench.cluster_env, "TICKET_DESK_URL": desk.url}
        try:
            policy.update(ACTION, by=by, reason="bench (i): one attempt, to dead-letter the outage", max_attempts=1)
            if landed:
                fault(desk, mode="commit_then_drop", count=landed)
            fault(desk, mode="error", status=503, count=lost)
            ids = self.submit(count, desk.url)
            with Fleet(self.bench.workdir, env) as fleet:
                fleet.start("i-1")
                began = time.monotonic()
                self.wait(
                    lambda: Workflow.objects.filter(pk__in=ids, status=WorkflowStatus.FAILED).count() == count,
                    timeout=max(120.0, count / 5),
                    what="the outage's dead letters",
                )
                outage_s = time.monotonic() - began
                chosen = {
                    "ids": list(DeadLetter.objects.open().filter(workflow_id__in=ids).values_list("pk", flat=True))
                }
                began = time.monotonic()
                job, _ = bulk.reconcile(by, chosen, shown_filter={"bench": "i"}, dry_run=False)
                reconciled = self.finish(job, count)
                reconcile_s = time.monotonic() - began
                policy.update(ACTION, by=by, reason="bench (i): the desk is back", max_attempts=before)
                fault(desk, mode="ignore_idempotency")
                began = time.monotonic()
                replay, _ = bulk.replay(
                    by,
                    {"job": job.pk},
                    shown_filter={"job": str(job.pk)},
                    only="safe",
                    reason="bench (i): the desk is back",
                )
                replayed = self.finish(replay, count)
                replay_s = time.monotonic() - began
                self.wait(
                    lambda: Workflow.objects.filter(pk__in=ids, status=WorkflowStatus.COMPLETE).count() == count,
                    timeout=max(120.0, count / 5),
                    what="the replayed plans",
                )
                complete_s = time.monotonic() - began
        finally:
            if policy.policy_for(ACTION).max_attempts != before:
                policy.update(ACTION, by=by, reason="bench (i): put back", max_attempts=before)
            tickets = requests.get(f"{desk.url}/tickets", timeout=60).json() if desk.process else []
            desk.stop()
        keys = [ticket["idempotency_key"] for ticket in tickets]
        expected = set(Step.objects.filter(workflow_id__in=ids).values_list("operation_key", flat=True))
        once = len(keys) == len(set(keys)) and set(keys) == expected
        self.bench.log(
            f"    {count:,} dead letters: reconciled in {reconcile_s:.1f} s "
            f"({reconciled['applied']:,} applied, {reconciled['safe']:,} safe), safe group replayed in "
            f"{replay_s:.1f} s and complete after {complete_s:.1f} s; each key once: {once}"
        )
        return {
            "dead_letters": count,
            "landed": landed,
            "outage_s": round(outage_s, 2),
            "reconcile": {"seconds": round(reconcile_s, 2), "per_s": round(count / reconcile_s, 1), **reconciled},
            "replay": {"seconds": round(replay_s, 2), "complete_after_s": round(complete_s, 2), **replayed},
            "tickets": len(keys),
            "each_key_once": once,
        }

    def submit(self, count: int, desk_url: str) -> list:
        ids = []
        for first in range(0, count, 200):
            with transaction.atomic():
                for n in range(first, min(count, first + 200)):
                    workflow = plans.submit(
                        self.bench.agent,
                        {
                            "name": f"bench bulk {n}",
                            "submission_key": f"bench-{self.bench.tag}-bulk-{n}",
                            "steps": [{"key": "open", "action": ACTION, "args": {"title": f"outage {n}"}}],
                        },
                    ).workflow
                    # What the reviewer approves: the request to the desk the fleet calls (no remote read).
                    with override_settings(TICKET_DESK_URL=desk_url):
                        previews.compute(workflow.pk)
                    approvals.approve(workflow, by=self.bench.reviewer, seen=Seen.current(workflow))
                    ids.append(workflow.pk)
        return ids

    def finish(self, job: Job, count: int) -> dict:
        self.wait(
            lambda: Job.objects.filter(pk=job.pk, status=Job.Status.DONE).exists(),
            timeout=max(120.0, count / 5),
            what=f"the {job.kind} job",
        )
        return bulk.counts(job)

    @staticmethod
    def wait(done, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise BenchError(f"{what} did not finish within {timeout:.0f} s")
            time.sleep(0.2)
