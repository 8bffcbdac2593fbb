"""A plan entering the inbox is posted to its team's Slack channel, and its
message is updated on every later decision or revision, wherever made
(docs/guides/slack-reviewers.md#when-the-message-changes). The worker's
task is run here directly: what it sends is what the stand-in receives."""

import json

from tests.support.plans import gated_plan, ticket_plan
from tests.support.slack import CHANNELS
from workflows.chat import buttons
from workflows.chat import slack as sending
from workflows.engine import previews
from workflows.models import ChatMessage, Workflow


def submitted(api, plan) -> str:
    answer = api["agent"].post("/workflows", plan)
    assert answer.status_code == 201, answer.content
    previews.compute(answer.json()["id"])
    return answer.json()["id"]


def actions(blocks) -> dict:
    """The buttons of a message: {action_id: value or url}."""
    found = {}
    for block in blocks:
        if block["type"] == "actions":
            for element in block["elements"]:
                found[element["action_id"]] = element.get("value") or element.get("url")
    return found


def texts(blocks) -> str:
    shown = []
    for block in blocks:
        if isinstance(block.get("text"), dict):
            shown.append(block["text"]["text"])
        shown += [e.get("text", "") for e in block.get("elements", []) if isinstance(e.get("text"), str)]
    return "\n".join(shown)


def test_a_submitted_plan_is_posted_with_its_steps_and_buttons_bound_to_it(api, slack):
    workflow_id = submitted(api, ticket_plan("posted-1"))
    assert sending.send_due() == 1

    [post] = slack.calls("chat.postMessage")
    body = post["body"]
    assert body["channel"] == CHANNELS["default"]
    shown = texts(body["blocks"])
    assert "Open, comment on and close a ticket" in shown
    assert "agent" in shown and "Revision 1" in shown and "Decide by" in shown
    assert "ticket.create" in shown and "ticket.close" in shown
    found = actions(body["blocks"])
    assert set(found) == {"approve", "reject", "open"}
    workflow = Workflow.objects.get(pk=workflow_id)
    value = buttons.parse_button_value(found["approve"])
    assert (value["w"], value["r"], value["h"]) == (workflow_id, 1, workflow.plan_hash)
    assert found["open"].endswith(f"/workflows/{workflow_id}/")
    message = ChatMessage.objects.get(workflow_id=workflow_id)
    assert message.ts and message.sent_version == message.version  # recorded once posted
    # Sent once: a second pass has nothing to do.
    assert sending.send_due() == 0
    assert len(slack.calls()) == 1


def test_approval_in_the_api_updates_the_message_with_the_outcome_and_no_buttons(api, slack):
    workflow_id = submitted(api, ticket_plan("approved-1"))
    sending.send_due()
    answer = api["reviewer"].post(f"/workflows/{workflow_id}/approve", {"comment": "fine"})
    assert answer.status_code == 200, answer.content

    sending.send_due()

    post, update = slack.calls()
    assert update["method"] == "chat.update"
    assert update["body"]["ts"] == ChatMessage.objects.get(workflow_id=workflow_id).ts
    assert "Approved* by reviewer" in texts(update["body"]["blocks"])
    assert actions(update["body"]["blocks"]) == {}


def test_a_revision_updates_the_message_with_buttons_bound_to_the_new_revision(api, slack):
    workflow_id = submitted(api, ticket_plan("revised-1"))
    sending.send_due()
    edit = {"key": "open", "args": {"title": "Printer on fire, floor 4", "body": "Floor 4"}}
    answer = api["reviewer"].post(f"/workflows/{workflow_id}/revise", {"steps": [edit], "comment": "floor"})
    assert answer.status_code == 200, answer.content
    previews.compute(workflow_id)

    sending.send_due()

    update = slack.calls("chat.update")[-1]
    value = buttons.parse_button_value(actions(update["body"]["blocks"])["approve"])
    workflow = Workflow.objects.get(pk=workflow_id)
    assert (value["r"], value["h"]) == (2, workflow.plan_hash)
    assert "Revision 2" in texts(update["body"]["blocks"])


def test_hostile_text_is_escaped_so_it_cannot_mention_or_link(api, slack):
    plan = ticket_plan("hostile-1")
    plan["name"] = "<!channel> pay <https://evil.example|here> & <@U0BOSS>"
    submitted(api, plan)
    sending.send_due()

    [post] = slack.calls("chat.postMessage")
    raw = json.dumps([post["body"]["blocks"], post["body"]["text"]])
    assert "<!channel>" not in raw and "<@U0BOSS>" not in raw and "<https://evil" not in raw
    assert "&lt;!channel&gt; pay &lt;https://evil.example|here&gt; &amp; &lt;@U0BOSS&gt;" in texts(
        post["body"]["blocks"]
    )


def test_a_team_without_a_channel_is_not_posted(api, slack, settings):
    settings.SLACK_CHANNELS = {"payments": CHANNELS["payments"]}
    workflow_id = submitted(api, ticket_plan("unposted-1"))
    assert not ChatMessage.objects.filter(workflow_id=workflow_id).exists()
    assert sending.send_due() == 0
    assert slack.calls() == []


def test_slack_off_touches_nothing(api, slack, settings):
    settings.SLACK_BOT_TOKEN = ""
    workflow_id = submitted(api, gated_plan("off-1"))
    assert not ChatMessage.objects.filter(workflow_id=workflow_id).exists()
    assert sending.send_due() == 0
    assert slack.calls() == []
