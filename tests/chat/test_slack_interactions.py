"""Clicks in Slack decide as the console would
(docs/explanation/chat-decisions.md#chat-decisions): a click is verified (v0
signature, 5-minute window, a signature once, the one workspace),
acknowledged at once, decided by a real worker through the console's own
operations as the linked person, and answered on its response_url. Every
bad request is refused with a clear status and changes nothing."""

import json
import time
from datetime import timedelta

import pytest
import requests
from django.utils import timezone
from django_q.models import OrmQ
from django_q.signing import SignedPackage

from tests.support import deciding as decide
from tests.support.compensating import failed_workflow
from tests.support.plans import gated_plan
from tests.support.receiver import Receiver
from tests.support.running import wait_for_status
from tests.support.slack_clicks import body_of, click, compensation_value, gate_value, payload, plan_value, signed
from workflows.chat import buttons
from workflows.engine import policy
from workflows.models import ActionPolicy, Approval, AuditEvent, SlackSignature, Workflow
from workflows.operations import chat_clicks, chat_links, compensation, persons, plans

NOOPS = {"name": "Two noops", "steps": [{"key": "a", "action": "noop", "args": {"n": 1}}]}


def noop_plan(people, key="slack-1"):
    return plans.submit(people["agent"], {**NOOPS, "submission_key": key}).workflow


def linked(user, slack_user="U0REVIEWER"):
    chat_links.link_by_hand(user, slack_user)
    return slack_user


def answers(slack, count=1):
    """The bodies posted to the stand-in's response_url, once `count` came."""
    calls = slack.wait_for(lambda calls: len([c for c in calls if c["method"] == "response_url"]) >= count)
    return [call["body"] for call in calls if call["method"] == "response_url"]


@pytest.fixture
def worker(slack, start_worker):
    return start_worker(**slack.env)


def test_a_linked_reviewers_approve_click_approves_the_plan_naming_slack_in_the_audit(
    people, slack, live_server, worker
):
    workflow = noop_plan(people)
    slack_user = linked(people["reviewer"])
    answer = click(live_server.url, payload("approve", plan_value(workflow), response_url=slack.response_url()))
    assert answer.status_code == 200 and answer.text == ""

    wait_for_status(workflow.pk, {"APPROVED", "RUNNING", "COMPLETE"})
    event = AuditEvent.objects.get(workflow_id=workflow.pk, verb="workflow.approved")
    assert event.actor == "reviewer"
    assert (event.subject, event.issuer) == (slack_user, "slack:T0STANDIN")
    approval = Approval.objects.get(workflow=workflow)
    assert approval.mac and approval.revision == 1  # sealed as any approval: the proof is made from it
    [said] = answers(slack)
    assert said["response_type"] == "in_channel" and "approved “Two noops” in Slack" in said["text"]


def test_a_click_on_a_revision_no_longer_current_records_nothing_and_says_the_plan_changed(
    people, slack, live_server, worker
):
    workflow = noop_plan(people)
    value = plan_value(workflow)  # what the message showed
    decide.revise(workflow, by=people["admin"], steps=[{"key": "a", "args": {"n": 7}}])
    linked(people["reviewer"])
    assert click(live_server.url, payload("approve", value, response_url=slack.response_url())).status_code == 200

    [said] = answers(slack)
    assert said["response_type"] == "ephemeral"
    assert "The plan changed since you looked" in said["text"] and "nothing was recorded" in said["text"]
    assert Workflow.objects.get(pk=workflow.pk).status == "PLANNED"
    assert not Approval.objects.filter(workflow=workflow).exists()


def test_the_owner_of_the_submitting_agent_is_refused_four_eyes_and_nothing_is_decided(
    people, slack, live_server, worker
):
    persons.set_owner(people["agent"], people["reviewer"], by=None)
    workflow = noop_plan(people)
    linked(people["reviewer"])
    click(live_server.url, payload("approve", plan_value(workflow), response_url=slack.response_url()))

    [said] = answers(slack)
    assert said["response_type"] == "ephemeral" and "four eyes" in said["text"]
    assert said["text"].startswith("Nothing was decided")
    assert Workflow.objects.get(pk=workflow.pk).status == "PLANNED"


def test_a_gate_is_approved_from_slack(people, slack, live_server, worker):
    workflow = plans.submit(people["agent"], gated_plan("slack-gate")).workflow
    decide.approve(workflow, by=people["reviewer"])
    wait_for_status(workflow.pk, "WAITING_GATE", timeout=60)
    linked(people["reviewer2"], "U0SECOND")
    value = gate_value(workflow, "close")
    click(live_server.url, payload("gate_approve", value, user="U0SECOND", response_url=slack.response_url()))

    wait_for_status(workflow.pk, {"RUNNING", "COMPLETE"}, timeout=60)
    event = AuditEvent.objects.get(workflow_id=workflow.pk, verb="gate.opened")
    assert (event.actor, event.subject) == ("reviewer2", "U0SECOND")
    assert "approved the gate of" in answers(slack)[0]["text"]


def test_a_compensation_is_authorized_from_slack_and_declining_points_to_the_console(
    people, slack, live_server, worker
):
    workflow = failed_workflow(people)
    comp = compensation.request(workflow, by=people["operator"], reason="undo the tickets")
    linked(people["reviewer2"], "U0SECOND")
    click(
        live_server.url,
        payload("comp_decline", compensation_value(comp), user="U0SECOND", response_url=slack.response_url()),
    )
    [said] = answers(slack)
    assert said["response_type"] == "ephemeral" and "needs your reason" in said["text"]
    assert f"/compensations/{comp.pk}/" in said["text"]

    click(
        live_server.url,
        payload("comp_authorize", compensation_value(comp), user="U0SECOND", response_url=slack.response_url("T/2/b")),
    )
    wait_for_status(workflow.pk, {"COMPENSATING", "COMPENSATED"}, timeout=60)
    assert AuditEvent.objects.get(verb="compensation.authorized", object_id=str(comp.pk)).subject == "U0SECOND"


def test_a_deactivated_accounts_click_is_refused(people, slack, live_server, worker):
    workflow = noop_plan(people)
    linked(people["reviewer"])
    people["reviewer"].is_active = False
    people["reviewer"].save()
    click(live_server.url, payload("approve", plan_value(workflow), response_url=slack.response_url()))
    [said] = answers(slack)
    assert said["response_type"] == "ephemeral" and "deactivated" in said["text"]
    assert Workflow.objects.get(pk=workflow.pk).status == "PLANNED"


def _clicks_queued() -> bool:
    return any(SignedPackage.loads(task.payload)["func"].endswith("decide_slack_click") for task in OrmQ.objects.all())


@pytest.mark.parametrize(
    ("bad", "status", "says"),
    [
        ("forged", 401, "does not match"),
        ("too old", 401, "older than 5 minutes"),
        ("future", 401, "in the future"),
        ("other workspace", 403, "own Slack workspace"),
        ("malformed", 400, "not JSON"),
        ("not our button", 400, "not one of ours"),
        ("multipart", 400, "x-www-form-urlencoded"),
    ],
)
def test_bad_requests_are_refused_and_change_nothing(people, slack, live_server, bad, status, says):
    workflow = noop_plan(people)
    linked(people["reviewer"])
    data = payload("approve", plan_value(workflow), response_url=slack.response_url())
    options = {}
    if bad == "forged":
        options["secret"] = "not-the-signing-secret"
    elif bad == "too old":
        options["timestamp"] = int(time.time()) - 301
    elif bad == "future":
        options["timestamp"] = int(time.time()) + 600
    elif bad == "other workspace":
        data = payload("approve", plan_value(workflow), response_url=slack.response_url(), team="T0OTHER")
    elif bad == "malformed":
        data = "{not json"
    elif bad == "not our button":
        data["actions"][0]["value"] = json.dumps({"v": 1, "w": "not-a-uuid", "r": 1, "h": "x", "p": "x"})
    if bad == "multipart":
        body = json.dumps(data).encode()
        files = {"payload": (None, body)}
        prepared = requests.Request("POST", live_server.url + "/chat/slack/interactions/", files=files).prepare()
        headers = {**signed(prepared.body), "Content-Type": prepared.headers["Content-Type"]}
        answer = requests.post(prepared.url, data=prepared.body, headers=headers, timeout=30)
    else:
        answer = click(live_server.url, data, **options)
    assert answer.status_code == status and says in answer.text
    assert not SlackSignature.objects.exists() and not _clicks_queued()
    assert Workflow.objects.get(pk=workflow.pk).status == "PLANNED"


def test_a_signature_seen_before_is_refused(people, slack, live_server):
    workflow = noop_plan(people)
    linked(people["reviewer"])
    body = body_of(payload("approve", plan_value(workflow), response_url=slack.response_url()))
    headers = signed(body)
    first = requests.post(live_server.url + "/chat/slack/interactions/", data=body, headers=headers, timeout=30)
    again = requests.post(live_server.url + "/chat/slack/interactions/", data=body, headers=headers, timeout=30)
    assert first.status_code == 200
    assert again.status_code == 401 and "received before" in again.text
    assert SlackSignature.objects.count() == 1 and _clicks_queued()


def test_a_response_url_on_a_foreign_host_is_refused_and_never_called(people, slack, live_server):
    with Receiver() as receiver:
        foreign = f"http://localhost:{receiver.server.server_port}/actions/T/1/x"
        workflow = noop_plan(people)
        linked(people["reviewer"])
        answer = click(live_server.url, payload("approve", plan_value(workflow), response_url=foreign))
        assert answer.status_code == 400 and "response_url" in answer.text
        assert not _clicks_queued()
        time.sleep(0.5)
        assert receiver.requests == []


def test_a_reject_click_rejects_without_a_comment_written_for_the_person(people, slack, live_server, worker):
    workflow = noop_plan(people)
    linked(people["reviewer"])
    click(live_server.url, payload("reject", plan_value(workflow), response_url=slack.response_url()))

    wait_for_status(workflow.pk, "REJECTED")
    assert Approval.objects.get(workflow=workflow).comment == ""
    assert "rejected “Two noops” in Slack" in answers(slack)[0]["text"]


def test_an_open_click_is_acknowledged_and_decides_nothing(people, slack, live_server):
    workflow = noop_plan(people)
    linked(people["reviewer"])
    answer = click(live_server.url, payload("open", "", response_url=slack.response_url()))
    assert answer.status_code == 200 and not _clicks_queued()
    assert Workflow.objects.get(pk=workflow.pk).status == "PLANNED"


def test_signatures_leave_once_out_of_the_window(people, settings):
    settings.SLACK_TEAM_ID = "T0STANDIN"
    old = timezone.now() - chat_clicks.WINDOW - chat_clicks.SKEW - timedelta(seconds=1)
    SlackSignature.objects.create(signature="v0=handled", sent_at=old, handled_at=old)
    SlackSignature.objects.create(signature="v0=waiting", sent_at=old)
    SlackSignature.objects.create(signature="v0=forgotten", sent_at=old - chat_clicks.FORGOTTEN)
    interaction = chat_clicks.read(json.dumps(payload("open", "", response_url="https://hooks.slack.com/actions/x")))
    chat_clicks.receive(interaction, "v0=new", timezone.now())
    assert set(SlackSignature.objects.values_list("signature", flat=True)) == {"v0=waiting", "v0=new"}


def test_a_plan_whose_policy_keeps_decisions_in_the_console_is_refused_from_slack(people, slack, live_server, worker):
    workflow = noop_plan(people)
    policy.policy_for("noop")
    ActionPolicy.objects.filter(action="noop").update(chat_decisions=False)
    linked(people["reviewer"])
    click(live_server.url, payload("approve", plan_value(workflow), response_url=slack.response_url()))

    [said] = answers(slack)
    assert said["response_type"] == "ephemeral" and "chat_decisions is off" in said["text"]
    assert f"/workflows/{workflow.pk}/" in said["text"]
    assert Workflow.objects.get(pk=workflow.pk).status == "PLANNED"


def test_a_click_on_a_plan_or_compensation_that_does_not_exist_is_answered(people, slack, live_server, worker):
    linked(people["reviewer"])
    missing = "3f2b1c7e-0000-4000-8000-000000000000"
    plan = json.dumps({"v": 1, "w": missing, "r": 1, "h": "h", "p": buttons.previews_digest({})})
    click(live_server.url, payload("approve", plan, response_url=slack.response_url()))
    comp = json.dumps({"v": 1, "c": missing, "h": "h"})
    click(live_server.url, payload("comp_authorize", comp, response_url=slack.response_url("T/2/b")))

    texts = sorted(body["text"] for body in answers(slack, 2))
    assert texts == ["Nothing was decided: No such workflow.", "Nothing was decided: no such compensation."]
