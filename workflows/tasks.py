"""django-q2 entry points: thin, idempotent, ids only.

The queue only says "look now"; each task re-reads the database and does
just what is due, so duplicated or late deliveries are harmless.
"""

from workflows import telemetry
from workflows.chat import slack
from workflows.engine import execution, previews
from workflows.operations import bulk, chat_decisions, delegation, grants, notifications
from workflows.webhooks import delivery


def run_workflow(workflow_id: str, trace: dict | None = None) -> int:
    """A wake-up for one workflow drains everything due, that workflow's
    steps among them: steps are claimed in batches across workflows, so a
    burst of approvals runs in shared commits rather than one plan at a time.
    `trace`: the W3C trace context of the approval that woke it, if traced."""
    with telemetry.continuing(workflow_id, trace):
        return execution.drain()


def drain() -> int:
    return execution.drain()


def notify_reviewers(workflow_id: str) -> int:
    return notifications.notify_reviewers(workflow_id)


def send_review_notices() -> int:
    return notifications.send_due()


def end_lapsed_delegations() -> int:
    return delegation.end_lapsed()


def expire_lapsed_grants() -> int:
    return grants.expire_lapsed()


def compute_due_previews() -> int:
    """The previews of every plan that has some due (`previews.compute_due`)."""
    return previews.compute_due()


def compute_previews(workflow_id: str) -> int:
    """One plan's previews: what submissions queued before previews were
    due rows (`Workflow.previews_due_at`); such tasks may still be queued."""
    return previews.compute(workflow_id)


def deliver_webhooks() -> int:
    return delivery.deliver_due()


def send_chat() -> int:
    """Post and update the Slack messages due (workflows.chat.slack): its
    own task, so that Slack's pace never holds a step or a request."""
    return slack.send_due()


def advance_job(job_id: str, batch: int) -> int:
    """One batch of a bulk reconcile or replay; the batch queues the next."""
    return bulk.advance(job_id, batch)


def decide_slack_click(signature_id: int, interaction: dict) -> str:
    """A Slack click, verified and acknowledged by the web process, decided
    here (docs/explanation/chat-decisions.md#chat-decisions)."""
    return chat_decisions.decide(signature_id, interaction)
