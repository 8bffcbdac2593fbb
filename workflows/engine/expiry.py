"""Plans whose deadline passed before enough approvals: EXPIRED, by the
worker loop's sweep or when a reviewer tries to approve one too late."""

from django.db import transaction

from workflows.engine import gatekeeper, locks
from workflows.engine.transitions import move
from workflows.models import Workflow
from workflows.states import WorkflowStatus

AT_GATE = "the workflow's deadline passed while it waited at a gate"


def expire_overdue(limit: int = 200) -> int:
    """PLANNED plans whose deadline passed can no longer be approved, and
    workflows waiting at a gate past it no longer go on: EXPIRED."""
    from django.utils import timezone

    expired = 0
    overdue = Workflow.objects.awaiting_review().filter(deadline__lte=timezone.now()).order_by("deadline")[:limit]
    for workflow in overdue:
        with transaction.atomic():
            expired += int(
                move(
                    workflow,
                    WorkflowStatus.EXPIRED,
                    actor="system",
                    data={"reason": "the plan's deadline passed before enough approvals"},
                )
            )
    at_gate = Workflow.objects.filter(status=WorkflowStatus.WAITING_GATE, deadline__lte=timezone.now())
    for workflow in at_gate.order_by("deadline")[:limit]:
        with transaction.atomic():
            locked = locks.plan(workflow.pk)
            if locked.status == WorkflowStatus.WAITING_GATE and move(
                locked, WorkflowStatus.EXPIRED, actor="system", data={"reason": AT_GATE}
            ):
                gatekeeper.leave(locked, "system", "gate.closed", {"reason": AT_GATE})
                expired += 1
    return expired


def expire_one(workflow: Workflow) -> bool:
    from django.utils import timezone

    if workflow.deadline > timezone.now():
        return False
    with transaction.atomic():
        return move(
            workflow,
            WorkflowStatus.EXPIRED,
            actor="system",
            data={"reason": "the plan's deadline passed before enough approvals"},
        )
