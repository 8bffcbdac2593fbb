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
    list(
        Step.objects.select_for_update()
        .filter(workflow_id=workflow_id, lane=0)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    found = Workflow.objects.select_for_update().filter(pk=workflow_id).first()
    if found is None:
        raise NotVisible("No such workflow.")
    return found
