"""Reviewers' decisions on plans. Four eyes: never the submitter's own."""

from django.db import transaction
from django_q.tasks import async_task

from workflows import roles
from workflows.errors import NotAllowed, WrongState
from workflows.models import Approval, Workflow
from workflows.states import WorkflowStatus
from workflows.transitions import move


def _check_reviewer(workflow: Workflow, user) -> None:
    if not roles.is_reviewer(user):
        raise NotAllowed("Only reviewers can decide on plans.")
    if workflow.submitted_by_id == user.pk:
        raise NotAllowed("A plan cannot be reviewed by the user who submitted it.")


def _locked_planned(workflow: Workflow) -> Workflow:
    locked = Workflow.objects.select_for_update().get(pk=workflow.pk)
    if locked.status != WorkflowStatus.PLANNED:
        raise WrongState(f"The workflow is {locked.status}, not awaiting review.")
    return locked


def approve(workflow: Workflow, *, by, comment: str = "") -> Workflow:
    _check_reviewer(workflow, by)
    with transaction.atomic():
        locked = _locked_planned(workflow)
        Approval.objects.create(
            workflow=locked, reviewer=by, decision=Approval.Decision.APPROVE, comment=comment,
            plan_hash=locked.plan_hash,
        )
        move(locked, WorkflowStatus.APPROVED, actor=by, verb="workflow.approved",
             data={"comment": comment, "plan_hash": locked.plan_hash})
        # With the ORM broker on the same database, this wake-up commits or
        # rolls back with the approval; the worker's sweep covers any broker.
        async_task("workflows.tasks.run_workflow", str(locked.pk), task_name=f"run {locked.pk}")
    return locked


def reject(workflow: Workflow, *, by, comment: str = "") -> Workflow:
    _check_reviewer(workflow, by)
    with transaction.atomic():
        locked = _locked_planned(workflow)
        Approval.objects.create(
            workflow=locked, reviewer=by, decision=Approval.Decision.REJECT, comment=comment,
            plan_hash=locked.plan_hash,
        )
        move(locked, WorkflowStatus.REJECTED, actor=by, verb="workflow.rejected", data={"comment": comment})
    return locked
