"""Marking chat messages as wanting a post or an update, in the
transaction of the change they will show (like `workflows.outbox`): a
message is sent if and only if its change committed, and only after.

The engine and the operations call down into this module; the sending
(`workflows.chat.slack`) runs in the `workflows.tasks.send_chat` task.
Nothing here calls Slack, and with Slack off (no SLACK_BOT_TOKEN) nothing
here touches a table.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db.models import F

from workflows import queue
from workflows.models import ChatMessage, Team, Workflow
from workflows.states import WorkflowStatus

log = logging.getLogger(__name__)

TASK = "workflows.tasks.send_chat"
# The moves of a plan that change what its messages show: a decision, a
# gate opening or closing, expiry, cancellation.
SHOWN_MOVES = frozenset(
    {
        WorkflowStatus.APPROVED,
        WorkflowStatus.REJECTED,
        WorkflowStatus.EXPIRED,
        WorkflowStatus.CANCELLED,
        WorkflowStatus.WAITING_GATE,
    }
)
# Teams found without a channel, logged once per process.
_unposted_teams: set[str] = set()


def enabled() -> bool:
    return bool(settings.SLACK_BOT_TOKEN)


def opened(workflow: Workflow | object, kind: str, key: str = "") -> bool:
    """A new decision waits (a plan entering the inbox, a gate, a
    compensation to authorize): its message is to be posted to the team's
    channel. Returns whether one will be."""
    if not enabled():
        return False
    workflow_id, team_id = _keys(workflow)
    team = Team.objects.filter(pk=team_id).values_list("name", flat=True).first()
    channel = settings.SLACK_CHANNELS.get(team)
    if not channel:
        if team not in _unposted_teams:
            _unposted_teams.add(team)
            log.info("team %s has no channel in SLACK_CHANNELS: its plans are not posted to Slack", team)
        return False
    message, created = ChatMessage.objects.get_or_create(
        workflow_id=workflow_id, kind=kind, key=key, defaults={"channel": channel}
    )
    if not created:
        ChatMessage.objects.filter(pk=message.pk).update(version=F("version") + 1)
    queue_send()
    return True


def changed(workflow_ids) -> int:
    """What these plans' messages show changed (a decision, a revision,
    previews, a gate's or a compensation's state): each is updated."""
    if not enabled():
        return 0
    bumped = ChatMessage.objects.filter(workflow_id__in=list(workflow_ids)).update(version=F("version") + 1)
    if bumped:
        queue_send()
    return bumped


def workflows_moved(workflow_ids, current: str, target: str) -> int:
    """From `transitions.move`: the moves people see in a message."""
    if target in SHOWN_MOVES or current == WorkflowStatus.WAITING_GATE:
        return changed(workflow_ids)
    return 0


def _keys(workflow) -> tuple:
    if isinstance(workflow, Workflow):
        return workflow.pk, workflow.team_id
    return workflow, Workflow.objects.filter(pk=workflow).values_list("team_id", flat=True).get()


def queue_send() -> None:
    """Ask a worker to send the pending messages (`workflows.tasks.send_chat`)."""
    queue.enqueue(TASK, name="chat messages")
