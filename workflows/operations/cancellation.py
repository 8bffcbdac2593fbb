"""Cancelling a plan: by its submitter before anyone approved it, by an
operator once it was approved.

A cancel stops the run where it stands. No step starts after it: claims
take only steps of approved or running workflows, and the recheck before
every attempt refuses a cancelled workflow's steps. An effect already in
flight is not abandoned: its worker records the outcome under its claim's
fence. The steps that completed can then be compensated.
"""

from django.db import transaction

from workflows import roles
from workflows.engine import gatekeeper, locks
from workflows.engine.transitions import move
from workflows.errors import NotAllowed, WrongState
from workflows.models import Step, Workflow
from workflows.reasons import clean_reason
from workflows.states import StepStatus, WorkflowStatus

# Once approved, only an operator stops a plan.
BY_OPERATOR = (
    WorkflowStatus.APPROVED,
    WorkflowStatus.RUNNING,
    WorkflowStatus.FAILED,
    WorkflowStatus.NEEDS_ATTENTION,
    WorkflowStatus.WAITING_GATE,
)
CANCELLABLE = (WorkflowStatus.PLANNED, *BY_OPERATOR)


def may_cancel(workflow: Workflow, user) -> bool:
    """Whether `user` may cancel the workflow as it stands (for the pages)."""
    if not workflow.is_visible_to(user):
        return False
    if workflow.status == WorkflowStatus.PLANNED:
        return workflow.submitted_by_id == user.pk
    return workflow.status in BY_OPERATOR and roles.is_operator(user)


def cancel(workflow: Workflow, *, by, reason: str) -> Workflow:
    workflow.require_visible_to(by)
    reason = clean_reason(reason)
    with transaction.atomic():
        # Every forward step first, then the workflow (`locks`): an attempt
        # being requested holds its step, so the cancel waits for it (its
        # effect is then in flight, and listed), and an attempt requested
        # after the cancel commits reads the workflow as CANCELLED.
        locked = locks.plan(workflow.pk)
        if locked.status not in CANCELLABLE:
            raise WrongState(f"A {locked.status} workflow cannot be cancelled.")
        if not may_cancel(locked, by):
            if locked.status == WorkflowStatus.PLANNED:
                raise NotAllowed("Before approval, only the plan's submitter can cancel it; reviewers reject it.")
            raise NotAllowed("Once approved, only operators can cancel a plan.")
        in_flight = sorted(
            Step.objects.filter(
                workflow=locked, lane=0, status__in=[StepStatus.RUNNING, StepStatus.VERIFYING]
            ).values_list("key", flat=True)
        )
        was = locked.status
        move(
            locked,
            WorkflowStatus.CANCELLED,
            actor=by,
            verb="workflow.cancelled",
            data={"reason": reason, "in_flight": in_flight},
        )
        if was == WorkflowStatus.WAITING_GATE:
            gatekeeper.leave(locked, by, "gate.closed", {"reason": "the workflow was cancelled"})
    return locked
