"""Sending the chat messages to Slack, in the worker task
`workflows.tasks.send_chat` only (never in a request or a step):
docs/guides/slack-admins.md#when-slack-is-slow-down-or-rate-limiting.

Each pending row (`ChatMessage.objects.due()`) is claimed by a conditional
update, rendered as its subject stands now (`blocks.render`), then posted
(no `ts` yet) or updated. The version rendered is recorded once Slack
answered; a change meanwhile leaves the row pending for the next pass.
Rows go oldest first, and a pause applies to all of them, so messages
catch up in order:

- 429: Slack's `Retry-After` is honoured for every pending row (`not_before`),
  and the task returns rather than sleeping in a worker;
- Slack unreachable (refused, timed out, 5xx): every pending row waits a
  back-off (doubling from one second, at most `MAX_BACKOFF`), nothing lost;
- Slack refuses the message (`ok: false`, e.g. `channel_not_found`): logged
  and recorded on the row; that state is not sent again.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from urllib.error import URLError

from django.conf import settings
from django.db.models import F, Q
from django.utils import timezone
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from workflows.chat import blocks, marks
from workflows.db import canonical_json, sha256_hex
from workflows.models import ChatMessage

log = logging.getLogger(__name__)

# How long a worker holds a row it is sending (a dead worker's row is
# taken again after this).
CLAIM = timedelta(seconds=60)
MAX_BACKOFF = 30.0
# One task sends for at most this long, then leaves the rest to the next
# (queued again at once, and by the worker loop's sweep).
BUDGET_SECONDS = 20.0
BATCH = 50
TIMEOUT_SECONDS = 10


class Pause(Exception):
    """Slack asked us to wait, or cannot be reached: stop this pass."""


def client() -> WebClient:
    return WebClient(token=settings.SLACK_BOT_TOKEN, base_url=settings.SLACK_API_URL, timeout=TIMEOUT_SECONDS)


def send_due(budget: float = BUDGET_SECONDS) -> int:
    """Post or update every message due, oldest first; the number sent."""
    if not marks.enabled():
        return 0
    slack, sent = client(), 0
    deadline = time.monotonic() + budget
    while time.monotonic() < deadline:
        ids = list(ChatMessage.objects.due().order_by("id").values_list("id", flat=True)[:BATCH])
        if not ids:
            return sent
        for pk in ids:
            message = _claim(pk)
            if message is None:
                continue
            if _behind(message):
                return sent
            try:
                sent += _send(slack, message)
            except Pause:
                return sent
    marks.queue_send()
    return sent


def _claim(pk) -> ChatMessage | None:
    now = timezone.now()
    if not ChatMessage.objects.due(now).filter(pk=pk).update(claimed_until=now + CLAIM):
        return None  # another worker took it, or it was sent meanwhile
    return ChatMessage.objects.get(pk=pk)


def _behind(message: ChatMessage) -> bool:
    """Whether another worker is sending an older message: this one then
    waits its turn (released), so that messages reach Slack in order. A
    sender takes the rows oldest first, so it reaches this one only once
    every older row is sent or held by another."""
    held = ChatMessage.objects.pending().filter(pk__lt=message.pk, claimed_until__gt=timezone.now())
    if not held.exists():
        return False
    ChatMessage.objects.filter(pk=message.pk).update(claimed_until=None)
    return True


def _send(slack: WebClient, message: ChatMessage) -> int:
    shown = blocks.render(message)
    digest = sha256_hex(canonical_json([shown.text, shown.blocks]))
    if message.ts and digest == message.sent_digest:
        _sent(message, message.ts, digest)
        return 0
    try:
        if message.ts:
            slack.chat_update(channel=message.channel, ts=message.ts, text=shown.text, blocks=shown.blocks)
            ts = message.ts
        else:
            answer = slack.chat_postMessage(
                channel=message.channel, text=shown.text, blocks=shown.blocks, unfurl_links=False, unfurl_media=False
            )
            ts = answer["ts"]
    except SlackApiError as exc:
        status = exc.response.status_code
        if status == 429:
            wait = _retry_after(exc.response.headers)
            log.warning("Slack rate-limits the console: waiting %s s before the next message", wait)
            _pause(message, wait, "ratelimited")
            raise Pause from None
        if status >= 500:
            _unreachable(message, f"HTTP {status}")
        error = exc.response.get("error", "unknown") if isinstance(exc.response.data, dict) else f"HTTP {status}"
        log.error("Slack refused the %s message %s: %s", message.kind, message.pk, error)
        ChatMessage.objects.filter(pk=message.pk).update(
            sent_version=message.version, claimed_until=None, last_error=error[:500]
        )
        return 0
    except (URLError, OSError, ValueError) as exc:
        _unreachable(message, str(exc))
    _sent(message, ts, digest)
    return 1


def _sent(message: ChatMessage, ts: str, digest: str) -> None:
    ChatMessage.objects.filter(pk=message.pk).update(
        ts=ts,
        sent_version=message.version,
        sent_digest=digest,
        sent_at=timezone.now(),
        claimed_until=None,
        failures=0,
        last_error="",
    )


def _retry_after(headers) -> float:
    raw = next((value for name, value in (headers or {}).items() if name.lower() == "retry-after"), "1")
    try:
        return max(1.0, float(raw))
    except ValueError:
        return 1.0


def _unreachable(message: ChatMessage, why: str):
    wait = min(MAX_BACKOFF, 2.0**message.failures)
    log.warning("Slack cannot be reached (%s): trying again in %s s", why, wait)
    ChatMessage.objects.filter(pk=message.pk).update(failures=F("failures") + 1)
    _pause(message, wait, why)
    raise Pause


def _pause(message: ChatMessage, seconds: float, why: str) -> None:
    """No message is sent before then: every pending row waits, so that
    they resume in order."""
    until = timezone.now() + timedelta(seconds=seconds)
    ChatMessage.objects.pending().filter(Q(not_before__isnull=True) | Q(not_before__lt=until)).update(not_before=until)
    ChatMessage.objects.filter(pk=message.pk).update(claimed_until=None, last_error=why[:500])
