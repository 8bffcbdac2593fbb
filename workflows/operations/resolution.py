"""Operators settle steps whose outcome is in doubt, with evidence.

A step is IN_DOUBT when an effect may have happened and the system cannot
tell (no lookup, not idempotent, or verification failed). Only a person who
looked at the other system can say; their decision and reason are audited.
"""

from django.db import transaction
from django.utils import timezone

from workflows import roles
from workflows.audit.redaction import CredentialRefused, credential_fields, refuse_credentials
from workflows.engine import compensating, wakeups
from workflows.engine.transitions import move
from workflows.errors import DomainError, NotAllowed, ReasonRequired, WrongState
from workflows.models import Step, Workflow
from workflows.operations import compensation
from workflows.states import AttemptStatus, StepStatus, WorkflowStatus

HAPPENED = "happened"
NOT_HAPPENED = "not_happened"
# It happened, and it must be undone: record it, stop the run, and request a
# compensation that a reviewer still has to authorize.
COMPENSATE = "compensate"
DECISIONS = (HAPPENED, NOT_HAPPENED, COMPENSATE)


def resolve(step: Step, *, by, decision: str, reason: str, external_ref: str = "", result: dict | None = None) -> Step:
    """`happened`: record the operator's evidence and go on as if the call had
    answered. `not_happened`: put the step back in line (same operation key)."""
    if not roles.is_operator(by):
        raise NotAllowed("Only operators can resolve in-doubt steps.")
    step.workflow.require_visible_to(by)
    reason = (reason or "").strip()
    if not reason:
        raise ReasonRequired("A reason is required.")
    if decision not in DECISIONS:
        message = f"Decision must be one of {', '.join(DECISIONS)}."
        raise DomainError(message, fields={"decision": message})
    external_ref = (external_ref or "").strip()[:200]
    refuse_credentials(reason=reason, external_ref=external_ref)
    if refused := credential_fields(result or {}, "result"):
        raise CredentialRefused(refused)
    if decision in (HAPPENED, COMPENSATE) and not external_ref:
        message = "Say where it happened: the external reference is the evidence."
        raise DomainError(message, fields={"external_ref": message})
    with transaction.atomic():
        locked = Step.objects.select_for_update(of=("self",)).select_related("workflow").get(pk=step.pk)
        if locked.status != StepStatus.IN_DOUBT:
            raise WrongState(f"The step is {locked.status}, not in doubt.")
        if decision == COMPENSATE and locked.lane:
            raise DomainError("An undo step cannot itself be compensated; say whether it happened.")
        evidence = {"decision": decision, "reason": reason[:2000], "external_ref": external_ref}
        for attempt in locked.attempts.filter(status__in=[AttemptStatus.REQUESTED, AttemptStatus.UNKNOWN]):
            move(attempt, AttemptStatus.RECONCILED, actor=by, verb="attempt.resolved",
                 finished_at=attempt.finished_at or timezone.now(), data=evidence)
        workflow = Workflow.objects.select_for_update().get(pk=locked.workflow_id)
        if decision in (HAPPENED, COMPENSATE):
            move(locked, StepStatus.VERIFYING, actor=by, verb="step.resolved", external_ref=external_ref,
                 result=result if result else (locked.result or {"external_ref": external_ref}),
                 failure_class="", data=evidence)
            move(locked, StepStatus.COMPLETE, actor=by, verb="step.complete", lease_expires_at=None,
                 data={"verified_by": "operator evidence"})
            Step.objects.ready_after([locked])
        else:
            last = locked.attempts.order_by("-number").values_list("number", flat=True).first() or 0
            move(locked, StepStatus.PENDING, actor=by, verb="step.resolved", failure_class="", retry_base=last,
                 next_attempt_at=timezone.now(), data=evidence)
        if locked.lane:
            _resume_compensation(workflow, locked, by, decision, evidence)
        elif decision == COMPENSATE:
            if workflow.status == WorkflowStatus.NEEDS_ATTENTION:
                move(workflow, WorkflowStatus.FAILED, actor=by, verb="workflow.stopped", data=evidence)
            compensation.request(workflow, by=by, reason=reason)
        elif workflow.status == WorkflowStatus.NEEDS_ATTENTION:
            if not workflow.steps.filter(lane=0).exclude(status=StepStatus.COMPLETE).exists():
                move(workflow, WorkflowStatus.RUNNING, actor=by, verb="workflow.resumed", data=evidence)
                move(workflow, WorkflowStatus.COMPLETE, actor=by)
            elif not workflow.steps.filter(status=StepStatus.IN_DOUBT).exists():
                move(workflow, WorkflowStatus.RUNNING, actor=by, verb="workflow.resumed", data=evidence)
                wakeups.wake(workflow)
    locked.refresh_from_db()
    return locked


def _resume_compensation(workflow, step, by, decision, evidence) -> None:
    if step.compensation_run.steps.filter(status=StepStatus.IN_DOUBT).exists():
        return
    compensation.resume(workflow, step, by=by, **evidence)
    if decision == HAPPENED:
        compensating.step_complete(workflow, step)
    wakeups.wake(workflow)
