"""Every URL, for every persona: allowed or denied, console pages, their htmx
partials and the API alike."""

import pytest
from django.db import transaction

from tests.support import deciding as decide
from tests.support.personas import PASSWORD
from tests.support.plans import ticket_plan
from tests.support.seeing import Client
from workflows import actions
from workflows.actions import ActionError
from workflows.engine import execution, outcomes
from workflows.models import DeadLetter
from workflows.operations import bulk, compensation, plans, tokens

PERSONAS = ["anonymous", "agent", "reviewer", "operator", "auditor", "admin"]
STAFF = {"reviewer", "operator", "auditor", "admin"}
ANY_USER = {"agent", *STAFF}


@pytest.fixture
def world(people):
    """A plan awaiting review, and a failed workflow with a dead letter and a
    compensation awaiting authorization."""
    planned = plans.submit(people["agent"], ticket_plan("planned")).workflow
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
    execution.execute(execution.claim(failed.pk))  # the noop completes
    step = execution.claim(failed.pk)
    attempt = execution._request_attempt(step, step.fence)
    outcomes.record_failure(
        step, attempt, actions.get(step.action), ActionError("INVALID_ARGUMENTS", "HTTP 400"), step.fence
    )
    failed.refresh_from_db()
    job, _ = bulk.reconcile(people["operator"], {"workflow": failed.pk}, shown_filter={}, dry_run=True)
    return {
        "planned": planned.pk,
        "failed": failed.pk,
        "dead": DeadLetter.objects.get(workflow=failed).pk,
        "comp": None,
        "job": job.pk,
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
        (
            "POST",
            f"/workflows/{w['failed']}/steps/open/resolve",
            {"decision": "not_happened", "reason": "r"},
            {"operator", "admin"},
        ),
        (
            "POST",
            f"/workflows/{w['failed']}/steps/open/resolve/confirm",
            {"reason": "r", "resolution_digest": "d"},
            {"reviewer", "operator", "admin"},
        ),
        ("GET", f"/workflows/{w['failed']}/compensate", None, {"operator", "admin"}),
        # A role that reads none of a kind is refused its list (403), as its
        # details; agents read their own plans' dead letters (tests/api/test_read_side.py).
        ("GET", "/compensations/", None, {"reviewer", "operator", "auditor", "admin"}),
        ("GET", "/dead-letters/", None, {"agent", "operator", "auditor", "admin"}),
        ("GET", f"/dead-letters/{w['dead']}/", None, {"agent", "operator", "auditor", "admin"}),
        ("POST", f"/dead-letters/{w['dead']}/replay", {"reason": "r"}, {"operator", "admin"}),
        ("POST", f"/dead-letters/{w['dead']}/discard", {"reason": "r"}, {"operator", "admin"}),
        ("POST", "/dead-letters/bulk/preview", {"ids": [str(w["dead"])]}, {"operator", "admin"}),
        ("POST", "/dead-letters/bulk/replay", {"ids": [str(w["dead"])], "reason": "r"}, {"operator", "admin"}),
        ("POST", "/dead-letters/reconcile", {"ids": [str(w["dead"])], "dry_run": "1"}, {"operator", "admin"}),
        ("GET", f"/jobs/{w['job']}/", None, {"operator", "auditor", "admin"}),
        ("POST", f"/jobs/{w['job']}/pause", {}, {"operator", "admin"}),
        ("POST", f"/jobs/{w['job']}/resume", {}, {"operator", "admin"}),
        ("POST", f"/jobs/{w['job']}/replay", {"only": "safe", "reason": "r"}, {"operator", "admin"}),
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
        (
            "POST",
            f"/api/v1/workflows/{w['planned']}/revise",
            {"steps": [{"key": "open", "args": {"title": "t"}}]},
            {"reviewer", "admin"},
        ),
        ("POST", f"/api/v1/workflows/{w['planned']}/claim", {}, {"reviewer", "admin"}),
        ("POST", f"/api/v1/workflows/{w['planned']}/release", {}, {"reviewer", "admin"}),
        ("POST", f"/api/v1/workflows/{w['planned']}/assign", {"to": "reviewer2"}, {"reviewer", "admin"}),
        (
            "POST",
            f"/api/v1/workflows/{w['failed']}/steps/open/resolve",
            {"decision": "not_happened", "reason": "r"},
            {"operator", "admin"},
        ),
        (
            "POST",
            f"/api/v1/workflows/{w['failed']}/steps/open/resolve/confirm",
            {"reason": "r", "resolution_digest": "d"},
            {"reviewer", "operator", "admin"},
        ),
        # The agent submitted the failed workflow: its dead letter is the agent's to see.
        ("GET", "/api/v1/dead-letters", None, {"agent", "operator", "auditor", "admin"}),
        ("GET", f"/api/v1/dead-letters/{w['dead']}", None, {"agent", "operator", "auditor", "admin"}),
        (
            "POST",
            "/api/v1/dead-letters/replay",
            {"filter": {"workflow": str(w["failed"])}, "dry_run": True},
            {"operator", "admin"},
        ),
        (
            "POST",
            "/api/v1/dead-letters/reconcile",
            {"filter": {"workflow": str(w["failed"])}, "dry_run": True},
            {"operator", "admin"},
        ),
        ("GET", f"/api/v1/jobs/{w['job']}", None, {"operator", "auditor", "admin"}),
        ("POST", f"/api/v1/jobs/{w['job']}/pause", {}, {"operator", "admin"}),
        ("POST", f"/api/v1/jobs/{w['job']}/resume", {}, {"operator", "admin"}),
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
    return status == 403  # a wrong role, on lists and details alike; 404 is for not yours


def _with_compensation(world, people):
    # Requested by the operator: the requester may not decide it, so admin
    # (operator and reviewer) is tested on one requested by someone else.
    from workflows.models import Workflow

    comp = compensation.request(Workflow.objects.get(pk=world["failed"]), by=people["operator"], reason="undo")
    return {**world, "comp": comp.pk}


@pytest.mark.once
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


@pytest.mark.once
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
            ok = (
                status == 401
                if persona == "anonymous"
                else (status not in (401, 403, 404) if persona in allowed else status == 403)
            )
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


# --- the team dimension (docs/explanation/teams.md#teams) ------------------------------------------
#
# The same world, in team `blue`: its agent's token is blue's, and blue's own
# reviewers, operators and auditors handle it. Every URL and API operation is
# tried by a member of blue (allowed as the role allows), by a member of
# another team (the `default` personas: 404 for blue's objects, lists without
# them, and none of blue's rows changed), and by global roles (an auditor in
# the `global` group, a superuser), who see every team.

from django.contrib.auth.models import Group, User  # noqa: E402

from workflows import roles  # noqa: E402
from workflows.models import Compensation, Job, Team, Workflow  # noqa: E402
from workflows.webhooks import endpoints as webhook_endpoints  # noqa: E402
from workflows.webhooks.models import WebhookDelivery, WebhookEndpoint, WebhookSecret  # noqa: E402

ROLE_GROUPS = {
    "reviewer": [roles.REVIEWERS],
    "reviewer2": [roles.REVIEWERS],
    "operator": [roles.OPERATORS],
    "auditor": [roles.AUDITORS],
    "admin": [roles.REVIEWERS, roles.OPERATORS, roles.AUDITORS],
}
# Each team persona, and the persona of the matrix whose rights it has.
BLUE = {f"blue-{role}": role for role in ("reviewer", "operator", "auditor", "admin")}
OTHER = {role: role for role in ("reviewer", "operator", "auditor", "admin")}
GLOBAL = {"global-auditor": "auditor", "root": "admin"}


def _user(name, groups, team=None, **extra):
    user = User.objects.create_user(name, password=PASSWORD, **extra)
    user.groups.add(*(Group.objects.get_or_create(name=group)[0] for group in groups))
    if team is not None:
        team.members.add(user)
    return user


@pytest.fixture
def blue_world(people):
    blue = Team.objects.create(name="blue")
    members = {f"blue-{role}": _user(f"blue-{role}", groups, blue) for role, groups in ROLE_GROUPS.items()}
    _user("global-auditor", [roles.AUDITORS, roles.GLOBAL])
    _user("root", [roles.REVIEWERS, roles.OPERATORS, roles.AUDITORS], is_superuser=True)
    tokens.issue(people["agent"], team=blue)  # the agent's newest token: the plans below are blue's
    planned = plans.submit(people["agent"], ticket_plan("blue-planned")).workflow
    body = {
        "name": "half done",
        "submission_key": "blue-failed",
        "steps": [
            {"key": "first", "action": "noop", "args": {}},
            {"key": "open", "action": "ticket.create", "args": {"title": "t"}},
        ],
    }
    failed = plans.submit(people["agent"], body).workflow
    assert planned.team == failed.team == blue
    decide.approve(failed, by=members["blue-reviewer2"])
    execution.execute(execution.claim(failed.pk))
    step = execution.claim(failed.pk)
    attempt = execution._request_attempt(step, step.fence)
    outcomes.record_failure(
        step, attempt, actions.get(step.action), ActionError("INVALID_ARGUMENTS", "HTTP 400"), step.fence
    )
    comp = compensation.request(failed, by=members["blue-operator"], reason="undo")
    endpoint, _ = webhook_endpoints.create(by=members["blue-operator"], url="https://hooks.example.com/blue")
    assert endpoint.team == blue
    delivery = WebhookDelivery.objects.create(
        event="workflow.failed", workflow=failed, endpoint=endpoint, body="{}", status=WebhookDelivery.Status.DEAD
    )
    job, _ = bulk.reconcile(members["blue-operator"], {"workflow": failed.pk}, shown_filter={}, dry_run=True)
    return {
        "planned": planned.pk,
        "failed": failed.pk,
        "dead": DeadLetter.objects.get(workflow=failed).pk,
        "comp": comp.pk,
        "endpoint": endpoint.pk,
        "delivery": delivery.pk,
        "job": job.pk,
    }


def team_console_routes(w):
    """The matrix's console routes for blue's world (handed to blue's second
    reviewer), and the rest of the console: steps, previews, policies."""
    routes = [
        (method, path, {**data, "to": "blue-reviewer2"} if data and "to" in data else data, allowed)
        for method, path, data, allowed in console_routes(w)
    ]
    return routes + [
        ("GET", f"/workflows/{w['planned']}/steps/", None, ANY_USER),
        ("POST", f"/workflows/{w['planned']}/previews/retake", {}, {"reviewer", "admin"}),
        ("GET", "/actions/", None, {"operator", "auditor", "admin"}),
        ("GET", "/actions/noop/policy", None, {"operator", "auditor", "admin"}),
    ]


def team_api_routes(w):
    routes = [
        (method, path, {**data, "to": "blue-reviewer2"} if data and "to" in data else data, allowed)
        for method, path, data, allowed in api_routes(w)
    ]
    return routes + [
        ("POST", f"/api/v1/workflows/{w['planned']}/previews/retake", {}, {"reviewer", "admin"}),
        ("GET", "/api/v1/actions/noop/policy", None, {"operator", "auditor", "admin"}),
        ("GET", "/api/v1/webhooks", None, {"operator", "auditor", "admin"}),
        ("GET", f"/api/v1/webhooks/{w['endpoint']}", None, {"operator", "auditor", "admin"}),
        ("PATCH", f"/api/v1/webhooks/{w['endpoint']}", {"description": "d"}, {"operator", "admin"}),
        ("POST", f"/api/v1/webhooks/{w['endpoint']}/secret", {}, {"operator", "admin"}),
        ("DELETE", f"/api/v1/webhooks/{w['endpoint']}", None, {"operator", "admin"}),
        ("GET", "/api/v1/webhook-deliveries", None, {"operator", "auditor", "admin"}),
        ("POST", f"/api/v1/webhook-deliveries/{w['delivery']}/replay", {"reason": "r"}, {"operator", "admin"}),
        ("POST", "/api/v1/audit/verify", {"workflow": str(w["planned"])}, {"auditor", "admin"}),
    ]


def _blue_rows(w) -> dict:
    """The state of blue's rows that a request might change."""
    return {
        "workflows": dict(Workflow.objects.filter(pk__in=[w["planned"], w["failed"]]).values_list("pk", "status")),
        "claims": list(Workflow.objects.filter(pk=w["planned"]).values_list("claimed_by", "revision")),
        "dead": DeadLetter.objects.get(pk=w["dead"]).status,
        "comp": Compensation.objects.get(pk=w["comp"]).status,
        "deliveries": list(WebhookDelivery.objects.filter(pk=w["delivery"]).values_list("status", "retry_base")),
        "endpoint": list(WebhookEndpoint.objects.filter(pk=w["endpoint"]).values_list("description", "enabled")),
        "secrets": WebhookSecret.objects.filter(endpoint=w["endpoint"]).count(),
        "job": Job.objects.get(pk=w["job"]).status,
    }


def _names_blue(text: str, w) -> bool:
    return any(str(w[key]) in text for key in ("planned", "failed", "dead", "comp", "endpoint", "delivery", "job"))


def _judge_team(kind, role, allowed, path, data, status, location, body, w, before, after):
    """kind: `blue` (right team), `other` (another team), `global`."""
    if kind != "other":
        if role in allowed:
            return status not in (401, 403, 404) and "/login/" not in location
        return status == 403
    if before != after:
        return False  # another team's request changed blue's rows
    names_blue = _names_blue(path, w) or (path.endswith("/audit/verify") and (data or {}).get("workflow"))
    if role not in allowed:
        # A kind the role does not read is 403 before any lookup; an action on
        # blue's object of a kind it reads is 404 (it is looked up first).
        return status in (403, 404) if names_blue else status == 403
    if names_blue:
        return status == 404  # blue's object: as if it did not exist
    # A list, a filter or a selection: answered, without blue's rows.
    return status not in (401, 403, 404) and not _names_blue(body, w)


def _team_personas():
    return [
        *(("blue", name, role) for name, role in BLUE.items()),
        *(("other", name, role) for name, role in OTHER.items()),
        *(("global", name, role) for name, role in GLOBAL.items()),
    ]


@pytest.mark.once
def test_every_console_url_for_each_team_and_global_roles(blue_world):
    wrong = []
    for method, path, data, allowed in team_console_routes(blue_world):
        for kind, persona, role in _team_personas():
            client = _console_client(persona)
            with transaction.atomic():
                sid = transaction.savepoint()
                before = _blue_rows(blue_world)
                response = client.get(path) if method == "GET" else client.post(path, data)
                body = b"".join(response.streaming_content) if response.streaming else response.content
                after = _blue_rows(blue_world)
                transaction.savepoint_rollback(sid)
            if not _judge_team(
                kind,
                role,
                allowed,
                path,
                data,
                response.status_code,
                response.get("Location", ""),
                body.decode(errors="replace"),
                blue_world,
                before,
                after,
            ):
                wrong.append(f"{kind:6} {persona:14} {method} {path} -> {response.status_code}")
    assert wrong == [], "\n".join(wrong)


@pytest.mark.once
def test_every_api_operation_for_each_team_and_global_roles(blue_world):
    # A token reads its own team's work alone (docs/explanation/decisions.md#bound-decisions): the global people's are
    # blue's.
    blue = Team.objects.get(name="blue")
    keys = {
        persona: tokens.issue(User.objects.get(username=persona), team=blue if kind == "global" else None)
        for kind, persona, _ in _team_personas()
    }
    wrong = []
    for method, path, data, allowed in team_api_routes(blue_world):
        for kind, persona, role in _team_personas():
            client = Client(HTTP_AUTHORIZATION=f"Bearer {keys[persona]}")
            with transaction.atomic():
                sid = transaction.savepoint()
                before = _blue_rows(blue_world)
                if method == "GET":
                    response = client.get(path)
                elif method == "DELETE":
                    response = client.delete(path)
                else:
                    send = client.patch if method == "PATCH" else client.post
                    response = send(path, data or {}, content_type="application/json")
                after = _blue_rows(blue_world)
                transaction.savepoint_rollback(sid)
            if not _judge_team(
                kind,
                role,
                allowed,
                path,
                data,
                response.status_code,
                "",
                response.content.decode(),
                blue_world,
                before,
                after,
            ):
                wrong.append(f"{kind:6} {persona:14} {method} {path} -> {response.status_code}")
    assert wrong == [], "\n".join(wrong)


def test_the_global_group_gives_nothing_to_a_reviewer(blue_world):
    _user("global-reviewer", [roles.REVIEWERS, roles.GLOBAL])
    client = _console_client("global-reviewer")
    assert client.get(f"/workflows/{blue_world['planned']}/").status_code == 404
    assert str(blue_world["planned"]) not in client.get("/").content.decode()
