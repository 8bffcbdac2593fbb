"""The checkpoint protocol for one step (DESIGN §6).

    claim (lease + fence) ─► recheck policy ─► attempt REQUESTED committed
      ─► perform(args, operation_key) ─► outcome committed (step VERIFYING)
      ─► verify ─► step COMPLETE committed ─► next step

Every function here re-reads the database and does only what is due, so a
task delivered twice, late, or after a crash is harmless. Nothing is ever
performed without a committed REQUESTED attempt, and an outcome is recorded
only while the step still carries the fencing number of the claim.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from datetime import datetime, timedelta

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import Exists, F, OuterRef, Q, Subquery
from django.utils import timezone

from workflows import actions, audit, compensation, deadletters, failpoints, policy, retry
from workflows.actions import ActionError, Outcome
from workflows.models import Attempt, Step, Workflow
from workflows.redaction import redact, redact_text
from workflows.states import (
    RETRYABLE_CLASSES,
    AttemptStatus,
    FailureClass,
    StepStatus,
    WorkflowStatus,
)
from workflows.transitions import move, move_many

log = logging.getLogger(__name__)

WORKER = "worker"


def _local_prefix() -> str:
    """This host and PID namespace: hosts (or containers) that share a
    hostname must never judge each other's processes by pid."""
    try:
        boot = open("/proc/sys/kernel/random/boot_id").read().strip()[:8]
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        boot, namespace = "noboot", 0
    return f"{socket.gethostname()}/{boot}/{namespace}"


LOCAL_PREFIX = _local_prefix()


def worker_id() -> str:
    return f"{LOCAL_PREFIX}:{os.getpid()}"


class LeaseLost(Exception):
    """Another worker took the step over; this one must not record anything."""


class LeaseKeeper:
    """Extends the claims' leases while their worker is busy (a heartbeat), so
    recovery does not take over a step whose worker is alive and waiting.
    Extends a lease only while the step still carries that claim's fencing
    number."""

    def __init__(self, step_id: int | None = None, fence: int | None = None, *, claims=()):
        self.claims = list(claims) or [(step_id, fence)]
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._beat, name=f"lease-{self.claims[0][0]}", daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc_info):
        self.stopped.set()
        self.thread.join()

    def _beat(self) -> None:
        lease = settings.STEP_LEASE_SECONDS
        held = Q()
        for step_id, fence in self.claims:
            held |= Q(pk=step_id, fence=fence)
        try:
            while not self.stopped.wait(lease / 3):
                try:
                    Step.objects.filter(held, status__in=[StepStatus.RUNNING, StepStatus.VERIFYING]).update(
                        lease_expires_at=timezone.now() + timedelta(seconds=lease)
                    )
                except DatabaseError:
                    # A dropped session or a busy SQLite must not end the
                    # heartbeat: reconnect and extend on the next beat.
                    log.warning("lease heartbeat for step(s) %s failed; retrying",
                                [step_id for step_id, _ in self.claims])
                    connection.close()
        finally:
            connection.close()


# --- claiming ---------------------------------------------------------------


READY_ORDER = ("next_attempt_at", "position", "id")


def _due_steps(workflow_id=None, window: int | None = None):
    """Due steps (of one workflow, or a list of them), first due first. With
    `window`, only among the first `window` ready steps, read off the ready
    index in order by a statement of its own: a claim's cost does not grow
    with the number of ready steps. (As a subquery, the planner may rescan
    the window once per candidate row when its statistics lag, which made a
    claim cost O(ready²).) The step's own conditions are applied again to
    the window, so a row claimed meanwhile (and re-read under its lock) no
    longer matches."""
    ready = Step.objects.due()
    if isinstance(workflow_id, (list, tuple, set)):
        ready = ready.filter(workflow_id__in=list(workflow_id))
    elif workflow_id is not None:
        ready = ready.filter(workflow_id=workflow_id)
    steps = ready
    if window is not None:
        steps = ready.filter(pk__in=list(ready.order_by(*READY_ORDER).values_list("pk", flat=True)[:window]))
    earlier_unfinished = Step.objects.filter(
        workflow=OuterRef("workflow"), lane=OuterRef("lane"), position__lt=OuterRef("position")
    ).exclude(status=StepStatus.COMPLETE)
    steps = steps.filter(~Exists(earlier_unfinished))
    # Within a window, any order will do (it holds the first due steps), and
    # none lets the query stop at its limit instead of checking all of them.
    return steps.order_by() if window is not None else steps.order_by(*READY_ORDER)


CLAIM_BATCH = 64
# Steps that run alone (anything that calls out) are taken a few at a time,
# so that a short burst of them is spread over the workers.
ALONE_BATCH = 8


def claim(workflow_id=None) -> Step | None:
    """Take the lease on one due step, for `execute`; None when nothing is due."""
    steps = claim_batch(1, workflow_id, share=False)
    return steps[0] if steps else None


def claim_batch(limit: int = CLAIM_BATCH, workflow_id=None, share: bool = True) -> list[Step]:
    """Take leases on up to `limit` due steps in one transaction (one commit
    for the lot), of which at most ALONE_BATCH run alone. On PostgreSQL, rows another worker is claiming are skipped,
    not waited for; each claim is still fenced.

    With `share`, a step that can share its checkpoints (`_shares_checkpoints`) has its
    policy rechecked and its REQUESTED attempt written in this same
    transaction, under the claim's row lock: it comes back with `attempt`
    set. Every other step comes back with `attempt` None and goes through
    `execute`, which rechecks and requests on its own."""
    lease = timedelta(seconds=settings.STEP_LEASE_SECONDS)
    unsettled = Attempt.objects.filter(step=OuterRef("pk"), status__in=[AttemptStatus.REQUESTED, AttemptStatus.UNKNOWN])
    latest = Attempt.objects.filter(step=OuterRef("pk")).order_by("-number").values("number")[:1]
    with transaction.atomic():
        if connection.vendor == "postgresql":
            # Walk the ready index in order and stop at the window: a bitmap
            # scan would read every ready row first, and the planner picks
            # one when its statistics lag behind (autovacuum behind or off).
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL enable_bitmapscan = off")
        candidates = _due_steps(workflow_id, window=limit * 4).annotate(
            open_attempts=Exists(unsettled), attempts_made=Subquery(latest))
        if connection.features.has_select_for_update_skip_locked:
            candidates = candidates.select_for_update(skip_locked=True, of=("self",))
        found = list(candidates.select_related("workflow")[:limit])
        # Keep every step that shares its commits and a few that run alone;
        # the rest stay due (their row locks go with this commit).
        alone = [step for step in found if not (share and _shares_checkpoints(step))][:ALONE_BATCH]
        claimed = [step for step in found if (share and _shares_checkpoints(step)) or step in alone]
        if not claimed:
            return []
        # The rows are locked (or, on SQLite, the database is) since they
        # were read as due: nothing can have changed them in between.
        owner = worker_id()
        expires = timezone.now() + lease
        log: list[audit.Entry] = []
        for status in (StepStatus.PENDING, StepStatus.WAITING_RETRY):
            move_many(
                [step for step in claimed if step.status == status],
                StepStatus.RUNNING,
                actor=WORKER,
                verb="step.claimed",
                locked=True,
                log=log,
                each=lambda step: {"fence": step.fence + 1},
                data=lambda step: {"worker": owner, "fence": step.fence},
                lease_owner=owner,
                lease_expires_at=expires,
                next_attempt_at=None,
            )
        starting = {step.workflow_id: step.workflow for step in claimed
                    if step.workflow.status == WorkflowStatus.APPROVED}
        started = {workflow.pk for workflow in move_many(
            list(starting.values()), WorkflowStatus.RUNNING, actor=WORKER, verb="workflow.started", log=log)}
        for step in claimed:
            step.attempt = None
            if step.workflow_id in started:
                step.workflow.status = WorkflowStatus.RUNNING
        if share:
            _request_shared([step for step in claimed if _shares_checkpoints(step)], log)
        audit.append_many(log)
    return claimed


def _shares_checkpoints(step: Step) -> bool:
    """Steps of an idempotent in-process action with nothing to reconcile
    share their checkpoint commits with the rest of their batch."""
    action = _action_or_none(step)
    return (action is not None and action.in_process and action.idempotent and not step.lane
            and not step.open_attempts)


def _request_shared(steps: list[Step], log: list) -> None:
    """Inside the claim's transaction: recheck policy, then write the
    REQUESTED attempt (the checkpoint before the effect) of each step that
    passes. A step that fails the recheck keeps no attempt; `execute` blocks it."""
    if not steps:
        return
    checks = policy.evaluate_many(steps)
    ready = [step for step in steps if not policy.problems(checks[step.pk])]
    versions = {name: p.version for name, p in policy.policies_for({step.action for step in ready}).items()}
    attempts = [
        Attempt(step=step, number=(step.attempts_made or 0) + 1, operation_key=step.operation_key,
                fence=step.fence, worker=step.lease_owner, lease_expires_at=step.lease_expires_at,
                policy_version=versions[step.action])
        for step in ready
    ]
    Attempt.objects.bulk_create(attempts)
    for attempt in attempts:
        attempt.step.attempt = attempt
        log.append(audit.Entry(WORKER, "attempt.requested", "attempt", attempt.pk, attempt.step.workflow_id,
                               {"step": attempt.step.key, "number": attempt.number,
                                "operation_key": attempt.operation_key, "fence": attempt.fence}))


# --- running ----------------------------------------------------------------


def run_workflow(workflow_id) -> int:
    """Run every due step of one workflow (or a list of them), in order, in
    shared batches where steps allow. Returns steps executed."""
    done = 0
    while batch := claim_batch(workflow_id=workflow_id):
        run_batch(batch)
        done += len(batch)
    return done


def drain(budget_seconds: float | None = None) -> int:
    """Run due steps of any workflow until none is due or the budget is spent."""
    budget = budget_seconds if budget_seconds is not None else settings.Q_CLUSTER["timeout"] / 2
    stop_at = time.monotonic() + budget
    done = finish_verifying()
    while time.monotonic() < stop_at and (batch := claim_batch()):
        run_batch(batch)
        done += len(batch)
    return done


def run_batch(steps: list[Step]) -> None:
    """Carry claimed steps through the checkpoint protocol: those that came
    with a REQUESTED attempt together (`_run_shared`), every other step on
    its own (`execute`). One heartbeat keeps every lease of the batch alive."""
    shared = [step for step in steps if step.attempt is not None]
    with LeaseKeeper(claims=[(step.pk, step.fence) for step in steps]):
        if shared:
            _run_shared(shared)
        for step in steps:
            if step.attempt is None:
                execute(step)


def _scope(step: Step) -> str:
    return "compensation" if step.lane else ("replay" if step.retry_base else "")


def _hit_each(point: str, steps) -> None:
    if failpoints.enabled():
        for step in steps:
            failpoints.hit(point, scope=_scope(step))


def _run_shared(steps: list[Step]) -> None:
    """The checkpoint protocol for several steps at once, each with its own
    attempt, operation key, fence and audit events. Their claims and
    REQUESTED attempts committed together (so `after_claim` and
    `after_requested` are one point here); then every perform(), then the
    outcomes in one commit, then verification, then COMPLETE in one commit.
    A crash anywhere leaves each step where a crash of `execute` at that
    checkpoint would, and recovery treats it the same way."""
    _hit_each(failpoints.AFTER_CLAIM, steps)
    _hit_each(failpoints.AFTER_REQUESTED, steps)
    outcomes, failures = {}, {}
    for step in steps:
        try:
            outcomes[step.pk] = _perform(step, actions.get(step.action))
        except ActionError as err:
            failures[step.pk] = err
    performed = [step for step in steps if step.pk in outcomes]
    _hit_each(failpoints.AFTER_PERFORM, performed)
    recorded = _record_outcomes(performed, outcomes)
    for step in steps:
        if step.pk in failures:
            try:
                _record_failure(step, step.attempt, actions.get(step.action), failures[step.pk], step.fence,
                                policy.policy_for(step.action).max_attempts)
            except LeaseLost:
                log.warning("lease on step %s was taken over; dropping this worker's result", step.pk)
    _hit_each(failpoints.AFTER_RECORD, recorded)
    verdicts = {step.pk: actions.get(step.action).verify(Outcome(result=step.result or {},
                                                                 external_ref=step.external_ref))
                for step in recorded}
    _hit_each(failpoints.AFTER_VERIFY, recorded)
    _complete([step for step in recorded if verdicts[step.pk]])
    for step in recorded:
        if not verdicts[step.pk]:
            try:
                _settle(step, False, step.fence)
            except LeaseLost:
                log.warning("lease on step %s was taken over; dropping this worker's result", step.pk)


def _held(steps: list[Step], status: str) -> list[Step]:
    """Inside a transaction: lock the steps and keep those this worker's
    claims still own (the bulk form of `_assert_lease`)."""
    by_pk = {step.pk: step for step in steps}
    current = Step.objects.select_for_update().filter(pk__in=by_pk).order_by("pk").values_list("pk", "status", "fence")
    owned = {pk for pk, row_status, fence in current if (row_status, fence) == (status, by_pk[pk].fence)}
    for step in steps:
        if step.pk not in owned:
            log.warning("lease on step %s was taken over; dropping this worker's result", step.pk)
    return [step for step in steps if step.pk in owned]


def _record_outcomes(steps: list[Step], outcomes: dict[int, Outcome]) -> list[Step]:
    """The outcomes of several performed steps, in one commit: each attempt
    SUCCEEDED and its step VERIFYING, while the claim still holds."""
    if not steps:
        return []
    with transaction.atomic():
        held = _held(steps, StepStatus.RUNNING)
        log: list[audit.Entry] = []
        move_many([step.attempt for step in held], AttemptStatus.SUCCEEDED, actor=WORKER, locked=True, log=log,
                  finished_at=timezone.now(), data=lambda a: {"external_ref": outcomes[a.step_id].external_ref})
        moved = move_many(
            held, StepStatus.VERIFYING, actor=WORKER, locked=True, log=log, failure_class="",
            each=lambda step: {"result": redact(outcomes[step.pk].result),
                               "external_ref": outcomes[step.pk].external_ref},
            data=lambda step: {"external_ref": outcomes[step.pk].external_ref, "attempt": step.attempt.number},
        )
        audit.append_many(log)
    return moved


def _complete(steps: list[Step]) -> None:
    """VERIFYING to COMPLETE for several verified forward steps in one
    commit, and each workflow whose steps are now all COMPLETE with them."""
    if not steps:
        return
    with transaction.atomic():
        log: list[audit.Entry] = []
        done = move_many(_held(steps, StepStatus.VERIFYING), StepStatus.COMPLETE, actor=WORKER, locked=True,
                         log=log, lease_expires_at=None)
        Step.objects.ready_after(done)
        touched = {step.workflow_id for step in done}
        unfinished = set(
            Step.objects.filter(workflow_id__in=touched, lane=0).exclude(status=StepStatus.COMPLETE)
            .order_by().values_list("workflow_id", flat=True).distinct()
        )
        finished = list(Workflow.objects.filter(pk__in=touched - unfinished, status=WorkflowStatus.RUNNING))
        move_many(finished, WorkflowStatus.COMPLETE, actor=WORKER, log=log)
        audit.append_many(log)


def execute(step: Step) -> None:
    """Carry one claimed step through the checkpoint protocol."""
    fence = step.fence
    scope = _scope(step)
    failpoints.hit(failpoints.AFTER_CLAIM, scope=scope)
    action = _action_or_none(step)
    problems = policy.recheck(step)
    if action is None or problems:
        _block(step, fence, problems or [f"unknown action {step.action}"])
        return
    rules = policy.policy_for(step.action)
    try:
        if _reconcile_earlier_attempts(step, action, fence):
            return
        attempt = _request_attempt(step, fence, rules.version)
        failpoints.hit(failpoints.AFTER_REQUESTED, scope=scope)
        try:
            with LeaseKeeper(step.pk, fence):
                outcome = _perform(step, action)
        except ActionError as err:
            _record_failure(step, attempt, action, err, fence, rules.max_attempts)
            return
        failpoints.hit(failpoints.AFTER_PERFORM, scope=scope)
        _record_outcome(step, attempt, outcome, fence, AttemptStatus.SUCCEEDED)
        failpoints.hit(failpoints.AFTER_RECORD, scope=scope)
        verify(step, action, fence, scope=scope)
    except LeaseLost:
        log.warning("lease on step %s was taken over; dropping this worker's result", step.pk)


def _perform(step: Step, action) -> Outcome:
    """The effect, with the step's arguments resolved. A bug in an action
    (any other exception) must not kill the worker loop: it is an error of
    unknown outcome, handled like any other."""
    args = resolve_args(step)
    try:
        return action.perform(args, step.operation_key)
    except ActionError:
        raise
    except Exception as exc:
        log.exception("action %s raised an unclassified error", step.action)
        raise ActionError(FailureClass.UNKNOWN, redact_text(f"{type(exc).__name__}: {exc}")[:500],
                          outcome_unknown=True) from exc


def deadline_of(step: Step):
    """One deadline caps each operation: the workflow's for its own steps, the
    compensation's (set when authorized) for undo steps."""
    if step.lane:
        return step.compensation_run.deadline
    return step.workflow.deadline


def _action_or_none(step: Step):
    try:
        return actions.get(step.action)
    except KeyError:
        return None


def _request_attempt(step: Step, fence: int, policy_version: int | None = None) -> Attempt:
    """The checkpoint before the effect: committed before perform() is called."""
    with transaction.atomic():
        _assert_lease(step, fence, StepStatus.RUNNING)
        number = (step.attempts.order_by("-number").values_list("number", flat=True).first() or 0) + 1
        attempt = Attempt.objects.create(
            step=step,
            number=number,
            operation_key=step.operation_key,
            fence=fence,
            worker=worker_id(),
            lease_expires_at=step.lease_expires_at,
            policy_version=policy_version,
        )
        audit.append(
            actor=WORKER,
            verb="attempt.requested",
            obj_type="attempt",
            obj_id=attempt.pk,
            workflow_id=step.workflow_id,
            data={"step": step.key, "number": number, "operation_key": step.operation_key, "fence": fence},
        )
    return attempt


def _assert_lease(step: Step, fence: int, status: str) -> None:
    """Inside a transaction: lock the step and make sure this claim still owns it."""
    current = Step.objects.select_for_update().filter(pk=step.pk).values_list("status", "fence").first()
    if current != (status, fence):
        raise LeaseLost()


def _record_outcome(step: Step, attempt: Attempt, outcome: Outcome, fence: int, attempt_status: str) -> None:
    with transaction.atomic():
        _assert_lease(step, fence, StepStatus.RUNNING)
        move(attempt, attempt_status, actor=WORKER, finished_at=timezone.now(),
             data={"external_ref": outcome.external_ref})
        moved = move(
            step,
            StepStatus.VERIFYING,
            actor=WORKER,
            guard={"fence": fence},
            result=redact(outcome.result),
            external_ref=outcome.external_ref,
            failure_class="",
            data={"external_ref": outcome.external_ref, "attempt": attempt.number},
        )
        if not moved:
            raise LeaseLost()


def verify(step: Step, action, fence: int, scope: str = "") -> None:
    """Establish the outcome before COMPLETE; a failed check is in doubt, not done."""
    outcome = Outcome(result=step.result or {}, external_ref=step.external_ref)
    ok = action.verify(outcome)
    failpoints.hit(failpoints.AFTER_VERIFY, scope=scope)
    _settle(step, ok, fence)


def _settle(step: Step, ok: bool, fence: int) -> None:
    """A verified step is COMPLETE (and its workflow with its last step); a
    step whose outcome failed verification is IN_DOUBT."""
    with transaction.atomic():
        _assert_lease(step, fence, StepStatus.VERIFYING)
        workflow = Workflow.objects.select_for_update().get(pk=step.workflow_id)
        if ok:
            move(step, StepStatus.COMPLETE, actor=WORKER, guard={"fence": fence}, lease_expires_at=None)
            Step.objects.ready_after([step])
            if step.lane:
                compensation.step_complete(workflow, step)
            elif not workflow.steps.filter(lane=0).exclude(status=StepStatus.COMPLETE).exists():
                move(workflow, WorkflowStatus.COMPLETE, actor=WORKER)
        else:
            move(step, StepStatus.IN_DOUBT, actor=WORKER, guard={"fence": fence}, lease_expires_at=None,
                 data={"reason": "the recorded outcome did not pass verification"})
            _workflow_to(workflow, step, WorkflowStatus.NEEDS_ATTENTION)


def _workflow_to(workflow: Workflow, step: Step, target: str, **data) -> None:
    """Stop the workflow's run after `step` failed or went in doubt. A
    compensation's step halts the compensation instead."""
    if step.lane:
        compensation.halt(workflow, step, **data)
        return
    if workflow.status in (WorkflowStatus.RUNNING, WorkflowStatus.APPROVED):
        if workflow.status == WorkflowStatus.APPROVED:
            move(workflow, WorkflowStatus.RUNNING, actor=WORKER, verb="workflow.started")
        move(workflow, target, actor=WORKER, data=data or None)


def _block(step: Step, fence: int, problems: list[str]) -> None:
    with transaction.atomic():
        workflow = Workflow.objects.select_for_update().get(pk=step.workflow_id)
        moved = move(
            step,
            StepStatus.BLOCKED,
            actor=WORKER,
            guard={"fence": fence},
            failure_class=FailureClass.POLICY_FAILED,
            lease_expires_at=None,
            data={"failure_class": FailureClass.POLICY_FAILED, "problems": problems},
        )
        if moved:
            _workflow_to(workflow, step, WorkflowStatus.FAILED, reason="policy recheck failed")


def _record_failure(step: Step, attempt: Attempt, action, err: ActionError, fence: int,
                    max_attempts: int = retry.MAX_ATTEMPTS) -> None:
    now = timezone.now()
    with transaction.atomic():
        _assert_lease(step, fence, StepStatus.RUNNING)
        attempt_status = AttemptStatus.UNKNOWN if err.outcome_unknown else AttemptStatus.FAILED
        move(attempt, attempt_status, actor=WORKER, finished_at=now, failure_class=err.failure_class,
             error=redact_text(err.message)[:2000], data={"failure_class": err.failure_class})
        workflow = Workflow.objects.select_for_update().get(pk=step.workflow_id)
        if err.outcome_unknown and not action.safe_to_repeat:
            move(step, StepStatus.IN_DOUBT, actor=WORKER, guard={"fence": fence}, failure_class=err.failure_class,
                 lease_expires_at=None, data={"failure_class": err.failure_class, "attempt": attempt.number})
            _workflow_to(workflow, step, WorkflowStatus.NEEDS_ATTENTION)
            return
        retryable = err.failure_class in RETRYABLE_CLASSES or (
            err.failure_class == FailureClass.TIMEOUT and action.safe_to_repeat
        )
        due = None
        if retryable and action.safe_to_repeat:
            due = retry.next_attempt_at(now, attempt.number - step.retry_base, deadline_of(step), err.retry_after,
                                        max_attempts=max_attempts)
        if due is not None:
            move(step, StepStatus.WAITING_RETRY, actor=WORKER, guard={"fence": fence}, next_attempt_at=due,
                 failure_class=err.failure_class, lease_expires_at=None,
                 data={"failure_class": err.failure_class, "attempt": attempt.number,
                       "retry_in_seconds": round((due - now).total_seconds(), 3)})
            return
        move(step, StepStatus.DEAD_LETTERED, actor=WORKER, guard={"fence": fence}, failure_class=err.failure_class,
             lease_expires_at=None, data={"failure_class": err.failure_class, "attempts": attempt.number})
        attempt.refresh_from_db()
        deadletters.park(step, attempt, err.failure_class, err.message)
        _workflow_to(workflow, step, WorkflowStatus.FAILED, reason=f"step {step.key} dead-lettered")


def _reconcile_earlier_attempts(step: Step, action, fence: int) -> bool:
    """Before a new attempt, settle any earlier one whose outcome is unknown
    (crash or timeout mid-effect). Returns True when the step moved on."""
    open_attempts = list(step.attempts.filter(status__in=[AttemptStatus.REQUESTED, AttemptStatus.UNKNOWN]))
    if not open_attempts:
        return False
    if action.can_lookup:
        try:
            found = action.lookup(step.operation_key)
        except ActionError as err:
            # Cannot tell yet: park the step for a later try; never guess.
            with transaction.atomic():
                _assert_lease(step, fence, StepStatus.RUNNING)
                workflow = Workflow.objects.get(pk=step.workflow_id)
                due = retry.next_attempt_at(timezone.now(), len(open_attempts), deadline_of(step), err.retry_after)
                if due is None:
                    move(step, StepStatus.IN_DOUBT, actor=WORKER, guard={"fence": fence},
                         failure_class=err.failure_class, lease_expires_at=None,
                         data={"reason": "reconciliation lookup kept failing"})
                    _workflow_to(workflow, step, WorkflowStatus.NEEDS_ATTENTION)
                else:
                    move(step, StepStatus.WAITING_RETRY, actor=WORKER, guard={"fence": fence},
                         next_attempt_at=due, failure_class=err.failure_class, lease_expires_at=None,
                         data={"reason": "reconciliation lookup failed", "failure_class": err.failure_class})
            return True
        settled_at = _in_flight_until(open_attempts)
        if found is None and settled_at > timezone.now():
            # "Not found" only means "did not happen" once the earlier request
            # can no longer land: a killed worker's request may still be in
            # flight at the remote. Look again when its time is up.
            with transaction.atomic():
                _assert_lease(step, fence, StepStatus.RUNNING)
                move(step, StepStatus.WAITING_RETRY, actor=WORKER, guard={"fence": fence},
                     next_attempt_at=settled_at, lease_expires_at=None,
                     data={"reason": "an earlier request may still be in flight; reconciling when it cannot land"})
            return True
        with transaction.atomic():
            _assert_lease(step, fence, StepStatus.RUNNING)
            for attempt in open_attempts:
                move(attempt, AttemptStatus.RECONCILED, actor=WORKER, verb="attempt.reconciled",
                     finished_at=attempt.finished_at or timezone.now(),
                     data={"found": found is not None, "external_ref": found.external_ref if found else ""})
        if found is None:
            return False
        _record_reconciled(step, found, fence)
        verify(step, action, fence)
        return True
    if action.idempotent:
        # The same operation key again is harmless; the interrupted attempts'
        # own outcome stays unknown, and says so.
        with transaction.atomic():
            _assert_lease(step, fence, StepStatus.RUNNING)
            for attempt in open_attempts:
                if attempt.status == AttemptStatus.REQUESTED:
                    move(attempt, AttemptStatus.UNKNOWN, actor=WORKER, finished_at=timezone.now(),
                         data={"reason": "interrupted; repeated with the same operation key"})
        return False
    with transaction.atomic():
        _assert_lease(step, fence, StepStatus.RUNNING)
        for attempt in open_attempts:
            if attempt.status == AttemptStatus.REQUESTED:
                move(attempt, AttemptStatus.UNKNOWN, actor=WORKER, finished_at=timezone.now())
        workflow = Workflow.objects.select_for_update().get(pk=step.workflow_id)
        move(step, StepStatus.IN_DOUBT, actor=WORKER, guard={"fence": fence}, lease_expires_at=None,
             failure_class=FailureClass.UNKNOWN,
             data={"reason": "an earlier attempt may have taken effect and the action cannot be looked up"})
        _workflow_to(workflow, step, WorkflowStatus.NEEDS_ATTENTION)
    return True


def _in_flight_until(attempts) -> datetime:
    """When the latest of these requests can no longer take effect remotely:
    its start, plus the client's timeout, plus a grace for the remote's own
    processing (RECONCILE_GRACE_SECONDS)."""
    latest = max(a.started_at for a in attempts)
    return latest + timedelta(seconds=settings.ACTION_TIMEOUT_SECONDS + settings.RECONCILE_GRACE_SECONDS)


def _record_reconciled(step: Step, outcome: Outcome, fence: int) -> None:
    with transaction.atomic():
        _assert_lease(step, fence, StepStatus.RUNNING)
        moved = move(step, StepStatus.VERIFYING, actor=WORKER, verb="step.reconciled", guard={"fence": fence},
                     result=redact(outcome.result), external_ref=outcome.external_ref, failure_class="",
                     data={"external_ref": outcome.external_ref})
        if not moved:
            raise LeaseLost()


# --- $from references ------------------------------------------------------


def resolve_args(step: Step) -> dict:
    """Replace {"$from": "<step>.result.<field>"} with the value recorded by
    that earlier step. A missing value is the plan's fault: INVALID_ARGUMENTS."""
    results = None

    def lookup(ref: str):
        nonlocal results
        if results is None:
            results = {
                key: result
                for key, result in Step.objects.filter(
                    workflow_id=step.workflow_id, position__lt=step.position, status=StepStatus.COMPLETE
                ).values_list("key", "result")
            }
        step_key, _, path = ref.partition(".result.")
        value = results.get(step_key)
        for part in path.split(".") if path else []:
            if not isinstance(value, dict) or part not in value:
                raise ActionError(FailureClass.INVALID_ARGUMENTS, f"reference {ref!r} has no value")
            value = value[part]
        if value is None:
            raise ActionError(FailureClass.INVALID_ARGUMENTS, f"reference {ref!r} has no value")
        return value

    def walk(value):
        if actions.is_reference(value):
            return lookup(value[actions.FROM])
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    return walk(step.args)


# --- recovery ---------------------------------------------------------------


def recover_expired_leases(now=None) -> int:
    """Put steps whose worker vanished back in line: leases that expired, and
    leases held by a process on this host that no longer exists (a worker
    restarted after SIGKILL need not wait for its old lease to run out).
    The next claim reconciles any attempt left REQUESTED before it performs."""
    now = now or timezone.now()
    in_flight = Step.objects.filter(status__in=[StepStatus.RUNNING, StepStatus.VERIFYING])
    expired = list(in_flight.filter(lease_expires_at__lt=now)[:500])
    local = in_flight.filter(lease_owner__startswith=f"{LOCAL_PREFIX}:", lease_expires_at__gte=now)
    expired += [step for step in local[:500] if not _process_alive(step.lease_owner)]
    recovered = 0
    for step in expired:
        with transaction.atomic():
            if step.status == StepStatus.RUNNING:
                moved = move(step, StepStatus.WAITING_RETRY, actor=WORKER, verb="step.lease_expired",
                             guard={"fence": step.fence, "lease_owner": step.lease_owner},
                             next_attempt_at=timezone.now(), lease_expires_at=None,
                             data={"previous_owner": step.lease_owner, "fence": step.fence})
            else:
                moved = _reverify_later(step)
            recovered += int(bool(moved))
    return recovered


def _process_alive(owner: str) -> bool:
    try:
        pid = int(owner.rsplit(":", 1)[1])
    except (IndexError, ValueError):
        return True  # not ours to judge
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie nobody reaped (a container's pid 1 may not) is dead too
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _reverify_later(step: Step) -> bool:
    """A step that crashed between recording and COMPLETE keeps its outcome;
    a fresh lease lets a worker finish verification."""
    updated = Step.objects.filter(
        pk=step.pk, status=StepStatus.VERIFYING, fence=step.fence, lease_owner=step.lease_owner
    ).update(fence=F("fence") + 1, lease_owner="", lease_expires_at=None, next_attempt_at=timezone.now())
    if updated:
        audit.append(actor=WORKER, verb="step.lease_expired", obj_type="step", obj_id=step.pk,
                     workflow_id=step.workflow_id, data={"status": step.status, "previous_owner": step.lease_owner})
    return bool(updated)


def finish_verifying(limit: int = 100) -> int:
    """Verify steps left in VERIFYING without a lease (after a crash)."""
    done = 0
    lease = timedelta(seconds=settings.STEP_LEASE_SECONDS)
    for step in Step.objects.filter(status=StepStatus.VERIFYING, lease_expires_at__isnull=True)[:limit]:
        taken = Step.objects.filter(pk=step.pk, status=StepStatus.VERIFYING, fence=step.fence,
                                    lease_expires_at__isnull=True).update(
            fence=F("fence") + 1, lease_owner=worker_id(), lease_expires_at=timezone.now() + lease)
        if not taken:
            continue
        step.refresh_from_db()
        action = _action_or_none(step)
        if action is None:
            continue
        try:
            verify(step, action, step.fence)
        except LeaseLost:
            continue
        done += 1
    return done
