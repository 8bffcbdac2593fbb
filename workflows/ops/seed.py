"""Bulk history for measuring the console at scale (`manage.py seed_scale`).

    python manage.py seed_scale --workflows 100000 --events 1000000 [--batch 5000]

Writes finished-looking history in bulk (COPY on PostgreSQL, bulk_create on
SQLite), one transaction per batch of workflows: a fixed mix of statuses
(PLANNED for the inbox, COMPLETE, FAILED with an open dead letter and its
trace, REJECTED), three `noop` steps per workflow with their attempts and
approvals, and audit events forming a valid hash chain per workflow stream
(HMAC-SHA256 under the current audit key, as `journal.append` would, heads
set to match), so `verify_audit` passes. Each stream gets a share of `--events` in proportion to its natural
length: shorter trails are cut, longer ones padded with reviewer reminders.

Nothing seeded is due, so workers never run it (though their claim queries
still look past the PENDING steps of seeded PLANNED, REJECTED and FAILED
plans). Runs add up: every run uses fresh submission keys.
"""

import time
import uuid
from datetime import timedelta

from django.db import connection, transaction
from django.db.models import JSONField
from django.utils import timezone
from psycopg.types.json import Jsonb

from workflows import teams
from workflows.audit import journal, keys
from workflows.db import canonical_json, sha256_hex
from workflows.engine import binding
from workflows.models import (
    Approval,
    Attempt,
    AuditEvent,
    AuditHead,
    DeadLetter,
    Step,
    Trace,
    Workflow,
    operation_key_for,
)
from workflows.operations.plans import canonical_plan
from workflows.ops.bench.common import AGENT, REVIEWER, personas
from workflows.states import AttemptStatus, FailureClass, StepStatus, WorkflowStatus

WORKER = "worker"
STEPS = 3
# One slot per workflow, repeating: 10% await review, 10% failed, 5% rejected, 75% complete.
MIX = (
    [WorkflowStatus.PLANNED] * 2
    + [WorkflowStatus.FAILED] * 2
    + [WorkflowStatus.REJECTED]
    + [WorkflowStatus.COMPLETE] * 15
)
FAILURES = [
    FailureClass.INVALID_ARGUMENTS,
    FailureClass.TRANSIENT,
    FailureClass.TIMEOUT,
    FailureClass.PERMISSION_DENIED,
]
NATURAL = {
    WorkflowStatus.PLANNED: 2,
    WorkflowStatus.REJECTED: 3,
    WorkflowStatus.FAILED: 4 + 5 + 6,
    WorkflowStatus.COMPLETE: 4 + 5 * STEPS + 1,
}
SPAN = timedelta(days=30)
INSERT_BATCH = 2000
SEEDED = (Workflow, Step, Attempt, Trace, DeadLetter, Approval, AuditEvent, AuditHead)
PLAN = canonical_plan([{"key": f"s{k}", "action": "noop", "args": {"n": k}} for k in range(STEPS)])
PLAN_HASH = sha256_hex(canonical_json(PLAN))


class Seeder:
    def __init__(self, workflows: int, events: int, batch: int, log):
        self.total, self.events, self.batch, self.log = workflows, events, batch, log
        self.tag = uuid.uuid4().hex[:8]
        cycle = [NATURAL[status] for status in MIX]
        self.prefix = [sum(cycle[:n]) for n in range(len(MIX) + 1)]
        self.natural_total = self._natural_before(workflows)
        self.now = timezone.now()
        self.start = self.now - SPAN - timedelta(minutes=1)
        self.counts: dict[str, int] = {}

    def _natural_before(self, n: int) -> int:
        full, rest = divmod(n, len(MIX))
        return full * self.prefix[-1] + self.prefix[rest]

    def quota(self, n: int) -> int:
        """Events of the n-th workflow: cumulative rounding, so the total is exact."""
        if not self.natural_total:
            return 0

        def upto(k):
            return round(self.events * self._natural_before(k) / self.natural_total)

        return upto(n + 1) - upto(n)

    def run(self) -> dict[str, int]:
        self.agent, self.reviewer = personas()
        self.team = teams.default_team()  # looked up once, not once per seeded plan
        began = time.monotonic()
        for first in range(0, self.total, self.batch):
            with transaction.atomic():
                self._batch(first, min(self.batch, self.total - first))
            done = min(first + self.batch, self.total)
            rows = sum(self.counts.values())
            elapsed = time.monotonic() - began
            self.log(
                f"{done:,}/{self.total:,} workflows, {rows:,} rows in {elapsed:.1f} s ({rows / elapsed:,.0f} rows/s)"
            )
        # Fresh statistics, as after any bulk load: planned on stale ones, the console's
        # queries scan every open dead letter or pending step (autovacuum may be off, or late).
        analyzing = time.monotonic()
        with connection.cursor() as cursor:
            for model in SEEDED:
                cursor.execute(f"ANALYZE {connection.ops.quote_name(model._meta.db_table)}")
        self.log(f"analyzed in {time.monotonic() - analyzing:.1f} s")
        return self.counts

    def _add(self, model, objects: list) -> list:
        if connection.vendor == "postgresql":
            _copy(model, objects)
        else:
            model.objects.bulk_create(objects, batch_size=INSERT_BATCH)
        self.counts[model._meta.model_name] = self.counts.get(model._meta.model_name, 0) + len(objects)
        return objects

    def _batch(self, first: int, count: int) -> None:
        spacing = SPAN / max(self.total, 1)
        workflows = []
        for n in range(first, first + count):
            status = MIX[n % len(MIX)]
            created = self.start + spacing * n
            workflows.append(
                Workflow(
                    id=uuid.uuid4(),
                    name=f"seeded {n}",
                    submitted_by=self.agent,
                    team=self.team,
                    submission_key=f"seed-{self.tag}-{n}",
                    submission_hash=sha256_hex(f"seed-{self.tag}-{n}"),
                    plan=PLAN,
                    plan_hash=PLAN_HASH,
                    status=status,
                    # A plan still awaiting review must not expire while it is measured.
                    deadline=self.now + SPAN if status == WorkflowStatus.PLANNED else created + timedelta(days=1),
                    created_at=created,
                    updated_at=created + timedelta(seconds=NATURAL[status]),
                )
            )
        self._add(Workflow, workflows)
        steps = self._add(Step, [step for wf in workflows for step in self._steps(wf)])
        by_workflow = {wf.pk: steps[i * STEPS : (i + 1) * STEPS] for i, wf in enumerate(workflows)}
        attempts = self._add(
            Attempt,
            [
                Attempt(
                    step=step,
                    number=1,
                    operation_key=step.operation_key,
                    fence=1,
                    worker="seed:0",
                    status=AttemptStatus.SUCCEEDED if step.status == StepStatus.COMPLETE else AttemptStatus.FAILED,
                    failure_class=step.failure_class,
                    error="seeded failure" if step.failure_class else "",
                    started_at=step.updated_at - timedelta(seconds=1),
                    finished_at=step.updated_at,
                )
                for step in steps
                if step.status in (StepStatus.COMPLETE, StepStatus.DEAD_LETTERED)
            ],
        )
        attempt_of = {attempt.step_id: attempt for attempt in attempts}
        parked = [step for step in steps if step.status == StepStatus.DEAD_LETTERED]
        traces = self._add(
            Trace,
            [
                Trace(
                    step=step,
                    attempt=attempt_of[step.pk],
                    failure_class=step.failure_class,
                    error="seeded failure",
                    request={"action": step.action, "operation_key": step.operation_key, "arg_names": ["n"]},
                    timings={"duration_ms": 1000},
                    created_at=step.updated_at,
                )
                for step in parked
            ],
        )
        dead_letters = self._add(
            DeadLetter,
            [
                DeadLetter(
                    workflow_id=step.workflow_id,
                    step=step,
                    action=step.action,
                    step_key=step.key,
                    failure_class=step.failure_class,
                    attempt_count=1,
                    trace=trace,
                    created_at=step.updated_at,
                )
                for step, trace in zip(parked, traces)
            ],
        )
        parked_by_workflow = {dl.workflow_id: dl for dl in dead_letters}
        self._add(
            Approval,
            [
                binding.seal(
                    Approval(
                        workflow=wf,
                        reviewer=self.reviewer,
                        plan_hash=PLAN_HASH,
                        decision=Approval.Decision.REJECT
                        if wf.status == WorkflowStatus.REJECTED
                        else Approval.Decision.APPROVE,
                        created_at=wf.created_at + timedelta(seconds=2),
                    )
                )
                for wf in workflows
                if wf.status != WorkflowStatus.PLANNED
            ],
        )
        events, heads = [], []
        for n, wf in enumerate(workflows, start=first):
            trail = self._trail(wf, by_workflow[wf.pk], attempt_of, parked_by_workflow.get(wf.pk))
            chain = self._chain(wf, trail, self.quota(n))
            events += chain
            if chain:
                heads.append(AuditHead(stream=str(wf.pk), seq=chain[-1].seq, hash=chain[-1].hash))
        self._add(AuditEvent, events)
        self._add(AuditHead, heads)

    def _steps(self, wf: Workflow) -> list[Step]:
        """COMPLETE: every step done. FAILED: the first done, the second dead-lettered,
        the third never reached. PLANNED and REJECTED: nothing ran."""
        done = {WorkflowStatus.COMPLETE: STEPS, WorkflowStatus.FAILED: 1}.get(wf.status, 0)
        steps = []
        for k, spec in enumerate(PLAN):
            status = StepStatus.COMPLETE if k < done else StepStatus.PENDING
            failure = ""
            if wf.status == WorkflowStatus.FAILED and k == done:
                status, failure = StepStatus.DEAD_LETTERED, FAILURES[wf.pk.int % len(FAILURES)]
            ran = status != StepStatus.PENDING
            steps.append(
                Step(
                    workflow=wf,
                    position=k,
                    key=spec["key"],
                    action=spec["action"],
                    args=spec["args"],
                    status=status,
                    operation_key=operation_key_for(wf.pk, spec["key"]),
                    result=dict(spec["args"]) if status == StepStatus.COMPLETE else None,
                    failure_class=failure,
                    fence=int(ran),
                    lease_owner="seed:0" if ran else "",
                    updated_at=wf.created_at + timedelta(seconds=5 + 5 * k if ran else 0),
                )
            )
        return steps

    def _trail(self, wf: Workflow, steps, attempt_of, dead_letter) -> list[tuple]:
        """(actor, verb, object type, object id, data) as the engine would have written them."""
        W = ("workflow", wf.pk)
        trail = [
            (
                AGENT,
                "workflow.submitted",
                *W,
                {"name": wf.name, "plan_hash": PLAN_HASH, "steps": STEPS, "to": WorkflowStatus.PLANNED},
            ),
            ("system", "reviewers.notified", *W, {"emails": 0, "webhook": False}),
        ]
        if wf.status == WorkflowStatus.REJECTED:
            trail.append((REVIEWER, "workflow.rejected", *W, {"from": "PLANNED", "to": "REJECTED", "comment": ""}))
        if wf.status not in (WorkflowStatus.COMPLETE, WorkflowStatus.FAILED):
            return trail
        trail += [
            (
                REVIEWER,
                "workflow.approved",
                *W,
                {
                    "from": "PLANNED",
                    "to": "APPROVED",
                    "comment": "",
                    "plan_hash": PLAN_HASH,
                    "approvals": 1,
                    "required": 1,
                },
            ),
            (WORKER, "workflow.started", *W, {"from": "APPROVED", "to": "RUNNING"}),
        ]
        for step in steps:
            if step.status == StepStatus.PENDING:
                break
            S, A = ("step", step.pk), ("attempt", attempt_of[step.pk].pk)
            trail += [
                (WORKER, "step.claimed", *S, {"from": "PENDING", "to": "RUNNING", "worker": "seed:0", "fence": 1}),
                (
                    WORKER,
                    "attempt.requested",
                    *A,
                    {"step": step.key, "number": 1, "fence": 1, "operation_key": step.operation_key},
                ),
            ]
            if step.status == StepStatus.COMPLETE:
                trail += [
                    (WORKER, "attempt.succeeded", *A, {"from": "REQUESTED", "to": "SUCCEEDED", "external_ref": ""}),
                    (
                        WORKER,
                        "step.verifying",
                        *S,
                        {"from": "RUNNING", "to": "VERIFYING", "external_ref": "", "attempt": 1},
                    ),
                    (WORKER, "step.complete", *S, {"from": "VERIFYING", "to": "COMPLETE"}),
                ]
            else:
                failure = step.failure_class
                trail += [
                    (WORKER, "attempt.failed", *A, {"from": "REQUESTED", "to": "FAILED", "failure_class": failure}),
                    (
                        WORKER,
                        "step.dead_lettered",
                        *S,
                        {"from": "RUNNING", "to": "DEAD_LETTERED", "failure_class": failure, "attempts": 1},
                    ),
                    (
                        WORKER,
                        "dead_letter.created",
                        "dead_letter",
                        dead_letter.pk,
                        {"step": step.key, "failure_class": failure, "attempts": 1, "trace": str(dead_letter.trace_id)},
                    ),
                    (
                        WORKER,
                        "workflow.failed",
                        *W,
                        {"from": "RUNNING", "to": "FAILED", "reason": f"step {step.key} dead-lettered"},
                    ),
                ]
        if wf.status == WorkflowStatus.COMPLETE:
            trail.append((WORKER, "workflow.complete", *W, {"from": "RUNNING", "to": "COMPLETE"}))
        return trail

    def _chain(self, wf: Workflow, trail: list[tuple], length: int) -> list[AuditEvent]:
        reminders = [
            ("system", "reviewers.notified", "workflow", wf.pk, {"emails": 0, "webhook": False, "reminder": r + 1})
            for r in range(max(0, length - len(trail)))
        ]
        chain, prev, stream, key = [], journal.GENESIS, str(wf.pk), keys.current()
        for seq, (actor, verb, obj_type, obj_id, data) in enumerate((trail + reminders)[:length], start=1):
            fields = {
                "stream": stream,
                "seq": seq,
                "at": wf.created_at + timedelta(seconds=seq),
                "actor": actor,
                "verb": verb,
                "object_type": obj_type,
                "object_id": str(obj_id),
                "workflow_id": wf.pk,
                "data": data,
            }
            digest = journal.event_hash(prev, key=key, **fields)
            chain.append(
                AuditEvent(prev_hash=prev, hash=digest, hash_alg=AuditEvent.HMAC_SHA256, key_id=key.kid, **fields)
            )
            prev = digest
        return chain


def _copy(model, objects: list) -> None:
    """COPY the rows: several times faster than Django's INSERT on PostgreSQL.
    Ids of identity columns are first taken from the table's own sequence,
    so that later rows can refer to them and concurrent writers never clash."""
    if not objects:
        return
    meta, quote = model._meta, connection.ops.quote_name
    with connection.cursor() as cursor:
        if objects[0].pk is None:
            cursor.execute(
                "SELECT nextval(pg_get_serial_sequence(%s, %s)) FROM generate_series(1, %s)",
                [meta.db_table, meta.pk.column, len(objects)],
            )
            for obj, (pk,) in zip(objects, cursor.fetchall()):
                obj.pk = pk
        fields = meta.concrete_fields
        columns = ", ".join(quote(field.column) for field in fields)
        with cursor.copy(f"COPY {quote(meta.db_table)} ({columns}) FROM STDIN") as copy:
            for obj in objects:
                copy.write_row([_cell(obj, field) for field in fields])


def _cell(obj, field):
    value = getattr(obj, field.attname)
    return Jsonb(value) if value is not None and isinstance(field, JSONField) else value
