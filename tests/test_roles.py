"""Every URL, for every persona: allowed or denied, console pages, their htmx
partials and the API alike."""

import pytest
from django.db import transaction
from django.test import Client

from tests.conftest import PASSWORD, ticket_plan
from workflows import actions
from workflows.actions import ActionError
from workflows.engine import execution, outcomes
from workflows.models import DeadLetter
from workflows.operations import approvals, compensation, plans, tokens

PERSONAS = ["anonymous", "agent", "reviewer", "operator", "auditor", "admin"]
STAFF = {"reviewer", "operator", "auditor", "admin"}
ANY_USER = {"agent", *STAFF}


@pytest.fixture
def world(people):
    """A plan awaiting review, and a failed workflow with a dead letter and a
    compensation awaiting authorization."""
    planned = plans.submit(people["agent"], ticket_plan("planned")).workflow
    body = {"name": "half done", "submission_key": "failed", "steps": [
        {"key": "first", "action": "noop", "args": {}},
        {"key": "open", "action": "ticket.create", "args": {"title": "t"}}]}
    failed = plans.submit(people["agent"], body).workflow
    approvals.approve(failed, by=people["reviewer2"])
    execution.execute(execution.claim(failed.pk))  # the noop completes
    step = execution.claim(failed.pk)
    attempt = execution._request_attempt(step, step.fence)
    outcomes.record_failure(step, attempt, actions.get(step.action), ActionError("INVALID_ARGUMENTS", "HTTP 400"),
                              step.fence)
    failed.refresh_from_db()
    return {
        "planned": planned.pk, "failed": failed.pk, "dead": DeadLetter.objects.get(workflow=failed).pk,
        "comp": None,
    }


def console_routes(w):
    """(method, path, data, personas allowed)."""
    return [
        ("GET", "/", None, ANY_USER),
        ("GET", "/workflows/", None, ANY_USER),
        ("GET", f"/workflows/{w['planned']}/", None, ANY_USER),  # the agent submitted it
        ("POST", f"/workflows/{w['planned']}/approve", {"comment": "x"}, {"reviewer", "admin"}),
        ("POST", f"/workflows/{w['planned']}/reject", {"comment": "x"}, {"reviewer", "admin"}),
        ("POST", f"/workflows/{w['planned']}/cancel", {"reason": "r"}, {"agent"}),  # its submitter
        ("POST", f"/workflows/{w['failed']}/cancel", {"reason": "r"}, {"operator", "admin"}),
        ("POST", f"/workflows/{w['planned']}/steps/open/approve", {"comment": "x"}, {"reviewer", "admin"}),
        ("POST", f"/workflows/{w['planned']}/steps/open/reject", {"comment": "x"}, {"reviewer", "admin"}),
        ("GET", f"/workflows/{w['planned']}/revise", None, {"reviewer", "admin"}),
        ("POST", f"/workflows/{w['planned']}/revise", {"open:title": "t"}, {"reviewer", "admin"}),
        ("POST", f"/workflows/{w['planned']}/claim", {}, {"reviewer", "admin"}),
        ("POST", f"/workflows/{w['planned']}/release", {}, {"reviewer", "admin"}),
        ("POST", f"/workflows/{w['planned']}/assign", {"to": "reviewer2"}, {"reviewer", "admin"}),
        ("POST", f"/workflows/{w['failed']}/steps/open/resolve", {"decision": "not_happened", "reason": "r"},
         {"operator", "admin"}),
        ("GET", f"/workflows/{w['failed']}/compensate", None, {"operator", "admin"}),
        ("GET", "/compensations/", None, {"reviewer", "operator", "auditor", "admin"}),
        ("GET", "/dead-letters/", None, {"operator", "auditor", "admin"}),
        ("GET", f"/dead-letters/{w['dead']}/", None, {"operator", "auditor", "admin"}),
        ("POST", f"/dead-letters/{w['dead']}/replay", {"reason": "r"}, {"operator", "admin"}),
        ("POST", f"/dead-letters/{w['dead']}/discard", {"reason": "r"}, {"operator", "admin"}),
        ("POST", "/dead-letters/bulk/preview", {"ids": [str(w["dead"])]}, {"operator", "admin"}),
        ("POST", "/dead-letters/bulk/replay", {"ids": [str(w["dead"])], "reason": "r"}, {"operator", "admin"}),
        ("GET", "/attention/", None, {"operator", "admin"}),
        ("GET", "/dashboard/", None, {"reviewer", "operator", "auditor", "admin"}),
        ("GET", "/audit/", None, {"auditor", "admin"}),
        ("POST", "/audit/verify", {}, {"auditor", "admin"}),
        ("GET", "/audit/export.csv", None, {"auditor", "admin"}),
        ("GET", "/audit/export.jsonl", None, {"auditor", "admin"}),
        ("GET", f"/compensations/{w['comp']}/", None, {"reviewer", "operator", "auditor", "admin"}),
        ("POST", f"/compensations/{w['comp']}/authorize", {"reason": "ok"}, {"reviewer", "admin"}),
        ("POST", f"/compensations/{w['comp']}/decline", {"reason": "no"}, {"reviewer", "admin"}),
    ]


def api_routes(w):
    return [
        ("GET", "/api/v1/workflows", None, ANY_USER),
        ("GET", f"/api/v1/workflows/{w['planned']}", None, ANY_USER),
        ("GET", f"/api/v1/workflows/{w['failed']}/wait?until=terminal", None, ANY_USER),
        ("POST", "/api/v1/workflows", ticket_plan("new"), ANY_USER),
        ("POST", f"/api/v1/workflows/{w['planned']}/approve", {"comment": "x"}, {"reviewer", "admin"}),
        ("POST", f"/api/v1/workflows/{w['planned']}/reject", {"comment": "x"}, {"reviewer", "admin"}),
        ("POST", f"/api/v1/workflows/{w['planned']}/cancel", {"reason": "r"}, {"agent"}),  # its submitter
        ("POST", f"/api/v1/workflows/{w['failed']}/cancel", {"reason": "r"}, {"operator", "admin"}),
        ("POST", f"/api/v1/workflows/{w['planned']}/steps/open/approve", {"comment": "x"}, {"reviewer", "admin"}),
        ("POST", f"/api/v1/workflows/{w['planned']}/steps/open/reject", {"comment": "x"}, {"reviewer", "admin"}),
        ("POST", f"/api/v1/workflows/{w['planned']}/revise", {"steps": [{"key": "open", "args": {"title": "t"}}]},
         {"reviewer", "admin"}),
        ("POST", f"/api/v1/workflows/{w['planned']}/claim", {}, {"reviewer", "admin"}),
        ("POST", f"/api/v1/workflows/{w['planned']}/release", {}, {"reviewer", "admin"}),
        ("POST", f"/api/v1/workflows/{w['planned']}/assign", {"to": "reviewer2"}, {"reviewer", "admin"}),
        ("POST", f"/api/v1/workflows/{w['failed']}/steps/open/resolve", {"decision": "not_happened", "reason": "r"},
         {"operator", "admin"}),
        # The agent submitted the failed workflow: its dead letter is the agent's to see.
        ("GET", "/api/v1/dead-letters", None, {"agent", "operator", "auditor", "admin"}),
        ("GET", f"/api/v1/dead-letters/{w['dead']}", None, {"agent", "operator", "auditor", "admin"}),
        ("POST", "/api/v1/dead-letters/replay", {"filter": {"workflow": str(w["failed"])}, "dry_run": True},
         {"operator", "admin"}),
        ("POST", "/api/v1/audit/verify", {}, {"auditor", "admin"}),
        ("GET", f"/api/v1/dead-letters/{w['dead']}/preview", None, {"operator", "auditor", "admin"}),
        ("POST", f"/api/v1/dead-letters/{w['dead']}/replay", {"reason": "r"}, {"operator", "admin"}),
        ("POST", f"/api/v1/dead-letters/{w['dead']}/discard", {"reason": "r"}, {"operator", "admin"}),
        ("POST", f"/api/v1/workflows/{w['failed']}/compensations", {"reason": "r"}, {"operator", "admin"}),
        ("GET", f"/api/v1/compensations/{w['comp']}", None, {"reviewer", "operator", "auditor", "admin"}),
        ("POST", f"/api/v1/compensations/{w['comp']}/authorize", {}, {"reviewer", "admin"}),
        ("POST", f"/api/v1/compensations/{w['comp']}/decline", {"reason": "no"}, {"reviewer", "admin"}),
        ("GET", "/api/v1/audit", None, {"auditor", "admin"}),
        ("GET", "/api/v1/actions", None, ANY_USER),
    ]


def _console_client(persona):
    client = Client()
    if persona != "anonymous":
        assert client.login(username=persona, password=PASSWORD)
    return client


def _judge(persona, allowed, status, location=""):
    if persona == "anonymous":
        return status == 302 and "/login/" in location
    if persona in allowed:
        return status not in (401, 403, 404) and "/login/" not in location
    return status in (403, 404)


def _with_compensation(world, people):
    # Requested by the operator: the requester may not decide it, so admin
    # (operator and reviewer) is tested on one requested by someone else.
    from workflows.models import Workflow

    comp = compensation.request(Workflow.objects.get(pk=world["failed"]), by=people["operator"], reason="undo")
    return {**world, "comp": comp.pk}


def test_every_console_url_for_every_persona(world, people):
    world = _with_compensation(world, people)
    wrong = []
    for method, path, data, allowed in console_routes(world):
        for persona in PERSONAS:
            for htmx in (False, True):
                client = _console_client(persona)
                headers = {"HTTP_HX_REQUEST": "true"} if htmx else {}
                with transaction.atomic():
                    sid = transaction.savepoint()
                    if method == "GET":
                        response = client.get(path, **headers)
                    else:
                        response = client.post(path, data, **headers)
                    transaction.savepoint_rollback(sid)
                if not _judge(persona, allowed, response.status_code, response.get("Location", "")):
                    wrong.append(f"{persona:9} {'htmx ' if htmx else ''}{method} {path} -> {response.status_code}")
    assert wrong == [], "\n".join(wrong)


def test_every_api_url_for_every_persona(world, people):
    world = _with_compensation(world, people)
    keys = {name: tokens.issue(people[name]) for name in PERSONAS if name != "anonymous"}
    wrong = []
    for method, path, data, allowed in api_routes(world):
        for persona in PERSONAS:
            headers = {"HTTP_AUTHORIZATION": f"Bearer {keys[persona]}"} if persona in keys else {}
            client = Client(**headers)
            with transaction.atomic():
                sid = transaction.savepoint()
                if method == "GET":
                    response = client.get(path)
                else:
                    response = client.post(path, data or {}, content_type="application/json")
                transaction.savepoint_rollback(sid)
            status = response.status_code
            ok = status == 401 if persona == "anonymous" else (
                status not in (401, 403, 404) if persona in allowed else status in (403, 404))
            if not ok:
                wrong.append(f"{persona:9} {method} {path} -> {status}")
    assert wrong == [], "\n".join(wrong)


def test_agents_cannot_reach_others_objects_by_guessing_ids(world, people):
    from workflows.models import Workflow

    theirs = plans.submit(people["operator"], ticket_plan("theirs")).workflow
    assert Workflow.objects.filter(pk=theirs.pk).exists()
    client = Client(HTTP_AUTHORIZATION=f"Bearer {tokens.issue(people['agent'])}")
    assert client.get(f"/api/v1/workflows/{theirs.pk}").status_code == 404
    console = _console_client("agent")
    assert console.get(f"/workflows/{theirs.pk}/").status_code == 404
