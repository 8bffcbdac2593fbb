"""Recording what an effect did: the commits after perform()
(docs/explanation/checkpoint-protocol.md#checkpoint-protocol,
docs/explanation/checkpoint-protocol.md#failures-and-retries).

Its outcome (the attempt SUCCEEDED, the step VERIFYING), its verification
(COMPLETE, or IN_DOUBT), or its failure (a retry at its due time, IN_DOUBT,
or a dead letter), and what each means for the workflow. Every write checks
first that the claim still holds the step (`leases.assert_lease`).
"""

from __future__ import annotations

import logging

from django.db import transaction
from django.utils import timezone

from workflows import actions, telemetry
from workflows.actions import ActionError, Outcome
from workflows.audit import journal
from workflows.audit.redaction import redact, redact_text
from workflows.engine import compensating, failpoints, limits, parking, planning, policy, retry
from workflows.engine.leases import WORKER, LeaseLost, assert_lease, still_held
from workflows.engine.transitions import move, move_many
from workflows.models import Attempt, Step, Workflow
from workflows.states import FINISHED_STEP, RETRYABLE_CLASSES, AttemptStatus, FailureClass, StepStatus, WorkflowStatus

log = logging.getLogger(__name__)


def record_outcome(step: Step, attempt: Attempt, outcome: Outcome, fence: int, attempt_status: str) -> None:
    """The checkpoint after the effect: the attempt's outcome, the step VERIFYING."""
    with transaction.atomic(), planning.by_key():
        assert_lease(step, fence, StepStatus.RUNNING)
        move(
            attempt,
            attempt_status,
            actor=WORKER,
            finished_at=timezone.now(),
            data={"external_ref": outcome.external_ref},
        )
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


def record_outcomes(steps: list[Step], outcomes: dict[int, Outcome]) -> list[Step]:
    """The outcomes of several performed steps, in one commit: each attempt
    SUCCEEDED and its step VERIFYING, while the claim still holds."""
    if not steps:
        return []
    with transaction.atomic(), planning.by_key():
        held = still_held(steps, StepStatus.RUNNING)
        log: list[journal.Entry] = []
        move_many(
            [step.attempt for step in held],
            AttemptStatus.SUCCEEDED,
            actor=WORKER,
            locked=True,
            log=log,
            finished_at=timezone.now(),
            data=lambda a: {"external_ref": outcomes[a.step_id].external_ref},
        )
        moved = move_many(
            held,
            StepStatus.VERIFYING,
            actor=WORKER,
            locked=True,
            log=log,
            failure_class="",
            each=lambda step: {
                "result": redact(outcomes[step.pk].result),
                "external_ref": outcomes[step.pk].external_ref,
            },
            data=lambda step: {"external_ref": outcomes[step.pk].external_ref, "attempt": step.attempt.number},
        )
        journal.append_many(log)
    return moved


def record_performed(
    steps: list[Step], answers: dict[int, Outcome], failures: dict[int, ActionError], verified: list[Step] | None = None
) -> None:
    """After perform(): the outcomes of several steps, each under its own
    attempt and fence. The answered ones in one commit, then verified, then
    COMPLETE in one commit (a compensation's step, or one that failed its
    check, settles on its own); each failure by its class. With `verified`,
    the plan steps that passed their check are added to it instead, for the
    caller's next commit to make COMPLETE (`complete_held`). A crash
    anywhere leaves each step where a crash of the one-step path would."""
    performed = [step for step in steps if step.pk in answers]
    failpoints.hit_each(failpoints.AFTER_PERFORM, performed)
    with telemetry.steps_span("durable.record", performed):
        recorded = record_outcomes(performed, answers)
    if failed := [step for step in steps if step.pk in failures]:
        rules = policy.policies_for({step.action for step in failed})
        for step in failed:
            try:
                with telemetry.step_span("durable.record", step):
                    record_failure(
                        step,
                        step.attempt,
                        actions.get(step.action),
                        failures[step.pk],
                        step.fence,
                        rules[step.action].max_attempts,
                    )
            except LeaseLost:
                log.warning("lease on step %s was taken over; dropping this worker's result", step.pk)
    failpoints.hit_each(failpoints.AFTER_RECORD, recorded)
    with telemetry.steps_span("durable.verify", recorded):
        verdicts = {
            step.pk: actions.get(step.action).verify(Outcome(result=step.result or {}, external_ref=step.external_ref))
            for step in recorded
        }
        failpoints.hit_each(failpoints.AFTER_VERIFY, recorded)
        passed = [step for step in recorded if verdicts[step.pk] and not step.lane]
        if verified is None:
            complete(passed)
        else:
            verified.extend(passed)
        for step in recorded:
            if step.lane or not verdicts[step.pk]:
                try:
                    settle(step, verdicts[step.pk], step.fence)
                except LeaseLost:
                    log.warning("lease on step %s was taken over; dropping this worker's result", step.pk)


def verify(step: Step, action, fence: int, scope: str = "") -> None:
    """Establish the outcome before COMPLETE; a failed check is in doubt, not done."""
    outcome = Outcome(result=step.result or {}, external_ref=step.external_ref)
    ok = action.verify(outcome)
    failpoints.hit(failpoints.AFTER_VERIFY, scope=scope)
    settle(step, ok, fence)


def settle(step: Step, ok: bool, fence: int) -> None:
    """A verified step is COMPLETE (and its workflow with its last step); a
    step whose outcome failed verification is IN_DOUBT."""
    with transaction.atomic(), planning.by_key():
        assert_lease(step, fence, StepStatus.VERIFYING)
        workflow = Workflow.objects.select_for_update().get(pk=step.workflow_id)
        if ok:
            release(step, StepStatus.COMPLETE, fence)
            Step.objects.ready_after([step])
            if step.lane:
                compensating.step_complete(workflow, step)
            elif (
                workflow.status == WorkflowStatus.RUNNING
                and not workflow.steps.filter(lane=0).exclude(status__in=FINISHED_STEP).exists()
            ):
                move(workflow, WorkflowStatus.COMPLETE, actor=WORKER)
        else:
            in_doubt(
                workflow,
                step,
                fence,
                data={"reason": "the recorded outcome did not pass verification"},
            )


def complete(steps: list[Step]) -> None:
    """VERIFYING to COMPLETE for several verified forward steps in one
    commit, and each workflow whose steps are now all COMPLETE with them."""
    if not steps:
        return
    with transaction.atomic(), planning.by_key():
        log: list[journal.Entry] = []
        complete_held(still_held(steps, StepStatus.VERIFYING), log)
        journal.append_many(log)


def complete_held(steps: list[Step], log: list) -> None:
    """Inside the caller's transaction, with the steps' rows locked and
    their claims checked (`still_held`, VERIFYING): each COMPLETE, the step
    after it ready, and each workflow whose steps are now all COMPLETE with
    them; the audit entries go to `log`."""
    if not steps:
        return
    done = move_many(steps, StepStatus.COMPLETE, actor=WORKER, locked=True, log=log, lease_expires_at=None)
    Step.objects.ready_after(done)
    touched = {step.workflow_id for step in done}
    unfinished = set(
        Step.objects.filter(workflow_id__in=touched, lane=0)
        .exclude(status__in=FINISHED_STEP)
        .order_by()
        .values_list("workflow_id", flat=True)
        .distinct()
    )
    # By key, the status compared here (as `move_many` does): a status in the
    # query would read every RUNNING plan's index entry when statistics lag.
    finished = [
        workflow
        for workflow in Workflow.objects.filter(pk__in=touched - unfinished)
        if workflow.status == WorkflowStatus.RUNNING
    ]
    move_many(finished, WorkflowStatus.COMPLETE, actor=WORKER, log=log)


def release(step: Step, target: str, fence: int, **fields) -> bool:
    """The claim holding `fence` moves the step to `target` and gives up its
    lease; `fields` (and `data` for the audit entry) go with the move.
    False, changing nothing, when the claim no longer holds the step."""
    return move(step, target, actor=WORKER, guard={"fence": fence}, lease_expires_at=None, **fields)


def in_doubt(workflow: Workflow, step: Step, fence: int, **fields) -> None:
    """The claim leaves the step IN_DOUBT for an operator (`fields` go with
    the move), and its workflow's run stops for attention."""
    release(step, StepStatus.IN_DOUBT, fence, **fields)
    workflow_to(workflow, step, WorkflowStatus.NEEDS_ATTENTION)


def workflow_to(workflow: Workflow, step: Step, target: str, **data) -> None:
    """Stop the workflow's run after `step` failed or went in doubt. A
    compensation's step halts the compensation instead."""
    if step.lane:
        compensating.halt(workflow, step, **data)
        return
    if workflow.status in (WorkflowStatus.RUNNING, WorkflowStatus.APPROVED):
        if workflow.status == WorkflowStatus.APPROVED:
            move(workflow, WorkflowStatus.RUNNING, actor=WORKER, verb="workflow.started")
        move(workflow, target, actor=WORKER, data=data or None)


def block(step: Step, fence: int, problems: list[str], **fields) -> None:
    """The policy recheck failed: BLOCKED with POLICY_FAILED, for a fresh
    approval. `fields` are written with the block (a preview taken again)."""
    with transaction.atomic(), planning.by_key():
        workflow = Workflow.objects.select_for_update().get(pk=step.workflow_id)
        moved = release(
            step,
            StepStatus.BLOCKED,
            fence,
            failure_class=FailureClass.POLICY_FAILED,
            data={"failure_class": FailureClass.POLICY_FAILED, "problems": problems},
            **fields,
        )
        if moved:
            workflow_to(workflow, step, WorkflowStatus.FAILED, reason="policy recheck failed")


def record_failure(
    step: Step, attempt: Attempt, action, err: ActionError, fence: int, max_attempts: int = retry.MAX_ATTEMPTS
) -> None:
    """A failed attempt, by its class: a retry at its due time when the class
    and the action allow one and the deadline leaves room; IN_DOUBT when the
    outcome is unknown and repeating is not safe; otherwise a dead letter."""
    now = timezone.now()
    with transaction.atomic(), planning.by_key():
        if err.failure_class == FailureClass.RATE_LIMITED:
            # First, so that this transaction takes the throttle's row lock
            # before any other, as claims do (no deadlock between them).
            limits.note_rate_limited(step.action, err.retry_after, now)
        assert_lease(step, fence, StepStatus.RUNNING)
        attempt_status = AttemptStatus.UNKNOWN if err.outcome_unknown else AttemptStatus.FAILED
        move(
            attempt,
            attempt_status,
            actor=WORKER,
            finished_at=now,
            failure_class=err.failure_class,
            error=redact_text(err.message)[:2000],
            data={"failure_class": err.failure_class},
        )
        workflow = Workflow.objects.select_for_update().get(pk=step.workflow_id)
        if err.outcome_unknown and not action.is_safe_to_repeat(step.args):
            in_doubt(
                workflow,
                step,
                fence,
                failure_class=err.failure_class,
                data={"failure_class": err.failure_class, "attempt": attempt.number},
            )
            return
        retryable = err.failure_class in RETRYABLE_CLASSES or (
            err.failure_class == FailureClass.TIMEOUT and action.is_safe_to_repeat(step.args)
        )
        due = None
        if retryable and action.is_safe_to_repeat(step.args):
            due = retry.next_attempt_at(
                now, attempt.number - step.retry_base, deadline_of(step), err.retry_after, max_attempts=max_attempts
            )
        if due is not None:
            release(
                step,
                StepStatus.WAITING_RETRY,
                fence,
                next_attempt_at=due,
                failure_class=err.failure_class,
                data={
                    "failure_class": err.failure_class,
                    "attempt": attempt.number,
                    "retry_in_seconds": round((due - now).total_seconds(), 3),
                },
            )
            return
        release(
            step,
            StepStatus.DEAD_LETTERED,
            fence,
            failure_class=err.failure_class,
            data={"failure_class": err.failure_class, "attempts": attempt.number},
        )
        attempt.refresh_from_db()
        parking.park(step, attempt, err.failure_class, err.message)
        workflow_to(workflow, step, WorkflowStatus.FAILED, reason=f"step {step.key} dead-lettered")


def deadline_of(step: Step):
    """One deadline caps each operation: the workflow's for its own steps, the
    compensation's (set when authorized) for undo steps."""
    if step.lane:
        return step.compensation_run.deadline
    return step.workflow.deadline
