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
from workflows.models import DeadLetter
from workflows.operations import plans


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

