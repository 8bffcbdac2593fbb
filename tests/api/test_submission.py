"""Agents submit plans over the API; bad input is refused and stores nothing."""

import pytest

from tests.support.plans import ticket_plan
from workflows.models import ApiToken, AuditEvent, Step, Workflow


def test_submit_records_the_plan_as_planned(api):
    response = api["agent"].post("/workflows", ticket_plan())
    assert response.status_code == 201
    body = response.json()
    assert body["status"] == "PLANNED"
    assert [s["key"] for s in body["steps"]] == ["open", "note", "close"]
    assert all(s["status"] == "PENDING" and s["attempts"] == [] for s in body["steps"])
    assert body["steps"][0]["operation_key"] == f"{body['id']}:open"
    assert len(body["plan_hash"]) == 64
    assert AuditEvent.objects.filter(workflow_id=body["id"], verb="workflow.submitted").count() == 1


def test_same_submission_key_and_body_returns_the_same_workflow(api):
    first = api["agent"].post("/workflows", ticket_plan())
    again = api["agent"].post("/workflows", ticket_plan())
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    assert Workflow.objects.count() == 1


def test_same_submission_key_with_another_body_conflicts(api):
    api["agent"].post("/workflows", ticket_plan())
    other = ticket_plan()
    other["steps"][0]["args"]["title"] = "Another title"
    response = api["agent"].post("/workflows", other)
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "conflict"
    assert Workflow.objects.count() == 1


def test_submission_keys_are_per_submitter(api):
    assert api["agent"].post("/workflows", ticket_plan()).status_code == 201
    assert api["operator"].post("/workflows", ticket_plan()).status_code == 201
    assert Workflow.objects.count() == 2


def _without(field):
    plan = ticket_plan()
    del plan[field]
    return plan


def _step(index, **changes):
    plan = ticket_plan()
    plan["steps"][index].update(changes)
    return plan


BAD_PLANS = {
    "missing name": (_without("name"), "name"),
    "missing submission key": (_without("submission_key"), "submission_key"),
    "no steps": ({**ticket_plan(), "steps": []}, "steps"),
    "unknown action": (_step(1, action="rm.rf"), "steps.1.action"),
    "duplicate step key": (_step(2, key="open"), "steps.2.key"),
    "bad step key": (_step(0, key="../etc"), "steps.0.key"),
    "missing required arg": (_step(0, args={"body": "no title"}), "steps.0.args.title"),
    "args not an object": (_step(0, args=["a"]), "steps.0.args"),
    "reference to a later step": (_step(0, args={"title": {"$from": "close.result.id"}}), "steps.0.args.title"),
    "reference to an unknown step": (
        _step(1, args={"ticket_id": {"$from": "nope.result.id"}, "body": "x"}),
        "steps.1.args.ticket_id",
    ),
    "deadline out of range": ({**ticket_plan(), "deadline_seconds": 0}, "deadline_seconds"),
    "unknown compensation action": (
        _step(0, compensation={"action": "undo.everything"}),
        "steps.0.compensation.action",
    ),
    "idempotency declared as text": (
        _step(
            0,
            action="http.post",
            args={"url": "https://hooks.example.com/x", "receiver_honours_idempotency_key": "yes"},
        ),
        "steps.0.args.receiver_honours_idempotency_key",
    ),
}


@pytest.mark.parametrize("case", BAD_PLANS, ids=list(BAD_PLANS))
def test_bad_submission_is_refused_with_field_errors_and_nothing_stored(api, case):
    plan, field = BAD_PLANS[case]
    response = api["agent"].post("/workflows", plan)
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid"
    assert field in error["fields"], error
    assert Workflow.objects.count() == 0
    assert Step.objects.count() == 0
    assert AuditEvent.objects.count() == 0


def test_malformed_json_is_refused(api):
    response = api["agent"].client.post("/api/v1/workflows", "{not json", content_type="application/json")
    assert response.status_code == 400
    assert "error" in response.json()
    assert Workflow.objects.count() == 0


def test_requests_without_a_valid_token_are_refused(client, people):
    response = client.post("/api/v1/workflows", ticket_plan(), content_type="application/json")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthorized"
    forged = client.get("/api/v1/workflows", HTTP_AUTHORIZATION="Bearer dc_forged")
    assert forged.status_code == 401


def test_issue_token_stores_only_a_hash(people, capsys):
    from django.core.management import call_command

    call_command("issue_token", "agent")
    token = capsys.readouterr().out.strip()
    assert token.startswith("dc_")
    row = ApiToken.objects.get(user=people["agent"])
    assert token not in (row.token_hash, row.prefix)
    from django.test import Client

    response = Client(HTTP_AUTHORIZATION=f"Bearer {token}").get("/api/v1/workflows")
    assert response.status_code == 200


def test_agents_see_only_their_own_workflows(api):
    mine = api["agent"].post("/workflows", ticket_plan()).json()["id"]
    theirs = api["operator"].post("/workflows", ticket_plan("other")).json()["id"]
    assert api["agent"].get(f"/workflows/{theirs}").status_code == 404
    assert api["agent"].get(f"/workflows/{mine}").status_code == 200
    assert [w["id"] for w in api["agent"].get("/workflows").json()["items"]] == [mine]
    assert api["reviewer"].get(f"/workflows/{theirs}").status_code == 200


def test_list_is_keyset_paginated(api):
    ids = [api["agent"].post("/workflows", ticket_plan(f"k{n}")).json()["id"] for n in range(5)]
    seen, cursor = [], None
    while True:
        params = {"limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = api["agent"].get("/workflows", **params).json()
        seen += [w["id"] for w in page["items"]]
        cursor = page["next"]
        if not cursor:
            break
    assert seen == list(reversed(ids))
    assert api["agent"].get("/workflows", cursor="garbage!").status_code == 400
    assert api["agent"].get("/workflows", status="NOT_A_STATUS").status_code == 400


def test_openapi_schema_is_served(db, client):
    """Every request takes its database connection first (workflows.web.unavailable)."""
    response = client.get("/api/v1/openapi.json")
    assert response.status_code == 200
    assert "/api/v1/workflows" in response.json()["paths"]


def test_healthz(client, db):
    assert client.get("/healthz").json() == {"status": "ok"}
