"""Clicks as Slack sends them: a `block_actions` payload shaped like
Slack's, form-encoded in the field `payload`, signed v0 exactly as Slack
signs (HMAC-SHA256 of `v0:{timestamp}:{raw body}` under the signing
secret), posted over HTTP to /chat/slack/interactions/."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from urllib.parse import urlencode

import requests

from tests.support.slack import SIGNING_SECRET, TEAM_ID
from workflows.chat import buttons
from workflows.models import Workflow

PATH = "/chat/slack/interactions/"


def plan_value(workflow: Workflow) -> str:
    """The value of a plan's Approve / Reject, as a message posted now shows
    it (`workflows.chat.buttons`)."""
    fresh = Workflow.objects.get(pk=workflow.pk)
    return buttons.plan_value(fresh, list(fresh.steps.all()))


def gate_value(workflow: Workflow, step_key: str) -> str:
    fresh = Workflow.objects.get(pk=workflow.pk)
    return buttons.gate_value(fresh, fresh.steps.get(lane=0, key=step_key))


def compensation_value(comp) -> str:
    return buttons.compensation_value(comp)


def payload(action_id: str, value: str, *, response_url: str, user: str = "U0REVIEWER", team: str = TEAM_ID) -> dict:
    """A block_actions payload as Slack posts it for a button click."""
    return {
        "type": "block_actions",
        "team": {"id": team, "domain": "standin"},
        "user": {"id": user, "username": user.lower(), "name": user.lower(), "team_id": team},
        "api_app_id": "A0STANDIN",
        "token": "deprecated-verification-token",
        "container": {"type": "message", "message_ts": "1.000001", "channel_id": "C0DEFAULT", "is_ephemeral": False},
        "trigger_id": "1.2.abc",
        "channel": {"id": "C0DEFAULT", "name": "reviews"},
        "message": {"type": "message", "ts": "1.000001", "text": "A plan waits for review"},
        "response_url": response_url,
        "actions": [
            {
                "action_id": action_id,
                "block_id": "decide",
                "text": {"type": "plain_text", "text": action_id},
                "value": value,
                "type": "button",
                "action_ts": f"{time.time():.6f}",
            }
        ],
    }


def signed(body: bytes, *, timestamp: int | None = None, secret: str = SIGNING_SECRET) -> dict[str, str]:
    timestamp = int(time.time()) if timestamp is None else timestamp
    base = f"v0:{timestamp}:".encode() + body
    signature = "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return {
        "X-Slack-Request-Timestamp": str(timestamp),
        "X-Slack-Signature": signature,
        "Content-Type": "application/x-www-form-urlencoded",
    }


def body_of(data: dict | str) -> bytes:
    return urlencode({"payload": data if isinstance(data, str) else json.dumps(data)}).encode()


def click(base_url: str, data: dict | str, *, headers: dict | None = None, **signing) -> requests.Response:
    """POST one click, signed as Slack signs it (or with `headers` as given)."""
    body = body_of(data)
    return requests.post(base_url + PATH, data=body, headers=headers or signed(body, **signing), timeout=30)
