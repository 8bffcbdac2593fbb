"""Dead letters: exhausted or non-retryable work, parked for an operator.

A replay puts the step back in line with its original `operation_key` (so
the remote system sees the same operation, never a new one), after the
current policy has been checked. Two operators replaying the same entry at
once cause exactly one replay: the conditional update decides.
"""

from dataclasses import dataclass

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from workflows import queue, roles
from workflows.actions import Outcome
from workflows.audit import journal, secrets
from workflows.audit.redaction import redact, redact_text
from workflows.engine import compensating, policy
from workflows.engine.transitions import move
from workflows.errors import DomainError, NotAllowed, NotVisible, WrongState
from workflows.models import DeadLetter, Job, JobItem, Step, Workflow
from workflows.operations import compensation
from workflows.reasons import clean_reason
from workflows.states import FINISHED_STEP, AttemptStatus, StepStatus, WorkflowStatus

MAX_BULK = 500


@dataclass
class Preview:
    dead_letter: DeadLetter
    step: Step
    checks: list[policy.Check]

    @property
    def will_run(self) -> bool:
        return self.dead_letter.status == DeadLetter.Status.OPEN and all(c.ok for c in self.checks)

    def as_dict(self) -> dict:
        return {
            "dead_letter_id": str(self.dead_letter.pk),
            "workflow_id": str(self.step.workflow_id),
            "step_key": self.step.key,
            "action": self.step.action,
            "operation_key": self.step.operation_key,
            "args": secrets.shown(self.step.args),
            "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in self.checks],
            "will_run": self.will_run,
        }


def preview(dead_letters) -> list[Preview]:
    """Exactly what a replay would run: step, action, operation key, args, and
    the policy checks as they stand now."""
    previews = []
    for dead_letter in dead_letters:
        step = Step.objects.select_related("workflow").get(pk=dead_letter.step_id)
        previews.append(Preview(dead_letter, step, policy.evaluate(step)))
    return previews


def _check_operator(user, dead_letter: DeadLetter | None = None) -> None:
    if not roles.is_operator(user):
        raise NotAllowed("Only operators can resolve dead letters.")
    if dead_letter is not None and not DeadLetter.objects.visible_to(user).filter(pk=dead_letter.pk).exists():
        raise NotVisible("No such dead letter.")


def replay(dead_letter: DeadLetter, *, by, reason: str) -> DeadLetter:
    _check_operator(by, dead_letter)
    reason = clean_reason(reason)
    now = timezone.now()
    with transaction.atomic():
        # The conditional update decides between concurrent replays; raising
        # below rolls the claim back with everything else.
        claimed = DeadLetter.objects.filter(pk=dead_letter.pk, status=DeadLetter.Status.OPEN).update(
            status=DeadLetter.Status.REPLAYED, resolved_at=now, resolved_by=by, resolution_reason=reason
        )
        if not claimed:
            raise WrongState("This dead letter was already resolved.")
        step = Step.objects.select_for_update(of=("self",)).select_related("workflow").get(pk=dead_letter.step_id)
        if step.status != StepStatus.DEAD_LETTERED:
            raise WrongState(f"The step is {step.status}, no longer dead-lettered.")
        failed = policy.problems(policy.evaluate(step))
        if failed:
            raise WrongState("Current policy does not allow this replay: " + "; ".join(failed))
        last = step.attempts.order_by("-number").values_list("number", flat=True).first() or 0
        move(
            step,
            StepStatus.PENDING,
            actor=by,
            verb="step.replayed",
            failure_class="",
            retry_base=last,
            next_attempt_at=timezone.now(),
            data={"dead_letter": str(dead_letter.pk), "reason": reason, "operation_key": step.operation_key},
        )
        workflow = Workflow.objects.select_for_update().get(pk=step.workflow_id)
        context = {"dead_letter": str(dead_letter.pk), "reason": reason}
        if step.lane:
            compensation.resume(workflow, step, by=by, **context)
        elif workflow.status == WorkflowStatus.FAILED:
            move(workflow, WorkflowStatus.RUNNING, actor=by, verb="workflow.resumed", data=context)
        queue.wake(workflow)
    dead_letter.refresh_from_db()
    return dead_letter


def discard(dead_letter: DeadLetter, *, by, reason: str) -> DeadLetter:
    """Close the entry without running anything; the step stays DEAD_LETTERED."""
    _check_operator(by, dead_letter)
    reason = clean_reason(reason)
    with transaction.atomic():
        closed = DeadLetter.objects.filter(pk=dead_letter.pk, status=DeadLetter.Status.OPEN).update(
            status=DeadLetter.Status.DISCARDED,
            resolved_at=timezone.now(),
            resolved_by=by,
            resolution_reason=reason,
        )
        if not closed:
            raise WrongState("This dead letter was already resolved.")
        journal.append(
            actor=by,
            verb="dead_letter.discarded",
            obj_type="dead_letter",
            obj_id=dead_letter.pk,
            workflow_id=dead_letter.workflow_id,
            data={"reason": reason},
        )
    dead_letter.refresh_from_db()
    return dead_letter


def matching(
    user=None, *, ids=None, action=None, failure_class=None, workflow=None, older_than=None, team=None, job=None
) -> QuerySet:
    """The open dead letters an explicit selection or filter chooses, never
    "everything": only those of `user`'s teams (None: the command line,
    every team). `job`: those a bulk job of the user's chose."""
    if not (ids or action or failure_class or workflow or older_than or team or job):
        raise DomainError("Choose dead letters by id or by a filter (action, failure class, workflow, age, team).")
    entries = (DeadLetter.objects.all() if user is None else DeadLetter.objects.visible_to(user)).open()
    entries = entries.chosen(
        ids=ids, action=action, failure_class=failure_class, workflow=workflow, older_than=older_than, team=team
    )
    if job:
        jobs = Job.objects.all() if user is None else Job.objects.visible_to(user)
        entries = entries.filter(pk__in=JobItem.objects.filter(job__in=jobs.filter(pk=job)).values("dead_letter_id"))
    return entries.order_by("created_at", "id")


def select(user=None, **chosen) -> QuerySet:
    """`matching`, at most MAX_BULK of them (a replay in one request)."""
    return matching(user, **chosen)[:MAX_BULK]


def settle_applied(dead_letter: DeadLetter, found: Outcome, *, by, reason: str) -> DeadLetter:
    """A reconciliation's lookup found that the effect happened: record the
    outcome found as if the call had answered, complete the step and close
    the entry as APPLIED, audited, without running anything again. The
    caller has checked the outcome with the action's verify()."""
    _check_operator(by, dead_letter)
    reason = clean_reason(reason)
    now = timezone.now()
    with transaction.atomic():
        closed = DeadLetter.objects.filter(pk=dead_letter.pk, status=DeadLetter.Status.OPEN).update(
            status=DeadLetter.Status.APPLIED, resolved_at=now, resolved_by=by, resolution_reason=reason
        )
        if not closed:
            raise WrongState("This dead letter was already resolved.")
        step = Step.objects.select_for_update(of=("self",)).select_related("workflow").get(pk=dead_letter.step_id)
        if step.status != StepStatus.DEAD_LETTERED:
            raise WrongState(f"The step is {step.status}, no longer dead-lettered.")
        external_ref = redact_text(found.external_ref)[:200]
        context = {"dead_letter": str(dead_letter.pk), "reason": reason}
        evidence = {**context, "operation_key": step.operation_key, "external_ref": external_ref}
        for attempt in step.attempts.filter(status__in=[AttemptStatus.REQUESTED, AttemptStatus.UNKNOWN]):
            move(
                attempt,
                AttemptStatus.RECONCILED,
                actor=by,
                verb="attempt.reconciled",
                finished_at=attempt.finished_at or now,
                data={"found": True, "external_ref": external_ref},
            )
        move(
            step,
            StepStatus.VERIFYING,
            actor=by,
            verb="step.reconciled",
            result=redact(found.result),
            external_ref=external_ref,
            failure_class="",
            data=evidence,
        )
        move(step, StepStatus.COMPLETE, actor=by, lease_expires_at=None, data={"verified_by": "reconciliation lookup"})
        Step.objects.ready_after([step])
        journal.append(
            actor=by,
            verb="dead_letter.applied",
            obj_type="dead_letter",
            obj_id=dead_letter.pk,
            workflow_id=dead_letter.workflow_id,
            data=evidence,
        )
        workflow = Workflow.objects.select_for_update().get(pk=step.workflow_id)
        if step.lane:
            compensation.resume(workflow, step, by=by, **context)
            compensating.step_complete(workflow, step)
            queue.wake(workflow)
        elif workflow.status == WorkflowStatus.FAILED:
            move(workflow, WorkflowStatus.RUNNING, actor=by, verb="workflow.resumed", data=context)
            if workflow.steps.filter(lane=0).exclude(status__in=FINISHED_STEP).exists():
                queue.wake(workflow)
            else:
                move(workflow, WorkflowStatus.COMPLETE, actor=by)
    dead_letter.refresh_from_db()
    return dead_letter


def replay_many(entries, *, by, reason: str) -> tuple[list[DeadLetter], list[tuple[DeadLetter, str]]]:
    """Replay each selected entry; report which were refused and why."""
    _check_operator(by)
    reason = clean_reason(reason)
    done, refused = [], []
    for entry in entries:
        try:
            done.append(replay(entry, by=by, reason=reason))
        except DomainError as exc:
            refused.append((entry, exc.message))
    return done, refused
