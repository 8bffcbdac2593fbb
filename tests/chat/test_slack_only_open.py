"""A message offers Approve and Reject only when Slack can show the whole
plan and every action allows decisions in chat; otherwise only Open
(docs/guides/slack-reviewers.md#only-open)."""

from tests.support.plans import ticket_plan
from workflows.chat import slack as sending
from workflows.engine import policy, previews


def posted_blocks(api, slack, plan) -> list[dict]:
    answer = api["agent"].post("/workflows", plan)
    assert answer.status_code == 201, answer.content
    previews.compute(answer.json()["id"])
    sending.send_due()
    [post] = slack.calls("chat.postMessage")
    assert post["status"] == 200
    return post["body"]["blocks"]


def action_ids(blocks) -> list[str]:
    return [e["action_id"] for b in blocks if b["type"] == "actions" for e in b["elements"]]


def test_a_preview_too_long_for_slack_is_cut_and_offers_only_open(api, slack, settings):
    settings.SLACK_PREVIEWS = "full"
    plan = ticket_plan("too-long-1")
    plan["steps"][0]["args"]["body"] = "smoke " * 1000
    blocks = posted_blocks(api, slack, plan)
    assert action_ids(blocks) == ["open"]
    assert all(len(b.get("text", {}).get("text", "")) <= 3000 for b in blocks)
    assert any("cut" in b.get("text", {}).get("text", "") for b in blocks)


def test_a_plan_of_more_steps_than_a_message_holds_offers_only_open(api, slack):
    plan = {
        "name": "Many notes",
        "submission_key": "many-1",
        "steps": [{"key": f"s{i}", "action": "noop", "args": {}} for i in range(50)],
    }
    blocks = posted_blocks(api, slack, plan)
    assert len(blocks) <= 50
    assert action_ids(blocks) == ["open"]
    assert any("44 of 50 steps shown" in e.get("text", "") for b in blocks for e in b.get("elements", []))


def test_summary_previews_show_no_request_and_fit(api, slack):
    plan = ticket_plan("summary-1")
    plan["steps"][0]["args"]["body"] = "smoke " * 1000
    blocks = posted_blocks(api, slack, plan)
    assert action_ids(blocks) == ["approve", "reject", "open"]
    assert "smoke smoke" not in str(blocks)


def test_chat_decisions_false_on_one_action_offers_only_open(api, slack, people):
    policy.update("ticket.close", by=people["operator"], chat_decisions=False)
    blocks = posted_blocks(api, slack, ticket_plan("console-only-1"))
    assert action_ids(blocks) == ["open"]
    assert "decided in the console only" in str(blocks)


def test_a_full_preview_shows_secret_references_never_their_values(api, slack, desk, settings, monkeypatch):
    settings.SLACK_PREVIEWS = "full"
    settings.SECRETS_POLICY = {"DESK_NOTE": {"actions": ["ticket.create"], "hosts": ["127.0.0.1"]}}
    # This process could resolve it: the message still names it only.
    monkeypatch.setenv("SECRET_DESK_NOTE", "s3cr3t-value-never-shown")
    plan = ticket_plan("secret-1")
    plan["steps"][0]["args"]["body"] = {"$secret": "DESK_NOTE"}
    blocks = posted_blocks(api, slack, plan)
    assert "secret:DESK_NOTE" in str(blocks)
    assert "s3cr3t-value-never-shown" not in str(slack.calls())
