"""Plans whose deadline passed before enough approvals: EXPIRED, by the
worker loop's sweep or when a reviewer tries to approve one too late. A plan
whose review says `"on_expiry": "escalate"` is instead escalated, once, to
its `escalate_to` group with its deadline extended by `extend_seconds`; at
that second deadline it expires (docs/explanation/review.md#on-expiry)."""

from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from workflows import outbox
from workflows.audit import journal
from workflows.chat import marks as chat
from workflows.engine import gatekeeper, locks
from workflows.engine.transitions import move
from workflows.models import ReviewNotice, Workflow
from workflows.shapes import workflow_out
from workflows.states import WorkflowStatus

AT_GATE = "the workflow's deadline passed while it waited at a gate"
UNDECIDED = "the plan's deadline passed before enough approvals"


def expire_overdue(limit: int = 200) -> int:
    """PLANNED plans whose deadline passed can no longer be approved, and
    workflows waiting at a gate past it no longer go on: EXPIRED, or
    escalated once where their review asks for it. Returns how many expired."""
    now = timezone.now()
    expired = 0
    overdue = Workflow.objects.awaiting_review().filter(deadline__lte=now).order_by("deadline")[:limit]
    for workflow in overdue:
        with transaction.atomic():
            if not escalates(workflow, now):
                expired += int(_expire(workflow, now, UNDECIDED))
    at_gate = Workflow.objects.filter(status=WorkflowStatus.WAITING_GATE, deadline__lte=now)
    for workflow in at_gate.order_by("deadline")[:limit]:
        with transaction.atomic():
            locked = locks.plan(workflow.pk)
            if locked.status != WorkflowStatus.WAITING_GATE or escalates(locked, now):
                continue
            if _expire(locked, now, AT_GATE):
                gatekeeper.leave(locked, "system", "gate.closed", {"reason": AT_GATE})
                expired += 1
    return expired


def expire_one(workflow: Workflow) -> bool:
    """Expire a PLANNED plan (locked by the caller) whose deadline passed;
    False, changing nothing, when it has not, or when it escalates instead
    (its deadline then lies ahead and it can still be decided)."""
    now = timezone.now()
    if workflow.deadline > now:
        return False
    with transaction.atomic():
        return not escalates(workflow, now) and _expire(workflow, now, UNDECIDED)


def _expire(workflow: Workflow, now: datetime, reason: str) -> bool:
    # Guarded by the deadline read: a plan another cluster escalated
    # meanwhile has a later one, and does not expire.
    return move(workflow, WorkflowStatus.EXPIRED, actor="system", guard={"deadline__lte": now}, data={"reason": reason})


def escalates(workflow: Workflow, now: datetime) -> bool:
    """Whether `workflow`, past its deadline, goes to its escalation group
    rather than expiring: its review says `"on_expiry": "escalate"` and it
    was not escalated yet. The escalation is decided in the database, by a
    conditional update of the deadline as read: of two clusters sweeping at
    once, one updates the row and escalates; the other updates nothing and
    leaves the plan (its deadline now lies ahead) alone. The winner audits
    `workflow.escalated`, writes the notice its group is sent
    (`operations.notifications.send_due`, on the messages lane), emits the
    `workflow.escalated` webhook event the plan's agent and the team's
    endpoints get, and marks the plan's chat messages for an update, all in
    its transaction."""
    review = workflow.review if isinstance(workflow.review, dict) else {}
    if review.get("on_expiry") != "escalate" or workflow.escalated_at is not None:
        return False
    was = workflow.deadline
    deadline = was + timedelta(seconds=review["extend_seconds"])
    escalated = Workflow.objects.filter(
        pk=workflow.pk, status=workflow.status, escalated_at__isnull=True, deadline=was
    ).update(escalated_at=now, deadline=deadline, updated_at=now)
    if not escalated:
        return True  # another cluster escalated it (or it moved on) since it was read
    workflow.escalated_at, workflow.deadline, workflow.updated_at = now, deadline, now
    group = review["escalate_to"]
    # Due at the deadline that passed, about the one it was extended to; the
    # unique notice per due time is a second guarantee that the group is told once.
    ReviewNotice.objects.create(
        workflow=workflow, kind=ReviewNotice.Kind.ESCALATION, due_at=was, deadline=deadline, group=group, at_expiry=True
    )
    journal.append(
        actor="system",
        verb="workflow.escalated",
        obj_type="workflow",
        obj_id=workflow.pk,
        workflow_id=workflow.pk,
        data={
            "reason": AT_GATE if workflow.status == WorkflowStatus.WAITING_GATE else UNDECIDED,
            "escalate_to": group,
            "extend_seconds": review["extend_seconds"],
            "deadline_was": was.isoformat(),
            "deadline": deadline.isoformat(),
        },
    )
    escalation = {"escalate_to": group, "deadline_was": was, "deadline": deadline}
    outbox.emit("workflow.escalated", workflow.pk, {"escalation": escalation}, shape=workflow_out)
    chat.changed([workflow.pk])
    return True
