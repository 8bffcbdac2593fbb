"""One read side: every entry point (the API, the console, the commands)
gives the same answer for who sees an object, for a reason and for an age.
Each test pins one answer where two entry points once disagreed."""

import json
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import CommandError, call_command
from django.utils import timezone

from tests.support import deciding as decide
from tests.support.api import ApiClient
from tests.support.failing import fail_next_step
from tests.support.plans import ticket_plan
from tests.support.seeing import Client
from workflows import roles
from workflows.ages import MESSAGE as AGE_MESSAGE
from workflows.audit import archived
from workflows.engine import execution
from workflows.models import Archive, ArchivedWorkflow, AuditEvent, DeadLetter, Team, Workflow
from workflows.operations import bulk, compensation, plans
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
    return fail_next_step(workflow.pk)


# --- one rule for who sees what -------------------------------------------------------


@pytest.fixture
def world(people, api):
    """In team `default`: the agent's plan, half done and failed (a dead letter,
    a compensation requested, a reconciliation job) and a policy change
    waiting. Readers besides the personas: `pay-operator`, `pay-reviewer`
    and `pay-auditor` of team payments, and `agent2`, another agent."""
    payments = Team.objects.create(name="payments")
    for name, group in (("pay-operator", roles.OPERATORS), ("pay-reviewer", roles.REVIEWERS)):
        user = User.objects.create_user(name)
        user.groups.add(Group.objects.get_or_create(name=group)[0])
        payments.members.add(user)
    User.objects.create_user("agent2")
    body = {
        "name": "half done",
        "submission_key": "failed",
        "steps": [
            {"key": "first", "action": "noop", "args": {}},
            {"key": "open", "action": "ticket.create", "args": {"title": "t"}},
        ],
    }
    failed = plans.submit(people["agent"], body).workflow
    decide.approve(failed, by=people["reviewer2"])
    execution.execute(execution.claim(failed.pk))
    fail_next_step(failed.pk)
    comp = compensation.request(Workflow.objects.get(pk=failed.pk), by=people["operator"], reason="undo")
    job, _ = bulk.reconcile(people["operator"], {"workflow": failed.pk}, shown_filter={}, dry_run=True)
    api["operator"].patch("/actions/ticket.create/policy", {"max_in_flight": 2, "reason": "tighten"})
    change = api["operator"].patch("/actions/ticket.create/policy", {"max_in_flight": 9, "reason": "loosen"}).json()
    return {
        "workflow": failed.pk,
        "dead": DeadLetter.objects.get(workflow=failed).pk,
        "comp": comp.pk,
        "job": job.pk,
        "change": change["id"],
    }


def reader(name):
    return User.objects.get(username=name)


def console_get(name, path, **params):
    client = Client()
    client.force_login(reader(name))
    return client.get(path, params)


def api_get(name, path, **params):
    return ApiClient(reader(name)).get(path, **params)


SEES, HIDDEN, REFUSED = 200, 404, 403

# kind -> (API path, console path, {reader: answer}): the owner or a member
# of its team, another team's member, another agent, and a role that does
# not read the kind each get one answer, the same from both: a wrong role is
# 403, not yours (another team's, another agent's) is 404.
DETAILS = {
    "workflow": (
        "/workflows/{workflow}",
        "/workflows/{workflow}/",
        {"agent": SEES, "reviewer": SEES, "auditor": SEES, "pay-reviewer": HIDDEN, "agent2": HIDDEN},
    ),
    "dead letter": (
        "/dead-letters/{dead}",
        "/dead-letters/{dead}/",
        {
            "operator": SEES,
            "auditor": SEES,
            "agent": SEES,  # its own workflow's
            "pay-operator": HIDDEN,
            "agent2": HIDDEN,
            "reviewer": REFUSED,  # reviewers do not read dead letters
        },
    ),
    "compensation": (
        "/compensations/{comp}",
        "/compensations/{comp}/",
        # Agents read no compensations, even of their own plans.
        {"reviewer": SEES, "operator": SEES, "pay-reviewer": HIDDEN, "agent2": REFUSED, "agent": REFUSED},
    ),
    "job": (
        "/jobs/{job}",
        "/jobs/{job}/",
        {"operator": SEES, "auditor": SEES, "pay-operator": HIDDEN, "agent2": REFUSED, "reviewer": REFUSED},
    ),
    # Policies are every team's (an action is the same for all): its readers are by role alone.
    "policy": (
        "/actions/ticket.create/policy",
        "/actions/ticket.create/policy",
        {"operator": SEES, "auditor": SEES, "pay-operator": SEES, "reviewer": REFUSED, "agent": REFUSED},
    ),
}


@pytest.mark.parametrize("kind", DETAILS)
def test_a_detail_answers_alike_in_the_api_and_the_console_403_for_a_wrong_role_404_for_not_yours(world, kind):
    api_path, console_path, answers = DETAILS[kind]
    got = {
        name: (
            api_get(name, api_path.format(**world)).status_code,
            console_get(name, console_path.format(**world)).status_code,
        )
        for name in answers
    }
    assert got == {name: (status, status) for name, status in answers.items()}


def test_a_policy_change_is_read_by_operators_and_auditors_only(world):
    path = f"/policy-changes/{world['change']}"
    got = {name: api_get(name, path).status_code for name in ("operator", "auditor", "reviewer", "agent")}
    assert got == {"operator": SEES, "auditor": SEES, "reviewer": REFUSED, "agent": REFUSED}


# kind -> (API list, console list, the key of the object listed, {reader: listed
# (True), answered without it (False), or refused (403) to a role that does not
# read the kind})
LISTS = {
    "dead letters": (
        "/dead-letters",
        "/dead-letters/",
        "dead",
        {"operator": True, "agent": True, "pay-operator": False, "agent2": False, "reviewer": REFUSED},
    ),
    "workflows": (
        "/workflows",
        "/workflows/",
        "workflow",
        {"agent": True, "reviewer": True, "pay-reviewer": False, "agent2": False},
    ),
}


@pytest.mark.parametrize("kind", LISTS)
def test_a_list_answers_alike_in_the_api_and_the_console_and_403_for_a_wrong_role(world, kind):
    """A list shows what its reader sees, without what is not theirs; a role
    that reads none of the kind is refused it (403), by both, as its details."""
    api_path, console_path, key, listed = LISTS[kind]
    wanted = str(world[key])
    got = {}
    for name in listed:
        answer, page = (
            api_get(name, api_path, status="FAILED") if kind == "workflows" else api_get(name, api_path),
            console_get(name, console_path),
        )
        if (answer.status_code, page.status_code) == (REFUSED, REFUSED):
            got[name] = (REFUSED, REFUSED)
            continue
        assert (answer.status_code, page.status_code) == (200, 200), name
        got[name] = (wanted in answer.content.decode(), wanted in page.content.decode())
    assert got == {name: (shown, shown) for name, shown in listed.items()}


def test_the_compensation_list_and_the_policy_list_are_refused_to_a_role_that_does_not_read_them(world):
    assert str(world["comp"]) in console_get("reviewer", "/compensations/").content.decode()
    assert console_get("agent", "/compensations/").status_code == REFUSED
    assert "ticket.create" in console_get("auditor", "/actions/").content.decode()
    assert console_get("reviewer", "/actions/").status_code == REFUSED


def test_audit_events_are_an_auditors_in_the_api_the_console_and_the_exports_alike(world):
    def seen(name):
        answer = api_get(name, "/audit", workflow=str(world["workflow"]))
        export = console_get(name, "/audit/export.jsonl", workflow=str(world["workflow"]))
        page = console_get(name, "/audit/", workflow=str(world["workflow"]))
        if name != "auditor":
            return (answer.status_code, export.status_code, page.status_code)
        lines = [json.loads(line) for line in b"".join(export.streaming_content).decode().splitlines()]
        assert (answer.status_code, export.status_code) == (200, 200)
        return (len(answer.json()["items"]) > 0, len(lines) > 0)

    assert {name: seen(name) for name in ("auditor", "operator", "reviewer", "agent")} == {
        "auditor": (True, True),
        "operator": (REFUSED, REFUSED, REFUSED),
        "reviewer": (REFUSED, REFUSED, REFUSED),
        "agent": (REFUSED, REFUSED, REFUSED),
    }


def test_an_archived_workflow_is_410_with_the_same_message_in_the_api_and_the_console(world, people):
    gone = plans.submit(people["agent"], ticket_plan("gone")).workflow
    record = ArchivedWorkflow.objects.create(
        workflow_id=gone.pk,
        archive=Archive.objects.create(by="test", location="/nowhere", manifest_digest="0" * 64, workflows=1),
        name=gone.name,
        status=gone.status,
        team_id=gone.team_id,
        submitted_by=gone.submitted_by,
        created_at=gone.created_at,
        seq=0,
        head="0" * 64,
    )
    Workflow.objects.filter(pk=gone.pk).delete()
    message = archived.describe(record)
    answer, page = api_get("reviewer", f"/workflows/{gone.pk}"), console_get("reviewer", f"/workflows/{gone.pk}/")
    assert (answer.status_code, page.status_code) == (410, 410)
    assert answer.json()["error"]["message"] == message
    assert message in page.content.decode()
    # Not announced to who never saw it: 404, from both.
    assert api_get("pay-reviewer", f"/workflows/{gone.pk}").status_code == 404
    assert console_get("pay-reviewer", f"/workflows/{gone.pk}/").status_code == 404
    assert api_get("agent2", f"/workflows/{gone.pk}").status_code == 404


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


# --- one dead-letter filter --------------------------------------------------------------


def test_the_api_the_console_and_the_command_choose_the_same_dead_letters(people, api, as_user, capsys):
    old, other = (
        park(people["agent"], people["reviewer"], "plan-a"),
        park(people["agent"], people["reviewer"], "plan-b"),
    )
    DeadLetter.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=2))
    chosen = api["operator"].post("/dead-letters/replay", {"filter": {"older_than": "1d"}, "dry_run": True})
    assert chosen.json()["matched"] == 1 and str(old.pk) in chosen.content.decode()
    page = as_user("operator").get("/dead-letters/", {"age": "1d"}).content.decode()
    assert str(old.pk) in page and str(other.pk) not in page
    call_command("replay_dead_letters", "--older-than", "1d")
    shown = capsys.readouterr().out
    assert str(old.pk) in shown and str(other.pk) not in shown
