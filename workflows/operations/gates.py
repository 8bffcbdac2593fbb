"""Reviewers' decisions at a gate (DESIGN §22): approve, once per reviewer,
binding the results of the steps before the gate they were shown; the run
goes on once the gate's approvals are in. Reject: the workflow ends
REJECTED, and its completed steps can then be compensated through the
usual authorized path. The submitter never decides their own plan's gates.
"""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.utils import timezone

from workflows import roles
from workflows.audit import journal
from workflows.audit.redaction import refuse_credentials
from workflows.engine import binding, gates, locks, wakeups
from workflows.engine.transitions import move
from workflows.errors import NotAllowed, WrongState
from workflows.models import GateApproval, Step, Workflow
from workflows.operations import approvals
from workflows.states import StepStatus, WorkflowStatus


class ResultsChanged(WrongState):
    """The results before the gate are no longer those the reviewer was shown."""

    code = "results_changed"


def _check_reviewer(workflow: Workflow, user, *, approving: bool = False) -> None:
    if not roles.is_reviewer(user):
        raise NotAllowed("Only reviewers decide at a gate.")
    workflow.require_visible_to(user)
    if workflow.submitted_by_id == user.pk:
        raise NotAllowed("A plan's gates cannot be decided by the user who submitted it.")
    if approving:
        approvals.check_reviewer_groups(workflow, user, "approve a gate of")


def _waiting(workflow_id, step_key: str) -> tuple[Workflow, Step]:
    """Inside a transaction: the plan's rows locked (`locks`), and the gate's
    step, which must be the one the workflow waits at."""
    locked = locks.plan(workflow_id)
    step = locked.steps.filter(key=step_key, lane=0).first()
    if step is None or not step.gate:
        raise WrongState(f"This plan has no gate at step {step_key!r}.")
    if locked.status != WorkflowStatus.WAITING_GATE or step.status != StepStatus.WAITING_GATE:
        raise WrongState(f"The workflow is {locked.status} and step {step_key} is {step.status}: "
                         "it is not waiting at this gate.")
    return locked, step


def _record(workflow: Workflow, step: Step, by, decision: str, comment: str, shown: str | None) -> GateApproval:
    digest = gates.results_digest(step)
    if shown is not None and shown != digest:
        raise ResultsChanged("The results before this gate changed since you looked: look again, then decide.")
    approval = binding.seal(GateApproval(workflow=workflow, step=step, reviewer=by, decision=decision,
                                         comment=comment, plan_hash=workflow.plan_hash, results_digest=digest,
                                         created_at=timezone.now()))
    try:
        with transaction.atomic():
            approval.save()
            return approval
    except IntegrityError:
        raise WrongState("You have already decided at this gate.") from None


def approve(workflow: Workflow, step_key: str, *, by, comment: str = "", results_digest: str | None = None) -> Workflow:
    """`results_digest`: that of the results the reviewer was shown
    (`gates.results_digest`); refused (409) when they changed since. None
    binds the current ones, for a client that shows none."""
    _check_reviewer(workflow, by, approving=True)
    refuse_credentials(comment=comment)
    with transaction.atomic():
        locked, step = _waiting(workflow.pk, step_key)
        _record(locked, step, by, GateApproval.Decision.APPROVE, comment, results_digest)
        have, need = len(gates.valid_approvals(step, locked)), gates.required(step)
        data = {"step": step.key, "comment": comment, "approvals": have, "required": need,
                "results_digest": gates.results_digest(step)}
        if have < need:
            journal.append(actor=by, verb="gate.approval_recorded", obj_type="step", obj_id=step.pk,
                           workflow_id=locked.pk, data=data)
            return locked
        now = timezone.now()
        move(step, StepStatus.PENDING, actor=by, verb="gate.opened", data=data, gate_opened_at=now,
             next_attempt_at=now)
        move(locked, WorkflowStatus.RUNNING, actor=by, verb="workflow.gate_approved", data=data)
        wakeups.wake(locked)
    return locked


def reject(workflow: Workflow, step_key: str, *, by, comment: str = "") -> Workflow:
    """The workflow ends REJECTED at the gate; the gated step never runs."""
    _check_reviewer(workflow, by)
    refuse_credentials(comment=comment)
    with transaction.atomic():
        locked, step = _waiting(workflow.pk, step_key)
        _record(locked, step, by, GateApproval.Decision.REJECT, comment, None)
        data = {"step": step.key, "comment": comment}
        move(step, StepStatus.PENDING, actor=by, verb="gate.rejected", data=data)
        move(locked, WorkflowStatus.REJECTED, actor=by, verb="workflow.rejected", data=data)
    return locked
