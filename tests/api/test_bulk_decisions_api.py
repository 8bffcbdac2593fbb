"""Several plans decided in one call (docs/guides/reviewers.md#deciding-several-plans-at-once):
each item answers exactly what its own approve or reject call would have,
each is decided in its own transaction, and a bad call is refused whole
before anything is decided."""

import json
import uuid

import pytest

from tests.support import seeing
from tests.support.plans import ticket_plan
from workflows.models import Approval, AuditEvent, Workflow

NOOP = {"name": "Two noops", "steps": [{"key": "a", "action": "noop", "args": {"n": 1}}]}
UNKNOWN = str(uuid.UUID(int=7))


def submit(api, persona, plan, key) -> dict:
    answer = api[persona].post("/workflows", {**plan, "submission_key": key})
    assert answer.status_code == 201, answer.content
    return answer.json()


def raw_post(persona_api, path, body):
    """Exactly as sent: no field filled in from a read."""
    return persona_api.client.post(f"/api/v1{path}", body, content_type="application/json")


def seen_as_read(plan: dict) -> dict:
    seen = seeing.as_read(f"/workflows/{plan['id']}/approve")
    return {"revision": seen["revision"], "plan_hash": seen["plan_hash"], "preview_digests": seen["preview_digests"]}


def mixed_batch(api, copy: str) -> list[dict]:
    """One of each outcome for reviewer2, as items of a bulk call (each one
    also what its single call would send): decided, stale, the caller's own
    plan, unknown, previews not named, a rejection."""
    fine = submit(api, "agent", NOOP, f"fine-{copy}")
    stale = submit(api, "agent", NOOP, f"stale-{copy}")
    edited = api["reviewer"].post(
        f"/workflows/{stale['id']}/revise", {"steps": [{"key": "a", "args": {"n": 2}}], "revision": 1}
    )
    assert edited.status_code == 200, edited.content
    own = submit(api, "reviewer2", NOOP, f"own-{copy}")
    previewed = submit(api, "agent", ticket_plan(f"previewed-{copy}"), f"previewed-{copy}")
    seeing.previews_taken(previewed["id"])
    rejected = submit(api, "agent", NOOP, f"rejected-{copy}")
    return [
        {"workflow": fine["id"], "decision": "approve", "comment": "fine", **seen_as_read(fine)},
        {"workflow": stale["id"], "decision": "approve", "revision": 1, "plan_hash": stale["plan_hash"]},
        {"workflow": own["id"], "decision": "approve", **seen_as_read(own)},
        {"workflow": UNKNOWN, "decision": "approve", "revision": 1, "plan_hash": "a" * 64},
        {"workflow": previewed["id"], "decision": "approve", "revision": 1, "plan_hash": previewed["plan_hash"]},
        {
            "workflow": rejected["id"],
            "decision": "reject",
            "comment": "no",
            "revision": 1,
            "plan_hash": rejected["plan_hash"],
        },
    ]


def single_call(api, item: dict):
    body = {key: value for key, value in item.items() if key not in ("workflow", "decision")}
    if item["decision"] == "reject":
        body.pop("preview_digests", None)
    return raw_post(api["reviewer2"], f"/workflows/{item['workflow']}/{item['decision']}", body)


def test_each_item_answers_what_its_own_call_answers_on_an_identical_plan(api):
    items = mixed_batch(api, "bulk")
    answer = raw_post(api["reviewer2"], "/decisions", {"decisions": items})
    assert answer.status_code == 200, answer.content
    results = answer.json()["results"]
    assert [r["workflow"] for r in results] == [i["workflow"] for i in items]

    expected = []
    for item in mixed_batch(api, "single"):
        alone = single_call(api, item)
        expected.append(
            {"status": alone.status_code, **({"error": alone.json()["error"]} if alone.status_code != 200 else {})}
        )
    assert [{k: v for k, v in r.items() if k != "workflow"} for r in results] == expected
    # Member for member, in the same order: a client reads an item as it reads that call's answer.
    assert [json.dumps(r.get("error")) for r in results] == [json.dumps(e.get("error")) for e in expected]
    assert [r["status"] for r in results] == [200, 409, 403, 404, 400, 200]
    assert results[1]["error"]["code"] == "stale_revision" and results[1]["error"]["current"]["revision"] == 2
    assert set(results[4]["error"]["fields"]) == {"preview_digests"}
    statuses = dict(Workflow.objects.filter(pk__in=[i["workflow"] for i in items]).values_list("pk", "status"))
    assert [statuses.get(uuid.UUID(i["workflow"])) for i in items] == [
        "APPROVED",
        "PLANNED",
        "PLANNED",
        None,
        "PLANNED",
        "REJECTED",
    ]


def test_each_decision_is_its_own_audit_event_and_a_refused_one_records_nothing(api):
    items = mixed_batch(api, "audit")
    answer = raw_post(api["reviewer2"], "/decisions", {"decisions": items})
    assert answer.status_code == 200
    decided = AuditEvent.objects.filter(verb__in=["workflow.approved", "workflow.rejected"], actor="reviewer2")
    assert sorted((str(e.workflow_id), e.verb, e.data["comment"]) for e in decided) == sorted(
        [(items[0]["workflow"], "workflow.approved", "fine"), (items[5]["workflow"], "workflow.rejected", "no")]
    )
    assert set(Approval.objects.values_list("workflow_id", flat=True)) == {
        uuid.UUID(items[0]["workflow"]),
        uuid.UUID(items[5]["workflow"]),
    }


def test_a_call_of_101_is_400_and_decides_nothing(api):
    plans = [submit(api, "agent", NOOP, f"many-{n}") for n in range(101)]
    items = [{"workflow": p["id"], "decision": "approve", **seen_as_read(p)} for p in plans]
    answer = raw_post(api["reviewer"], "/decisions", {"decisions": items})
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "invalid" and "decisions" in answer.json()["error"]["fields"]
    assert not Approval.objects.exists()
    assert set(Workflow.objects.values_list("status", flat=True)) == {"PLANNED"}
    assert not AuditEvent.objects.filter(verb="workflow.approved").exists()
    allowed = raw_post(api["reviewer"], "/decisions", {"decisions": items[:100]})
    assert allowed.status_code == 200 and {r["status"] for r in allowed.json()["results"]} == {200}


@pytest.mark.parametrize(
    "change, field",
    [
        (lambda item: item.pop("plan_hash"), "decisions.1.plan_hash"),
        (lambda item: item.pop("revision"), "decisions.1.revision"),
        (lambda item: item.update(decision="maybe"), "decisions.1.decision"),
        (lambda item: item.update(revision="1"), "decisions.1.revision"),
        (lambda item: item.update(workflow="not-a-plan"), "decisions.1.workflow"),
        (lambda item: item.update(extra=1), "decisions.1.extra"),
    ],
)
def test_a_malformed_item_is_400_naming_it_and_decides_nothing(api, change, field):
    first, second = (submit(api, "agent", NOOP, f"bad-{n}") for n in range(2))
    items = [{"workflow": p["id"], "decision": "approve", **seen_as_read(p)} for p in (first, second)]
    change(items[1])
    answer = raw_post(api["reviewer"], "/decisions", {"decisions": items})
    assert answer.status_code == 400, answer.content
    assert field in answer.json()["error"]["fields"]
    assert not Approval.objects.exists()


@pytest.mark.parametrize("body", [{"decisions": []}, {}, {"decisions": {}}, []])
def test_no_decisions_is_400(api, body):
    answer = raw_post(api["reviewer"], "/decisions", body)
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "invalid"


def test_a_plan_named_twice_is_400_naming_the_second_and_decides_nothing(api):
    plan = submit(api, "agent", NOOP, "twice")
    other = submit(api, "agent", NOOP, "once")
    items = [
        {"workflow": plan["id"], "decision": "approve", **seen_as_read(plan)},
        {"workflow": other["id"], "decision": "approve", **seen_as_read(other)},
        {"workflow": plan["id"], "decision": "reject", **seen_as_read(plan)},
    ]
    answer = raw_post(api["reviewer"], "/decisions", {"decisions": items})
    assert answer.status_code == 400
    assert set(answer.json()["error"]["fields"]) == {"decisions.2.workflow"}
    assert not Approval.objects.exists()


@pytest.mark.parametrize("persona", ["agent", "operator", "auditor"])
def test_a_caller_who_is_no_reviewer_decides_nothing_each_item_403(api, persona):
    plan = submit(api, "admin", NOOP, f"not-{persona}")
    answer = raw_post(
        api[persona],
        "/decisions",
        {"decisions": [{"workflow": plan["id"], "decision": "approve", **seen_as_read(plan)}]},
    )
    assert answer.status_code == 200
    [result] = answer.json()["results"]
    alone = single_call(
        {"reviewer2": api[persona]}, {"workflow": plan["id"], "decision": "approve", **seen_as_read(plan)}
    )
    assert (result["status"], result.get("error")) == (alone.status_code, alone.json()["error"])
    assert result["status"] in (403, 404) and not Approval.objects.exists()


def test_without_a_token_the_call_is_401(client, db):
    answer = client.post("/api/v1/decisions", {"decisions": []}, content_type="application/json")
    assert answer.status_code == 401


def test_the_schema_names_the_operation_and_its_shapes(api):
    schema = api["reviewer"].get("/openapi.json").json()
    operation = schema["paths"]["/api/v1/decisions"]["post"]
    assert operation["operationId"] == "workflows_web_api_decide_many"
    components = schema["components"]["schemas"]
    assert components["DecisionsIn"]["properties"]["decisions"]["maxItems"] == 100
    assert {"workflow", "decision", "revision", "plan_hash"} <= set(components["BulkDecisionIn"]["required"])
    assert set(components["DecisionResultOut"]["required"]) == {"workflow", "status"}
