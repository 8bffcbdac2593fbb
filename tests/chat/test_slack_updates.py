"""Wherever a plan is decided, stopped or ended — the console, the API, the
engine's expiry — its Slack message says so and offers nothing to click
(docs/guides/slack-reviewers.md#when-the-message-changes)."""

from datetime import timedelta

from django.contrib.auth.models import Group
from django.utils import timezone

from tests.support.personas import PASSWORD
from tests.support.plans import ticket_plan
from tests.support.seeing import Client
from workflows.chat import slack as sending
from workflows.engine import expiry, previews
from workflows.models import Workflow


def posted(api, slack, key, **extra) -> str:
    answer = api["agent"].post("/workflows", ticket_plan(key, **extra))
    assert answer.status_code == 201, answer.content
    workflow_id = answer.json()["id"]
    previews.compute(workflow_id)
    sending.send_due()
    assert len(slack.calls("chat.postMessage")) == 1
    return workflow_id


def last_update(slack) -> dict:
    sending.send_due()
    update = slack.calls("chat.update")[-1]
    assert not [b for b in update["body"]["blocks"] if b["type"] == "actions"]
    return update["body"]


def test_an_approval_in_the_console_updates_the_message(api, slack):
    workflow_id = posted(api, slack, "console-approved-1")
    client = Client()
    assert client.login(username="reviewer", password=PASSWORD)
    response = client.post(f"/workflows/{workflow_id}/approve", {"comment": "checked"})
    assert response.status_code in (200, 302), response.content
    assert Workflow.objects.get(pk=workflow_id).status == "APPROVED"
    assert "Approved* by reviewer" in str(last_update(slack)["blocks"])


def test_a_rejection_shows_who_and_why(api, slack):
    workflow_id = posted(api, slack, "rejected-1")
    answer = api["reviewer"].post(f"/workflows/{workflow_id}/reject", {"comment": "wrong floor"})
    assert answer.status_code == 200, answer.content
    assert "Rejected* by reviewer: wrong floor" in str(last_update(slack)["blocks"])


def test_a_cancellation_shows_who_cancelled(api, slack):
    workflow_id = posted(api, slack, "cancelled-1")
    answer = api["agent"].post(f"/workflows/{workflow_id}/cancel", {"reason": "wrong printer"})
    assert answer.status_code == 200, answer.content
    assert "Cancelled* by agent" in str(last_update(slack)["blocks"])


def test_expiry_updates_the_message(api, slack):
    workflow_id = posted(api, slack, "expired-1")
    Workflow.objects.filter(pk=workflow_id).update(deadline=timezone.now() - timedelta(seconds=1))
    assert expiry.expire_overdue() == 1
    assert "Expired*" in str(last_update(slack)["blocks"])


def test_an_escalation_at_the_deadline_updates_the_message_which_still_decides(api, slack, django_user_model):
    lead = django_user_model.objects.create_user("lead", email="lead@example.com")
    lead.groups.add(Group.objects.create(name="leads"))
    review = {"deadline_seconds": 60, "escalate_to": "leads", "on_expiry": "escalate", "extend_seconds": 3600}
    workflow_id = posted(api, slack, "escalated-1", deadline_seconds=7200, review=review)
    Workflow.objects.filter(pk=workflow_id).update(deadline=timezone.now() - timedelta(seconds=1))

    assert expiry.expire_overdue() == 0
    sending.send_due()

    [update] = slack.calls("chat.update")
    blocks = update["body"]["blocks"]
    assert "Escalated to leads, deadline extended" in str(blocks)
    assert [b for b in blocks if b["type"] == "actions"]  # still waiting: the buttons stay


def test_chat_decisions_is_a_policy_field_and_turning_it_on_waits_for_a_second_operator(api):
    off = api["operator"].patch("/actions/ticket.close/policy", {"chat_decisions": False, "reason": "console only"})
    assert off.status_code == 200, off.content
    assert off.json()["chat_decisions"] is False
    on = api["operator"].patch("/actions/ticket.close/policy", {"chat_decisions": True, "reason": "chat again"})
    assert on.status_code == 202, on.content
    assert api["operator"].get("/actions/ticket.close/policy").json()["chat_decisions"] is False
    bad = api["operator"].patch("/actions/ticket.close/policy", {"chat_decisions": "yes", "reason": "typo"})
    assert bad.status_code == 400
