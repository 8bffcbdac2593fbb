"""The one order in which transactions lock a plan's rows, so that none
deadlocks with another: step rows first, in id order; then the workflow's
row; then the audit heads (`journal.append`).

A worker holds its own steps (claimed with SKIP LOCKED, or locked to check
its fence) before it reads or moves their workflow. A decision on a whole
plan (an approval, a rejection, a cancel) or the previews stored for it
takes every forward step of the plan the same way before the workflow. So
a cancel waits for an attempt being requested and the attempt, which reads
the workflow's status only once it holds its step, sees a cancel that
committed first: no row lock on the workflow per attempt is needed.
"""

from workflows.errors import NotVisible
from workflows.models import Step, Workflow


def plan(workflow_id) -> Workflow:
    """Inside a transaction: lock the workflow's forward steps, then the
    workflow, and return the workflow as it now stands (404 if there is none)."""
    list(_forward_steps(workflow_id).values_list("pk", flat=True))
    return _workflow(workflow_id)


def plan_and_steps(workflow_id) -> tuple[Workflow, list[Step]]:
    """`plan`, for a caller that reads the forward steps anyway: the rows
    it locks come back whole, in the plan's order, read by the statement
    that locks them."""
    steps = list(_forward_steps(workflow_id))
    return _workflow(workflow_id), sorted(steps, key=lambda step: step.position)


def _forward_steps(workflow_id):
    return Step.objects.select_for_update().filter(workflow_id=workflow_id, lane=0).order_by("pk")


def _workflow(workflow_id) -> Workflow:
    found = Workflow.objects.select_for_update().filter(pk=workflow_id).first()
    if found is None:
        raise NotVisible("No such workflow.")
    return found
