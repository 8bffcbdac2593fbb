"""Slack's 429 is honoured: nothing is sent before its Retry-After, then
everything is, once, in order
(docs/guides/slack-admins.md#when-slack-is-slow-down-or-rate-limiting)."""

import time

from tests.support.plans import ticket_plan
from workflows.chat import slack as sending
from workflows.models import ChatMessage


def submit(api, key) -> str:
    answer = api["agent"].post("/workflows", ticket_plan(key))
    assert answer.status_code == 201, answer.content
    return answer.json()["id"]


def test_a_429_pauses_every_message_for_its_retry_after_then_each_is_posted_once_in_order(api, slack):
    first, second = submit(api, "limited-1"), submit(api, "limited-2")
    slack.rate_limit(calls=1, retry_after=2)

    assert sending.send_due() == 0
    [limited] = slack.calls()
    assert limited["status"] == 429  # the fault happened
    assert not ChatMessage.objects.due().exists()  # both wait for the Retry-After
    assert sending.send_due() == 0 and len(slack.calls()) == 1

    time.sleep(2.1)
    assert sending.send_due() == 2

    posts = [c for c in slack.calls("chat.postMessage") if c["status"] == 200]
    assert [p["body"]["text"] for p in posts] == ["Plan awaiting review: " + ticket_plan()["name"]] * 2
    rows = list(ChatMessage.objects.order_by("id"))
    assert [str(r.workflow_id) for r in rows] == [first, second]
    assert all(r.ts for r in rows) and rows[0].ts < rows[1].ts  # posted in order, each once
    assert sending.send_due() == 0 and len(slack.calls("chat.postMessage")) == 3


def test_a_refused_message_is_logged_and_not_retried(api, slack, settings, caplog):
    settings.SLACK_CHANNELS = {"default": "C0NOWHERE"}
    workflow_id = submit(api, "refused-1")
    assert sending.send_due() == 0
    [call] = slack.calls()
    assert call["body"]["channel"] == "C0NOWHERE"
    message = ChatMessage.objects.get(workflow_id=workflow_id)
    assert (message.ts, message.last_error, message.sent_version) == ("", "channel_not_found", message.version)
    assert "channel_not_found" in caplog.text
    assert sending.send_due() == 0 and len(slack.calls()) == 1
