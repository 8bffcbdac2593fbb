"""Reviewers' decisions on plans. Four eyes: never the submitter's own.

A plan runs once enough distinct reviewers approved it (the strictest
`approvals_required` among its actions). Every decision is sealed with the
audit key (`binding.seal`): only sealed approvals of the plan as stored
count. A step blocked by the policy recheck needs a fresh approval of the
same plan to go on.
"""

from django.db import transaction
from django.utils import timezone

from workflows import roles
from workflows.audit import journal
from workflows.audit.redaction import refuse_credentials
from workflows.engine import binding, expiry, policy, wakeups
from workflows.engine.transitions import move
from workflows.errors import NotAllowed, WrongState
from workflows.models import Approval, Step, Workflow
from workflows.states import StepStatus, WorkflowStatus


def _check_reviewer(workflow: Workflow, user) -> None:
    if not roles.is_reviewer(user):
        raise NotAllowed("Only reviewers can decide on plans.")
    if workflow.submitted_by_id == user.pk:
        raise NotAllowed("A plan cannot be reviewed by the user who submitted it.")


def approve(workflow: Workflow, *, by, comment: str = "") -> Workflow:
    _check_reviewer(workflow, by)
    refuse_credentials(comment=comment)
    if workflow.status == WorkflowStatus.PLANNED and expiry.expire_one(workflow):
        raise WrongState("The plan's deadline passed: it expired before it was approved.")
    with transaction.atomic():
        locked = Workflow.objects.select_for_update().get(pk=workflow.pk)
        blocked = list(locked.steps.filter(status=StepStatus.BLOCKED, lane=0))
        if locked.status == WorkflowStatus.PLANNED:
            if Approval.objects.filter(workflow=locked, reviewer=by, plan_hash=locked.plan_hash).exists():
                raise WrongState("You have already decided on this plan.")
        elif not (locked.status == WorkflowStatus.FAILED and blocked):
            raise WrongState(f"The workflow is {locked.status}, not awaiting an approval.")
        binding.seal(Approval(workflow=locked, reviewer=by, decision=Approval.Decision.APPROVE, comment=comment,
                              plan_hash=locked.plan_hash)).save()
        plan_policies = [policy.policy_for(name) for name in {s["action"] for s in locked.plan}]
        required = max([p.approvals_required for p in plan_policies] + [1])
        have = len(policy.valid_approvals(locked, plan_policies))
        data = {"comment": comment, "plan_hash": locked.plan_hash, "approvals": have, "required": required}
        if have < required:
            journal.append(actor=by, verb="workflow.approval_recorded", obj_type="workflow", obj_id=locked.pk,
                         workflow_id=locked.pk, data=data)
            return locked
        if locked.status == WorkflowStatus.PLANNED:
            move(locked, WorkflowStatus.APPROVED, actor=by, verb="workflow.approved", data=data)
            first = locked.steps.filter(lane=0, status=StepStatus.PENDING).order_by("position").first()
            if first is not None:  # the first step is ready; each next one when the one before completes
                Step.objects.filter(pk=first.pk).update(next_attempt_at=timezone.now())
        else:
            _unblock(locked, blocked, by, data)
        wakeups.wake(locked)
    return locked


def _unblock(workflow: Workflow, blocked: list[Step], by, data: dict) -> None:
    for step in blocked:
        last = step.attempts.order_by("-number").values_list("number", flat=True).first() or 0
        move(step, StepStatus.PENDING, actor=by, verb="step.unblocked", failure_class="", retry_base=last,
             next_attempt_at=timezone.now(), data={"reason": "fresh approval"})
    move(workflow, WorkflowStatus.RUNNING, actor=by, verb="workflow.reapproved", data=data)


def reject(workflow: Workflow, *, by, comment: str = "") -> Workflow:
    _check_reviewer(workflow, by)
    refuse_credentials(comment=comment)
    with transaction.atomic():
        locked = Workflow.objects.select_for_update().get(pk=workflow.pk)
        if locked.status != WorkflowStatus.PLANNED:
            raise WrongState(f"The workflow is {locked.status}, not awaiting review.")
        binding.seal(Approval(workflow=locked, reviewer=by, decision=Approval.Decision.REJECT, comment=comment,
                              plan_hash=locked.plan_hash)).save()
        move(locked, WorkflowStatus.REJECTED, actor=by, verb="workflow.rejected", data={"comment": comment})
    return locked
