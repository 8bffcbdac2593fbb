"""A Slack user decides only once linked to a person by a handshake
(docs/explanation/chat-decisions.md#the-handshake): the first click answers,
to that Slack user alone, with a signed console link that works once for 10
minutes; the person signs in there and confirms. `manage.py person
link-slack` links by hand. Nothing in a Slack profile links anyone."""

import json
import re
import time
from unittest import mock

import pytest
from django.core import signing
from django.core.management import call_command
from django.core.management.base import CommandError
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from tests.support.personas import PASSWORD
from tests.support.running import wait_for_status
from tests.support.seeing import Client
from tests.support.slack_clicks import click, payload, plan_value
from workflows.models import AuditEvent, SlackIdentity, UsedSlackLink, Workflow
from workflows.operations import chat_clicks, chat_links, plans

NOOPS = {"name": "One noop", "submission_key": "link-1", "steps": [{"key": "a", "action": "noop", "args": {}}]}


def signed_in(persona):
    client = Client()
    assert client.login(username=persona, password=PASSWORD)
    return client


def link_path(text):
    return re.search(r"<https?://[^/|]+(/chat/slack/link/[^/|]+/)\|", text).group(1)


def test_an_unlinked_users_click_links_by_handshake_and_only_the_next_click_decides(
    people, slack, live_server, start_worker
):
    start_worker(**slack.env)
    workflow = plans.submit(people["agent"], NOOPS).workflow
    # An email in the Slack profile is never used to link.
    people["reviewer"].email = "reviewer@example.com"
    people["reviewer"].save()
    data = payload("approve", plan_value(workflow), user="U0NEWBIE", response_url=slack.response_url())
    data["user"]["email"] = "reviewer@example.com"
    assert click(live_server.url, data).status_code == 200

    calls = slack.wait_for(lambda calls: any(c["method"] == "response_url" for c in calls))
    said = [c for c in calls if c["method"] == "response_url"][-1]["body"]
    assert said["response_type"] == "ephemeral" and "not linked" in said["text"]
    assert Workflow.objects.get(pk=workflow.pk).status == "PLANNED" and not SlackIdentity.objects.exists()

    path = link_path(said["text"])
    anonymous = Client().get(path)
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/login/")
    reviewer = signed_in("reviewer")
    page = reviewer.get(path)
    assert page.status_code == 200 and "U0NEWBIE" in page.content.decode()
    assert not SlackIdentity.objects.exists()  # showing the page links nobody
    confirmed = reviewer.post(path)
    assert confirmed.status_code == 200 and 'data-testid="slack-linked"' in confirmed.content.decode()
    identity = SlackIdentity.objects.get()
    assert (identity.slack_user, identity.user, identity.via) == ("U0NEWBIE", people["reviewer"], "handshake")
    event = AuditEvent.objects.get(verb="person.slack_linked")
    assert event.actor == "reviewer" and event.data["slack_user"] == "U0NEWBIE"

    slack.clear()
    again = payload("approve", plan_value(workflow), user="U0NEWBIE", response_url=slack.response_url())
    assert click(live_server.url, again).status_code == 200
    wait_for_status(workflow.pk, {"APPROVED", "RUNNING", "COMPLETE"})


@pytest.fixture
def token(settings):
    settings.SLACK_TEAM_ID = "T0STANDIN"
    return chat_links.make_token("T0STANDIN", "U0NEWBIE", "newbie")


def test_a_used_link_is_refused_and_links_nothing_more(people, token):
    path = f"/chat/slack/link/{token}/"
    assert signed_in("reviewer").post(path).status_code == 200
    again = signed_in("reviewer2").post(path)
    assert again.status_code == 403 and "used already" in again.content.decode()
    assert SlackIdentity.objects.get().user == people["reviewer"]


def test_an_expired_link_is_refused(people, token, settings):
    path = f"/chat/slack/link/{token}/"
    later = time.time() + chat_links.MAX_AGE_SECONDS + 1
    with mock.patch("django.core.signing.time.time", return_value=later):
        page = signed_in("reviewer").post(path)
    assert page.status_code == 403 and "expired" in page.content.decode()
    assert not SlackIdentity.objects.exists() and not UsedSlackLink.objects.exists()


def test_a_changed_link_is_refused(people, token):
    claims = signing.loads(token, salt=chat_links.SALT)
    forged = signing.dumps({**claims, "u": "U0ATTACKER"}, salt="another-salt")
    for bad in (token[:-2] + "xx", forged):
        page = signed_in("reviewer").post(f"/chat/slack/link/{bad}/")
        assert page.status_code == 403 and "not valid" in page.content.decode()
    assert not SlackIdentity.objects.exists()


def test_person_link_slack_links_by_hand_and_is_audited(people, settings):
    settings.SLACK_TEAM_ID = "T0STANDIN"
    call_command("person", "link-slack", "reviewer", "U0HAND")
    assert chat_links.linked_user("T0STANDIN", "U0HAND") == people["reviewer"]
    assert AuditEvent.objects.get(verb="person.slack_linked").data["via"] == "manual"
    with pytest.raises(CommandError, match="not a Slack user id"):
        call_command("person", "link-slack", "reviewer", "reviewer@example.com")


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
FIELDS = ["type", "team", "user", "actions", "response_url", "action_id", "value"]


def _broken(field, junk):
    """A real click's payload with one field replaced by anything."""
    data = payload(
        "approve",
        '{"v": 1, "w": "3f2b1c7e-0000-4000-8000-000000000000", "r": 1, "h": "h", "p": "p"}',
        response_url="https://hooks.slack.com/actions/T/1/x",
    )
    if field in ("action_id", "value"):
        data["actions"][0][field] = junk
    else:
        data[field] = junk
    return data


@hypothesis_settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(JSON, st.builds(_broken, st.sampled_from(FIELDS), JSON)))
def test_any_malformed_payload_is_a_clear_400_or_403(settings, data):
    """Whatever JSON arrives, the answer is an Interaction or a refusal
    with a status, never a server error."""
    settings.SLACK_TEAM_ID = "T0STANDIN"
    try:
        chat_clicks.read(json.dumps(data))
    except chat_clicks.ClickRefused as refused:
        assert refused.status in (400, 403) and refused.message
