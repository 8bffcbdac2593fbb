"""A click in Slack, received (docs/explanation/chat-decisions.md#chat-decisions):
verified as Slack's (v0 signature over the request timestamp, within the
window, never seen before, from the one workspace), read into what it asks
for, and queued for a worker in the request's transaction. Nothing is
decided here: `chat_decisions` decides in the worker, with the console's
checks.

Every refusal is a `ClickRefused` with the HTTP status Slack is answered
with and a message saying why; a refused click writes nothing.
"""

from __future__ import annotations

import hmac
import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone
from slack_sdk.signature import SignatureVerifier

from workflows import queue
from workflows.chat import buttons
from workflows.errors import DomainError
from workflows.models import SlackSignature

# A request older than this is refused (Slack's own advice), and so is one
# dated further ahead than clocks drift apart.
WINDOW = timedelta(minutes=5)
SKEW = timedelta(minutes=1)
# A signature row whose click never reached a worker leaves after this.
FORGOTTEN = timedelta(days=1)
HOOKS_HOST = "hooks.slack.com"

PLAN_ACTIONS = {"approve": True, "reject": False}
GATE_ACTIONS = {"gate_approve": True, "gate_reject": False}
COMPENSATION_ACTIONS = {"comp_authorize": True, "comp_decline": False}
OPEN = "open"


class ClickRefused(DomainError):
    code = "refused"

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


def parse_button(action_id: str, raw: str) -> None:
    """Check a decision button's `value` before the click is acknowledged:
    one of the values `workflows.chat.buttons` writes
    (docs/guides/slack-admins.md#button-values) for this action. ValueError
    for anything else; the worker reads it again against what stands
    (`buttons.decision`)."""
    if action_id not in {**PLAN_ACTIONS, **GATE_ACTIONS, **COMPENSATION_ACTIONS}:
        raise ValueError(f"not a decision button: {action_id!r}")
    value = buttons.parse_button_value(raw)
    if ("c" in value) != (action_id in COMPENSATION_ACTIONS) or ("s" in value) != (action_id in GATE_ACTIONS):
        raise ValueError("the button's value does not match its action")


@dataclass(frozen=True)
class Interaction:
    """The parts of Slack's `block_actions` payload a decision uses, as the
    worker task receives them (plain JSON)."""

    team: str
    slack_user: str
    slack_name: str
    action_id: str
    value: str
    response_url: str

    def as_task(self) -> dict:
        return dict(vars(self))


def verify(body: bytes, timestamp: str | None, signature: str | None, *, now: float | None = None) -> datetime:
    """401 unless the request is signed with SLACK_SIGNING_SECRET (v0,
    as slack_sdk's SignatureVerifier computes it) and dated within the
    window. The request's time."""
    now = time.time() if now is None else now
    try:
        sent = int(timestamp or "")
    except ValueError:
        raise ClickRefused("X-Slack-Request-Timestamp is missing or not a number of seconds.", 401) from None
    if sent < now - WINDOW.total_seconds():
        raise ClickRefused("The request is older than 5 minutes: refused as a possible replay.", 401)
    if sent > now + SKEW.total_seconds():
        raise ClickRefused("The request is dated in the future: refused.", 401)
    expected = SignatureVerifier(settings.SLACK_SIGNING_SECRET).generate_signature(timestamp=str(sent), body=body)
    if not signature or not _same(expected, signature):
        raise ClickRefused("The X-Slack-Signature does not match: this request was not signed by Slack.", 401)
    return datetime.fromtimestamp(sent, tz=UTC)


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode("utf-8", "replace"))


def read(payload: str | None) -> Interaction:
    """400 unless `payload` is a `block_actions` payload with one action;
    403 unless its workspace is SLACK_TEAM_ID."""
    try:
        data = json.loads(payload or "")
    except ValueError:
        raise ClickRefused("The form field payload is missing or not JSON.", 400) from None
    if not isinstance(data, dict) or data.get("type") != "block_actions":
        raise ClickRefused("Only block_actions interactions (button clicks) are accepted here.", 400)
    team, user, actions = data.get("team"), data.get("user"), data.get("actions")
    if not (isinstance(team, dict) and isinstance(team.get("id"), str)):
        raise ClickRefused("The payload names no workspace (team.id).", 400)
    if not (isinstance(user, dict) and isinstance(user.get("id"), str) and 0 < len(user["id"]) <= 32):
        raise ClickRefused("The payload names no Slack user (user.id).", 400)
    if not (isinstance(actions, list) and len(actions) == 1 and isinstance(actions[0], dict)):
        raise ClickRefused("The payload must carry exactly one action.", 400)
    if team["id"] != settings.SLACK_TEAM_ID:
        raise ClickRefused("This console accepts clicks from its own Slack workspace only.", 403)
    action = actions[0]
    action_id, value, response_url = action.get("action_id"), action.get("value", ""), data.get("response_url")
    if not isinstance(response_url, str) or not isinstance(value, str):
        raise ClickRefused("The payload's response_url and the action's value must be text.", 400)
    if action_id != OPEN:
        try:
            parse_button(action_id, value)
        except (ValueError, TypeError) as exc:
            raise ClickRefused(f"The button's value is not one of ours: {exc}.", 400) from None
        if not trusted_response_url(response_url):
            raise ClickRefused("The response_url is not on Slack's hooks host: refused, never called.", 400)
    name = user.get("username") or user.get("name") or ""
    return Interaction(team["id"], user["id"], str(name)[:80], action_id, value, response_url)


def trusted_response_url(url: str) -> bool:
    """A `response_url` is called only on Slack's hooks host (https) or on
    the scheme, host and port of SLACK_API_URL (a stand-in, a proxy): it is a
    trusted destination, outside the rules for plans' outbound URLs."""
    try:
        parts, api = urlsplit(url), urlsplit(settings.SLACK_API_URL)
        port, api_port = parts.port, api.port
    except ValueError:
        return False
    if parts.username is not None or parts.password is not None:
        return False
    if parts.scheme == "https" and parts.hostname == HOOKS_HOST and port in (None, 443):
        return True
    return (parts.scheme, parts.hostname, port) == (api.scheme, api.hostname, api_port) and bool(api.hostname)


def receive(interaction: Interaction, signature: str, sent_at: datetime) -> bool:
    """Accept a verified click once: its signature's row (401 for one seen
    before: the unique row decides between concurrent copies) and, for a
    decision button, the worker's task, in one transaction. Whether a
    decision was queued (Open decides nothing)."""
    now = timezone.now()
    with transaction.atomic():
        SlackSignature.objects.filter(
            Q(sent_at__lt=now - WINDOW - SKEW, handled_at__isnull=False) | Q(sent_at__lt=now - FORGOTTEN)
        ).delete()
        try:
            with transaction.atomic():
                row = SlackSignature.objects.create(
                    signature=signature[:80], sent_at=sent_at, handled_at=now if interaction.action_id == OPEN else None
                )
        except IntegrityError:
            raise ClickRefused("This request was received before: a signature is accepted once.", 401) from None
        if interaction.action_id == OPEN:
            return False
        queue.enqueue(
            "workflows.tasks.decide_slack_click",
            row.pk,
            interaction.as_task(),
            name=f"slack click {interaction.action_id} by {interaction.slack_user}",
        )
    return True
