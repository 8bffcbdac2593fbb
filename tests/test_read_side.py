"""One read side: every entry point (the API, the console, the commands)
gives the same answer for who sees an object, for a reason and for an age.
Each test pins one answer where two entry points once disagreed."""

import pytest
from django.core.management import CommandError, call_command

from tests.support import deciding as decide
from tests.support.seeing import Client
from workflows import actions
from workflows.actions import ActionError
from workflows.ages import MESSAGE as AGE_MESSAGE
from workflows.engine import execution, outcomes
from workflows.models import AuditEvent, DeadLetter
from workflows.operations import plans
from workflows.reasons import MAX_LENGTH, REQUIRED, TOO_LONG


@pytest.fixture
def as_user(people):
    def client_for(name):
        client = Client()
        client.force_login(people[name])
        return client

    return client_for


def park(agent, approver, key):
    """A fresh plan's only step failed for good: an open dead letter."""
    body = {
        "name": key,
        "submission_key": key,
        "steps": [{"key": "open", "action": "ticket.create", "args": {"title": "t"}}],
    }
    workflow = plans.submit(agent, body).workflow
    decide.approve(workflow, by=approver)
    step = execution.claim(workflow.pk)
    attempt = execution._request_attempt(step, step.fence)
    outcomes.record_failure(
        step, attempt, actions.get(step.action), ActionError("INVALID_ARGUMENTS", "400"), step.fence
    )
    return DeadLetter.objects.get(step=step)


# --- one age grammar ---------------------------------------------------------------


@pytest.mark.parametrize("age, valid", [("90d", True), ("0d", False), ("15x", False), ("99999999999d", False)])
def test_an_age_reads_the_same_in_the_api_the_console_and_both_commands(people, api, as_user, tmp_path, age, valid):
    park(people["agent"], people["reviewer"], "plan-old")
    answer = api["operator"].post("/dead-letters/replay", {"filter": {"older_than": age}, "dry_run": True})
    page = as_user("operator").get("/dead-letters/", {"age": age, "status": "all"})
    assert page.status_code == 200
    if valid:
        assert answer.status_code == 200, answer.content
        assert AGE_MESSAGE not in page.content.decode()
        call_command("replay_dead_letters", "--older-than", age)
        call_command("archive", "--older-than", age, "--to", tmp_path / "archive")
        return
    assert answer.status_code == 400
    assert answer.json()["error"] == {
        "code": "invalid",
        "message": AGE_MESSAGE,
        "fields": {"filter.older_than": AGE_MESSAGE},
    }
    assert AGE_MESSAGE in page.content.decode()
    for command in (("replay_dead_letters",), ("archive", "--to", tmp_path / "archive")):
        with pytest.raises(CommandError) as refused:
            call_command(*command, "--older-than", age)
        assert str(refused.value) == AGE_MESSAGE
    assert not (tmp_path / "archive").exists()


# --- one reason validator --------------------------------------------------------------


@pytest.mark.parametrize("reason, message", [("", REQUIRED), ("   ", REQUIRED), ("x" * (MAX_LENGTH + 1), TOO_LONG)])
def test_a_reason_is_refused_in_the_same_words_by_the_api_the_console_and_the_command(
    people, api, as_user, reason, message
):
    entry = park(people["agent"], people["reviewer"], "plan-why")
    events = AuditEvent.objects.count()

    answer = api["operator"].post(f"/dead-letters/{entry.pk}/replay", {"reason": reason})
    assert answer.status_code == 400
    assert answer.json()["error"] == {"code": "invalid", "message": message, "fields": {"reason": message}}

    console = as_user("operator")
    page = console.post(f"/dead-letters/{entry.pk}/replay", {"reason": reason}, HTTP_HX_REQUEST="true")
    assert message in page.content.decode()
    bulk = console.post("/dead-letters/bulk/replay", {"ids": [str(entry.pk)], "reason": reason})
    assert message in bulk.content.decode()

    with pytest.raises(CommandError) as refused:
        call_command("replay_dead_letters", "--id", str(entry.pk), "--yes", "--reason", reason, "--as", "operator")
    assert str(refused.value) == message

    assert AuditEvent.objects.count() == events
    assert DeadLetter.objects.get(pk=entry.pk).status == "OPEN"


def test_a_reason_at_the_limit_is_recorded_as_written(people, api):
    entry = park(people["agent"], people["reviewer"], "plan-long")
    reason = "y" * MAX_LENGTH
    assert api["operator"].post(f"/dead-letters/{entry.pk}/discard", {"reason": reason}).status_code == 200
    assert DeadLetter.objects.get(pk=entry.pk).resolution_reason == reason


def test_a_too_long_reason_to_authorize_a_policy_change_is_refused_not_cut(people, api):
    """An optional reason, too: refused when too long (it was cut to fit before)."""
    api["operator"].patch("/actions/ticket.create/policy", {"max_in_flight": 2, "reason": "tighten"})
    asked = api["operator"].patch("/actions/ticket.create/policy", {"max_in_flight": 10, "reason": "scaled"}).json()
    events = AuditEvent.objects.count()
    answer = api["admin"].post(f"/policy-changes/{asked['id']}/authorize", {"reason": "z" * (MAX_LENGTH + 1)})
    assert answer.status_code == 400
    assert answer.json()["error"]["message"] == TOO_LONG
    assert AuditEvent.objects.count() == events
    assert api["admin"].get("/actions/ticket.create/policy").json()["pending"][0]["id"] == asked["id"]
