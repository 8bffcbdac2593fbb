"""Deciding a Slack click, in a worker (docs/explanation/chat-decisions.md#chat-decisions):
as the account the Slack user is linked to, through the console's own
operations and so its checks (`deciding`: revision, hash and digests from
the button, eligibility, team, four eyes by person), then telling the
clicker on the interaction's `response_url`: the outcome in the channel,
a refusal to them alone (ephemeral) with the reason the operation gave.

A click decides at most once: its signature's row is locked and marked
handled in the decision's transaction, so a task taken twice does nothing
the second time.
"""

from __future__ import annotations

import logging
from urllib.parse import urljoin

from django.conf import settings
from django.db import transaction
from django.urls import reverse
from django.utils import timezone
from slack_sdk.webhook import WebhookClient

from workflows.audit import identity
from workflows.chat import buttons
from workflows.chat.buttons import Click
from workflows.engine import policy
from workflows.errors import DomainError, PreviewChanged, StaleRevision
from workflows.models import Compensation, SlackSignature, Workflow
from workflows.operations import approvals, chat_links, compensation, gates
from workflows.operations.chat_clicks import Interaction, trusted_response_url

log = logging.getLogger(__name__)

DONE = {
    ("plan", True): "approved",
    ("plan", False): "rejected",
    ("gate", True): "approved the gate of",
    ("gate", False): "rejected the gate of",
    ("compensation", True): "authorized the compensation of",
}


def decide(signature_id: int, interaction: dict) -> str:
    """The worker task's body: decide the click once and answer on its
    `response_url`. What was answered (for the task's result)."""
    click_in = Interaction(**interaction)
    with transaction.atomic():
        row = SlackSignature.objects.select_for_update().filter(pk=signature_id, handled_at=None).first()
        if row is None:
            return "handled already"
        answer = _answer(click_in)
        SlackSignature.objects.filter(pk=row.pk).update(handled_at=timezone.now())
    respond(click_in.response_url, *answer)
    return answer[1]


def _answer(interaction: Interaction) -> tuple[bool, str]:
    """(in the channel?, text): the decision made, or why not."""
    try:
        click = buttons.decision(interaction.action_id, interaction.value)
    except PreviewChanged as exc:
        return False, f"Nothing was decided: {exc}"
    user = chat_links.linked_user(interaction.team, interaction.slack_user)
    if user is None:
        token = chat_links.make_token(interaction.team, interaction.slack_user, interaction.slack_name)
        return False, (
            "Nothing was decided: your Slack user is not linked to a console account yet. "
            f"<{chat_links.url(token)}|Link it in the console> (sign in there and confirm; the link works "
            "once, for 10 minutes), then click again."
        )
    if not user.is_active:
        return False, "Nothing was decided: the console account your Slack user is linked to is deactivated."
    if click.kind == "compensation" and not click.approving:
        return False, (
            "Nothing was decided: declining a compensation needs your reason. "
            f"<{_open_url(click)}|Decline it in the console>."
        )
    if not _chat_decisions_allowed(click):
        return False, (
            "Nothing was decided: this plan's action policy keeps its decisions in the console "
            f"(chat_decisions is off). <{_open_url(click)}|Open it in the console>."
        )
    previous = identity.begin(
        identity.Requester(
            username=user.get_username(), subject=interaction.slack_user, issuer=f"slack:{interaction.team}"
        )
    )
    try:
        name = _run(click, user)
    except StaleRevision as exc:
        return False, f"{_escape(exc.message)} <{_open_url(click)}|Open it in the console>."
    except DomainError as exc:
        return False, f"Nothing was decided: {_escape(exc.message)}"
    except Compensation.DoesNotExist:
        return False, "Nothing was decided: no such compensation."
    finally:
        identity.end(previous)
    return True, f"<@{interaction.slack_user}> {DONE[(click.kind, click.approving)]} “{_escape(name)}” in Slack."


def _run(click: Click, user) -> str:
    """The console's own operation for the click, as `user`; the plan's name."""
    if click.kind == "compensation":
        comp = compensation.authorize(click.compensation_id, by=user, seen=click.seen)
        return Workflow.objects.get(pk=comp.workflow_id).name
    if click.kind == "gate":
        decide_gate = gates.approve if click.approving else gates.reject
        return decide_gate(click.workflow_id, click.step_key, by=user, seen=click.seen).name
    decide_plan = approvals.approve if click.approving else approvals.reject
    return decide_plan(click.workflow_id, by=user, seen=click.seen).name


def _chat_decisions_allowed(click: Click) -> bool:
    """False when an action policy of the plan sets `chat_decisions: false`."""
    workflow_id = click.workflow_id
    if workflow_id is None:
        workflow_id = (
            Compensation.objects.filter(pk=click.compensation_id).values_list("workflow_id", flat=True).first()
        )
    workflow = Workflow.objects.filter(pk=workflow_id).first()
    if workflow is None:
        return True  # the operation answers "no such plan"
    found = policy.policies_for({step["action"] for step in workflow.plan}).values()
    return policy.chat_decisions(found)


def _open_url(click: Click) -> str:
    if click.kind == "compensation":
        path = reverse("compensation_detail", kwargs={"compensation_id": click.compensation_id})
    else:
        path = reverse("workflow_detail", kwargs={"workflow_id": click.workflow_id})
    return urljoin(settings.CONSOLE_URL, path)


def _escape(text: str) -> str:
    """Untrusted text (a plan's name, a message quoting it) as Slack
    mrkdwn shows it literally: no link, mention or markup of its own."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def respond(response_url: str, in_channel: bool, text: str) -> None:
    """Post to the interaction's `response_url` (only a trusted one: checked
    again here, whatever queued the task). Slack's answer is logged, never
    raised: the decision stands either way."""
    if not trusted_response_url(response_url):
        log.warning("slack click: response_url not on a trusted host, not called")
        return
    body = {"text": text, "response_type": "in_channel" if in_channel else "ephemeral", "replace_original": False}
    try:
        answer = WebhookClient(response_url, timeout=10).send_dict(body)
    except Exception as exc:  # noqa: BLE001 (a network failure of any kind: the decision stands)
        log.warning("slack click: response_url failed: %s", exc)
        return
    if answer.status_code != 200:
        log.warning("slack click: response_url answered %s", answer.status_code)
