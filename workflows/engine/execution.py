"""The checkpoint protocol for one step (docs/explanation/checkpoint-protocol.md#checkpoint-protocol).

    claim (lease + fence) ─► recheck policy ─► attempt REQUESTED committed
      ─► perform(args, operation_key) ─► outcome committed (step VERIFYING)
      ─► verify ─► step COMPLETE committed ─► next step

Every function here re-reads the database and does only what is due, so a
task delivered twice, late, or after a crash is harmless. Nothing is ever
performed without a committed REQUESTED attempt, and an outcome is recorded
only while the step still carries the fencing number of the claim
(`leases`). Recording outcomes is `outcomes`; reconciling an earlier attempt
whose outcome is unknown, and the sweep for vanished workers, `recovery`.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import EmptyResultSet
from django.db import DatabaseError, connection, transaction
from django.db.models import Exists, OuterRef, Subquery
from django.utils import timezone

from workflows import actions, queue, telemetry
from workflows.actions import ActionError
from workflows.audit import journal
from workflows.engine import (
    choices,
    draining,
    failpoints,
    gatekeeper,
    gates,
    inflight,
    limits,
    outcomes,
    planning,
    policy,
    previews,
    proofs,
    recovery,
    references,
)
from workflows.engine.leases import WORKER, LeaseKeeper, LeaseLost, assert_lease, worker_id
from workflows.engine.planning import fixed_plans
from workflows.engine.transitions import move_many
from workflows.models import Attempt, Step
from workflows.states import FINISHED_STEP, AttemptStatus, StepStatus, WorkflowStatus

log = logging.getLogger(__name__)


# --- claiming ---------------------------------------------------------------


READY_ORDER = ("next_attempt_at", "position", "id")


def due_steps(workflow_id=None, window: int | None = None, exclude_actions=()):
    """Due steps (of one workflow, or a list of them), first due first. With
    `window`, only among the first `window` ready steps, read off the ready
    index in order by a statement of its own: a claim's cost does not grow
    with the number of ready steps. (As a subquery, the planner may rescan
    the window once per candidate row when its statistics lag, which made a
    claim cost O(ready × window).) The step's own conditions are applied
    again to the window, so a row claimed meanwhile (and re-read under its
    lock) no longer matches. Steps of `exclude_actions` are left out before
    the window is taken (`limits.held_back`)."""
    ready = Step.objects.due()
    if exclude_actions:
        ready = ready.exclude(action__in=sorted(exclude_actions))
    if isinstance(workflow_id, (list, tuple, set)):
        ready = ready.filter(workflow_id__in=list(workflow_id))
    elif workflow_id is not None:
        ready = ready.filter(workflow_id=workflow_id)
    steps = ready
    if window is not None:
        steps = ready.filter(pk__in=_first_ready(ready, window))
    earlier_unfinished = Step.objects.filter(
        workflow=OuterRef("workflow"), lane=OuterRef("lane"), position__lt=OuterRef("position")
    ).exclude(status__in=FINISHED_STEP)
    steps = steps.filter(~Exists(earlier_unfinished))
    # Within a window, any order will do (it holds the first due steps). Id
    # order, under `fixed_plans`, makes the planner fetch the window's rows
    # by primary key (and stop at the limit): otherwise, when its statistics
    # lag, it walks every PENDING step in the status index for those ids.
    return steps.order_by("pk") if window is not None else steps.order_by(*READY_ORDER)


def any_due() -> bool:
    """Whether any step is due (the worker loop asks every tick)."""
    with transaction.atomic(), fixed_plans():
        return bool(due_steps(window=CLAIM_BATCH).values_list("pk", flat=True)[:1])


def _first_ready(ready, window: int) -> list[int]:
    """The ids of the first `window` ready steps, read off the ready index
    (`step_ready`) in its order. PostgreSQL's planner walks it when bitmap
    scans and sorts are off (`fixed_plans`); SQLite's, without statistics,
    would rather start from the running workflows or the status index and
    sort every step they hold, so it is held to the index with INDEXED BY."""
    first = ready.order_by(*READY_ORDER).values_list("pk", flat=True)[:window]
    if connection.vendor != "sqlite":
        return list(first)
    try:
        sql, params = first.query.sql_with_params()
    except EmptyResultSet:
        return []
    table = connection.ops.quote_name(Step._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(sql.replace(f"FROM {table} ", f"FROM {table} INDEXED BY step_ready ", 1), params)
        return [pk for (pk,) in cursor.fetchall()]


CLAIM_BATCH = 64
# Steps that run alone (anything that calls out), taken by one claim when the
# caller does not say how many it has room for.
ALONE_BATCH = 8


def claim(workflow_id=None) -> Step | None:
    """Take the lease on one due step, for `execute`; None when nothing is due."""
    steps = claim_batch(1, workflow_id, share=False)
    return steps[0] if steps else None


def claim_batch(limit: int = CLAIM_BATCH, workflow_id=None, share: bool = True, alone: int = ALONE_BATCH) -> list[Step]:
    """Take leases on up to `limit` due steps in one transaction (one commit
    for the lot), of which at most `alone` run alone (remote effects, each
    with its own commits; a drain asks for as many as it has room in flight). On PostgreSQL,
    rows another worker is claiming are skipped, not waited for; each claim
    is still fenced.

    With `share`, a step that can share its checkpoints
    (`_shares_checkpoints`) has its policy rechecked and its REQUESTED
    attempt written in this same transaction, under the claim's row lock: it
    comes back with `attempt` set. Every other step comes back with `attempt` None and goes through
    `execute`, which rechecks and requests on its own."""
    lease = timedelta(seconds=settings.STEP_LEASE_SECONDS)
    unsettled = Attempt.objects.filter(step=OuterRef("pk"), status__in=[AttemptStatus.REQUESTED, AttemptStatus.UNKNOWN])
    latest = Attempt.objects.filter(step=OuterRef("pk")).order_by("-number").values("number")[:1]
    began = time.time_ns()
    with transaction.atomic(), planning.by_key():
        held = limits.held_back()
        with fixed_plans():
            candidates = due_steps(workflow_id, window=limit * 4, exclude_actions=held).annotate(
                open_attempts=Exists(unsettled), attempts_made=Subquery(latest)
            )
            if connection.features.has_select_for_update_skip_locked:
                candidates = candidates.select_for_update(skip_locked=True, of=("self",))
            found = list(candidates.select_related("workflow")[:limit])
        # A step whose `when` names another choice of its gate ends SKIPPED
        # here, before its own gate (if any) could pause it.
        if skipped := [step for step in found if step.when and not choices.taken(step)]:
            gatekeeper.skip(skipped)
            found = [step for step in found if step not in skipped]
        # A step whose gate is shut is not claimed: it and its workflow
        # wait for the gate's approvals, paused here under the claim's lock.
        if shut := [step for step in found if gates.shut(step)]:
            gatekeeper.pause(shut)
            found = [step for step in found if step not in shut]
        # Keep every step that shares its commits and a few that run alone;
        # the rest stay due (their row locks go with this commit).
        solo = [step for step in found if not (share and _shares_checkpoints(step))][:alone]
        claimed = [step for step in found if (share and _shares_checkpoints(step)) or step in solo]
        claimed = limits.admit(claimed, held)
        if not claimed:
            return []
        # The rows are locked (or, on SQLite, the database is) since they
        # were read as due: nothing can have changed them in between.
        owner = worker_id()
        expires = timezone.now() + lease
        log: list[journal.Entry] = []
        # Claimed again: no request woke these (their spans start a trace of their own).
        again = {step.pk for step in claimed if step.status == StepStatus.WAITING_RETRY}
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
        starting = {
            step.workflow_id: step.workflow for step in claimed if step.workflow.status == WorkflowStatus.APPROVED
        }
        started = {
            workflow.pk
            for workflow in move_many(
                list(starting.values()), WorkflowStatus.RUNNING, actor=WORKER, verb="workflow.started", log=log
            )
        }
        for step in claimed:
            step.attempt = None
            if step.workflow_id in started:
                step.workflow.status = WorkflowStatus.RUNNING
        telemetry.claimed(claimed, began, again)
        if share:
            _request_shared([step for step in claimed if _shares_checkpoints(step)], log)
        journal.append_many(log)
    return claimed


def _shares_checkpoints(step: Step) -> bool:
    """Steps of an idempotent in-process action with nothing to reconcile
    share their checkpoint commits with the rest of their batch."""
    action = actions.find(step.action)
    return (
        action is not None
        and action.in_process
        and action.is_idempotent(step.args)
        and not step.lane
        and not step.open_attempts
    )


def _request_shared(steps: list[Step], log: list) -> None:
    """Inside the claim's transaction: recheck policy, then write the
    REQUESTED attempt (the checkpoint before the effect) of each step that
    passes. A step that fails the recheck keeps no attempt; `execute` blocks it."""
    if not steps:
        return
    # The claim holds these steps' rows, so the recheck's read of their
    # workflows sees any cancel that committed first (`locks`).
    with telemetry.steps_span("durable.policy_recheck", steps):
        checks = policy.evaluate_many(steps)
    ready = [
        step
        for step in steps
        if not policy.problems(checks[step.pk])
        and not references.problems(step)
        and not previews.request_problems(step, actions.find(step.action))
    ]
    with telemetry.steps_span("durable.request", ready):
        inflight.write_requested(ready, log)


# --- running ----------------------------------------------------------------


def run_workflow(workflow_id) -> int:
    """Run every due step of one workflow (or a list of them), in order, in
    shared batches where steps allow. Returns steps executed."""
    done = 0
    while batch := claim_batch(workflow_id=workflow_id):
        run_batch(batch)
        done += len(batch)
    return done


def claim_seconds() -> float:
    """How long a drain keeps claiming. It must return before django-q's
    task timeout would kill its worker with effects in flight: the last
    effect it sends may take the connect timeout plus ACTION_TIMEOUT_SECONDS."""
    timeout = settings.Q_CLUSTER["timeout"]
    effect = settings.ACTION_TIMEOUT_SECONDS + min(2.0, settings.ACTION_TIMEOUT_SECONDS)
    return max(timeout / 4, timeout - effect - 1)


POLL = 0.05


def drain(budget_seconds: float | None = None) -> int:
    """Run due steps of any workflow until none is due or the claiming
    budget is spent, with up to WORKER_CONCURRENCY remote effects in flight
    (`inflight`). A drain stopped by its budget with work still due queues
    the next drain. Returns steps claimed."""
    stop_at = time.monotonic() + (budget_seconds if budget_seconds is not None else claim_seconds())
    done = recovery.finish_verifying()
    claim_after = 0.0
    with LeaseKeeper() as keeper:
        effects = inflight.Effects(keeper)
        while True:
            batch = []
            stopping = draining.requested()
            if stopping:
                effects.give_back()
            claiming = time.monotonic() < stop_at and not stopping
            # While effects are in flight, claims go in groups (`Effects.claim_group`).
            if (
                claiming
                and time.monotonic() >= claim_after
                and (effects.wanted >= effects.claim_group or not effects.busy)
            ):
                # No more rows than there is room for: each row read is
                # locked and made into objects, and the surplus handed back.
                try:
                    batch = claim_batch(min(CLAIM_BATCH, effects.wanted), alone=effects.wanted)
                except DatabaseError:
                    if not effects.busy:
                        raise
                    # The session was cut mid-claim (a terminated backend, a
                    # restarted server, a session PostgreSQL ended while this
                    # process was stopped inside a claim): the claim rolled
                    # back, or what its lost commit took goes back at its
                    # leases' end. The effects in flight are still this
                    # worker's to record, on a new session; claims wait a second.
                    log.warning("a claim lost its database session; recording the effects in flight", exc_info=True)
                    connection.close()
                    claim_after = time.monotonic() + 1.0
            if batch:
                done += len(batch)
                _run_claimed(batch, keeper, effects)
            elif not effects.busy:
                if claiming and time.monotonic() < claim_after:
                    time.sleep(max(0.0, claim_after - time.monotonic()))  # then claim on a new session
                    continue
                break
            effects.collect(timeout=0 if batch else POLL)
    # A cluster that is draining leaves the work it did not claim to the
    # other clusters, whose loops find it due; a wake-up queued here could
    # only be taken by this cluster's own workers while they stop.
    if not claiming and not stopping and due_steps(window=1).exists():
        queue.enqueue("workflows.tasks.drain", name="drain")
    return done


def run_batch(steps: list[Step]) -> None:
    """Carry claimed steps through the checkpoint protocol: those that came
    with a REQUESTED attempt together (`_run_shared`), the remote ones all in
    flight at once (`inflight`). One heartbeat keeps every lease alive."""
    with LeaseKeeper() as keeper:
        effects = inflight.Effects(keeper, limit=max(1, len(steps)))
        _run_claimed(steps, keeper, effects)
        effects.finish()


def _run_claimed(steps: list[Step], keeper: LeaseKeeper, effects: inflight.Effects) -> None:
    shared = [step for step in steps if step.attempt is not None]
    if shared:
        claims = [(step.pk, step.fence) for step in shared]
        keeper.hold(claims)
        try:
            _run_shared(shared)
        finally:
            keeper.release([pk for pk, _ in claims])
    effects.start([step for step in steps if step.attempt is None])


def _run_shared(steps: list[Step]) -> None:
    """The checkpoint protocol for several in-process steps at once, each
    with its own attempt, operation key, fence and audit events. Their claims
    and REQUESTED attempts committed together (so `after_claim` and
    `after_requested` are one point here); then every perform(), then the
    outcomes (`outcomes.record_performed`)."""
    failpoints.hit_each(failpoints.AFTER_CLAIM, steps)
    failpoints.hit_each(failpoints.AFTER_REQUESTED, steps)
    answers, failures = {}, {}
    for step in steps:
        try:
            with telemetry.step_span("durable.perform", step):
                answer = inflight.perform(actions.get(step.action), *_prepared(step))
        except ActionError as err:
            answer = err
        (failures if isinstance(answer, ActionError) else answers)[step.pk] = answer
    outcomes.record_performed(steps, answers, failures)


def execute(step: Step) -> None:
    """Carry one claimed step through the checkpoint protocol, alone."""
    fence = step.fence
    scope = failpoints.scope_of(step)
    failpoints.hit(failpoints.AFTER_CLAIM, scope=scope)
    action = actions.find(step.action)
    with telemetry.step_span("durable.policy_recheck", step):
        problems = policy.recheck(step) + references.problems(step) + previews.request_problems(step, action)
    if action is None or problems:
        outcomes.block(step, fence, problems or [f"unknown action {step.action}"])
        return
    rules = policy.policy_for(step.action)
    if previews.must_retake(step, action):
        with LeaseKeeper(step.pk, fence):
            found = previews.changed(step, previews.take(action, step.args))
        if found is not None:
            problems, fields = found
            outcomes.block(step, fence, problems, **fields)
            return
    try:
        with telemetry.step_span("durable.reconcile", step):
            if recovery.reconcile_earlier_attempts(step, action, fence):
                return
        with telemetry.step_span("durable.request", step):
            attempt = _request_attempt(step, fence, rules.version, step.bound_plan_hash)
        if attempt is None:
            outcomes.block(step, fence, policy.cancelled_problem())
            return
        failpoints.hit(failpoints.AFTER_REQUESTED, scope=scope)
        try:
            step.attempt = attempt
            with LeaseKeeper(step.pk, fence), telemetry.step_span("durable.perform", step, attempt):
                answer = inflight.perform(action, *_prepared(step))
        except ActionError as err:
            answer = err
        if isinstance(answer, ActionError):
            with telemetry.step_span("durable.record", step, attempt):
                outcomes.record_failure(step, attempt, action, answer, fence, rules.max_attempts)
            return
        failpoints.hit(failpoints.AFTER_PERFORM, scope=scope)
        with telemetry.step_span("durable.record", step, attempt):
            outcomes.record_outcome(step, attempt, answer, fence, AttemptStatus.SUCCEEDED)
        failpoints.hit(failpoints.AFTER_RECORD, scope=scope)
        with telemetry.step_span("durable.verify", step, attempt):
            outcomes.verify(step, action, fence, scope=scope)
    except LeaseLost:
        log.warning("lease on step %s was taken over; dropping this worker's result", step.pk)


def _prepared(step: Step) -> tuple:
    """perform()'s arguments after the action: resolved args, operation key, perform context."""
    args, context = inflight.prepared(step)
    return args, step.operation_key, context


def _request_attempt(step: Step, fence: int, policy_version: int | None = None, plan_hash: str = "") -> Attempt | None:
    """The checkpoint before the effect: committed before perform() is
    called, with the plan hash the policy recheck bound the step to. None,
    writing nothing, when the workflow was cancelled since the recheck."""
    with transaction.atomic(), planning.by_key():
        assert_lease(step, fence, StepStatus.RUNNING)
        if policy.cancelled_workflows([step.workflow_id]):
            return None
        number = (step.attempts.order_by("-number").values_list("number", flat=True).first() or 0) + 1
        attempt = Attempt.objects.create(
            step=step,
            number=number,
            operation_key=step.operation_key,
            fence=fence,
            worker=worker_id(),
            lease_expires_at=step.lease_expires_at,
            policy_version=policy_version,
            plan_hash=plan_hash,
            **proofs.identity(step, actions.find(step.action)),
        )
        journal.append(
            actor=WORKER,
            verb="attempt.requested",
            obj_type="attempt",
            obj_id=attempt.pk,
            workflow_id=step.workflow_id,
            data={"step": step.key, "number": number, "operation_key": step.operation_key, "fence": fence},
        )
    return attempt
