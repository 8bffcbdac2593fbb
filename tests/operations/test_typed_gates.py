"""Typed decisions at gates (docs/explanation/review.md#typed-decisions): a gate's `options`
and `input_schema`, checked with the plan; a decision's `choice` and
`input`, checked against them (400 with `fields`, nothing recorded); the
first approver gives the input, another person approves it; a step's
`when` runs it on one choice only, else it ends SKIPPED; `$decision`
takes the input into later args; all of it inside the plan hash, the audit
and the approval proof."""

import copy
import importlib
import json

import pytest

from tests.support.personas import PASSWORD
from tests.support.running import run_until
from tests.support.seeing import Client
from workflows.chat import blocks, buttons
from workflows.db import canonical_json, sha256_hex
from workflows.engine import binding, choices, proofs
from workflows.models import Attempt, AuditEvent, ChatMessage, GateApproval, Step, Workflow
from workflows.operations import plans
from workflows.states import StepStatus

SCHEMA = {
    "type": "object",
    "properties": {
        "size": {"type": "integer", "minimum": 1},
        "reason": {"type": "string"},
        "urgent": {"type": "boolean"},
        "tier": {"enum": ["gold", "silver"]},
        "tags": {"type": "array"},
    },
    "required": ["size"],
    "additionalProperties": False,
}


def typed_plan(key="typed-1", **gate) -> dict:
    return {
        "name": "Resize once a person chose how",
        "submission_key": key,
        "steps": [
            {"key": "look", "action": "noop", "args": {"n": 1}},
            {
                "key": "decide",
                "action": "noop",
                "args": {},
                "gate": {"approvals": 2, "note": "Pick a size", "options": ["small", "large"], "input_schema": SCHEMA}
                | gate,
            },
            {
                "key": "small",
                "action": "noop",
                "args": {"size": {"$decision": "decide.input.size"}},
                "when": {"gate": "decide", "choice": "small"},
            },
            {"key": "large", "action": "noop", "args": {"n": 3}, "when": {"gate": "decide", "choice": "large"}},
        ],
    }


def at_gate(api, **gate) -> str:
    submitted = api["agent"].post("/workflows", typed_plan(**gate))
    assert submitted.status_code == 201, submitted.content
    workflow_id = submitted.json()["id"]
    assert api["reviewer"].post(f"/workflows/{workflow_id}/approve", {}).status_code == 200
    run_until(workflow_id, "WAITING_GATE")
    return workflow_id


def _edit(path: str, value):
    """A change to the typed plan at a dotted path (`steps.1.gate.options`)."""

    def change(plan):
        *parents, last = path.split(".")
        node = plan
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
        return plan

    return change


@pytest.mark.parametrize(
    ("where", "value"),
    [
        ("steps.1.gate.options", ["small", "small"]),
        ("steps.1.gate.options", ["small", ""]),
        ("steps.1.gate.options", ["small", 3]),
        ("steps.1.gate.input_schema", {"type": "object", "properties": {"size": {"type": "huge"}}}),
        ("steps.1.gate.input_schema", {"type": "object", "description": "x" * 20_000}),
        ("steps.1.gate.approvals", 1),
        ("steps.2.when", {"gate": "look", "choice": "small"}),
        ("steps.2.when", {"gate": "decide", "choice": "medium"}),
        ("steps.2.args", {"size": {"$decision": "nowhere.input.size"}}),
        ("steps.2.args", {"size": {"$decision": "decide.input.colour"}}),
    ],
)
def test_bad_typed_gate_definitions_are_refused_with_fields(api, where, value):
    refused = api["agent"].post("/workflows", _edit(where, value)(typed_plan()))
    assert refused.status_code == 400, refused.content
    error = refused.json()["error"]
    assert error["code"] == "invalid"
    assert any(path.startswith(where) for path in error["fields"]), error["fields"]
    assert not Workflow.objects.exists()


def test_a_when_must_name_an_earlier_gate():
    plan = typed_plan()
    plan["steps"].insert(1, {"key": "early", "action": "noop", "args": {}, "when": {"gate": "decide", "choice": "a"}})
    assert "steps.1.when.gate" in plans.validate(plan)


def test_a_step_reads_a_result_of_another_branch_only_on_that_branch():
    plan = typed_plan()
    plan["steps"].append({"key": "after", "action": "noop", "args": {"n": {"$from": "large.result.n"}}})
    assert plans.validate(plan) == {"steps.4.args.n": choices.OTHER_BRANCH}
    plan["steps"][4]["when"] = {"gate": "decide", "choice": "large"}
    assert plans.validate(plan) == {}


def test_the_decision_is_checked_against_the_gate_and_nothing_changes_on_bad_input(api):
    workflow_id = at_gate(api)
    url = f"/workflows/{workflow_id}/steps/decide/approve"
    bad = [
        ({"input": {"size": 2}}, "choice"),
        ({"choice": "medium", "input": {"size": 2}}, "choice"),
        ({"choice": "small"}, "input"),
        ({"choice": "small", "input": {"size": "two"}}, "input.size"),
        ({"choice": "small", "input": {"size": 2, "colour": "red"}}, "input"),
    ]
    for body, field in bad:
        refused = api["reviewer"].post(url, body)
        assert refused.status_code == 400, (body, refused.content)
        assert refused.json()["error"]["code"] == "invalid"
        assert field in refused.json()["error"]["fields"], (body, refused.json())
    assert not GateApproval.objects.exists()
    assert Workflow.objects.get(pk=workflow_id).status == "WAITING_GATE"
    assert not AuditEvent.objects.filter(workflow_id=workflow_id, verb__startswith="gate.").exists()


def test_another_person_approves_the_input_the_first_approver_gave(api, people):
    workflow_id = at_gate(api)
    url = f"/workflows/{workflow_id}/steps/decide/approve"
    given = {"choice": "small", "input": {"size": 2}}
    first = api["reviewer"].post(url, given)
    assert first.status_code == 200 and first.json()["status"] == "WAITING_GATE"
    assert api["reviewer"].post(url, given).status_code == 409  # the same person cannot approve their own input
    shown = api["reviewer2"].get(f"/workflows/{workflow_id}").json()["gate"]
    assert (shown["standing"], shown["options"]) == (given, ["small", "large"])
    differs = api["reviewer2"].post(url, {"choice": "small", "input": {"size": 5}})
    assert differs.status_code == 409
    assert differs.json()["error"]["code"] == "decision_differs"
    assert differs.json()["error"]["current"] == given
    assert GateApproval.objects.count() == 1
    second = api["reviewer2"].post(url, given)
    assert second.status_code == 200 and second.json()["status"] == "RUNNING"
    opened = AuditEvent.objects.get(workflow_id=workflow_id, verb="gate.opened")
    assert (opened.data["choice"], opened.data["input"]) == ("small", {"size": 2})
    recorded = AuditEvent.objects.get(workflow_id=workflow_id, verb="gate.approval_recorded")
    assert recorded.data["input"] == {"size": 2}


def test_a_gate_approval_seals_its_choice_and_input(api):
    workflow_id = at_gate(api)
    api["reviewer"].post(f"/workflows/{workflow_id}/steps/decide/approve", {"choice": "small", "input": {"size": 2}})
    approval = GateApproval.objects.get()
    assert binding.verifies(approval)
    GateApproval.objects.filter(pk=approval.pk).update(input={"size": 200})
    approval.refresh_from_db()
    assert not binding.verifies(approval)


def test_the_other_branch_is_skipped_and_the_decision_reaches_the_args(api):
    workflow_id = at_gate(api)
    url = f"/workflows/{workflow_id}/steps/decide/approve"
    for persona in ("reviewer", "reviewer2"):
        assert api[persona].post(url, {"choice": "small", "input": {"size": 2}}).status_code == 200

    assert run_until(workflow_id, {"COMPLETE", "FAILED"}) == "COMPLETE"

    steps = {s.key: s for s in Step.objects.filter(workflow_id=workflow_id)}
    assert steps["small"].status == StepStatus.COMPLETE and steps["small"].result == {"size": 2}
    assert steps["large"].status == StepStatus.SKIPPED and not steps["large"].attempts.exists()
    assert steps["decide"].gate_decision == {"choice": "small", "input": {"size": 2}}
    assert AuditEvent.objects.filter(workflow_id=workflow_id, verb="step.skipped").count() == 1
    body = api["agent"].get(f"/workflows/{workflow_id}").json()
    assert {s["key"]: s["status"] for s in body["steps"]}["large"] == "SKIPPED"


def test_when_review_and_gate_fields_are_inside_the_plan_hash(api):
    base = typed_plan()
    variants = {
        "when": _edit("steps.3.when", {"gate": "decide", "choice": "small"}),
        "options": _edit("steps.1.gate.options", ["small", "large", "huge"]),
        "input_schema": _edit("steps.1.gate.input_schema", {**SCHEMA, "required": []}),
        "review": _edit("review", {"deadline_seconds": 600}),
    }
    hashes = {"base": api["agent"].post("/workflows", base).json()["plan_hash"]}
    for index, (name, change) in enumerate(variants.items()):
        plan = change(copy.deepcopy(base))
        plan["submission_key"] = f"variant-{index}"
        answer = api["agent"].post("/workflows", plan)
        assert answer.status_code == 201, answer.content
        hashes[name] = answer.json()["plan_hash"]
    assert len(set(hashes.values())) == len(hashes), hashes
    # And what a claim recomputes is that same hash (the review included).
    for workflow in Workflow.objects.all():
        assert binding.stored_hashes([(workflow.pk, 0)])[workflow.pk, 0] == workflow.plan_hash


def test_the_decisions_are_bound_into_every_later_approval_proof(api):
    workflow_id = at_gate(api)
    url = f"/workflows/{workflow_id}/steps/decide/approve"
    for persona in ("reviewer", "reviewer2"):
        api[persona].post(url, {"choice": "large", "input": {"size": 4}})
    later = Step.objects.select_related("workflow").get(workflow_id=workflow_id, key="large")
    earlier = Step.objects.select_related("workflow").get(workflow_id=workflow_id, key="look")

    attempt = Attempt(plan_hash="0" * 64, proof_approvers=[])
    claims = proofs.context(later, attempt, "0" * 64).claims("POST", "https://desk.example/x", b"", jti="j")
    rows = [["decide", "large", {"size": 4}]]
    assert claims["decisions_sha256"] == sha256_hex(canonical_json(rows))
    assert choices.Decisions(earlier).digest() is None


def test_the_console_draws_the_gate_form_from_its_schema_and_posts_it(api, people):
    workflow_id = at_gate(api, note="<script>alert(1)</script>", options=["small", "large", "<b>huge</b>"])
    console = Client()
    assert console.login(username="reviewer", password=PASSWORD)
    page = console.get(f"/workflows/{workflow_id}/").content.decode()
    assert '<input type="number" step="1" id="gate-input.size" name="input.size">' in page
    assert 'type="checkbox" id="gate-input.urgent"' in page
    assert '<option value="&quot;gold&quot;">gold</option>' in page
    assert 'textarea id="gate-input.tags"' in page
    assert "&lt;b&gt;huge&lt;/b&gt;" in page and "<b>huge</b>" not in page
    assert "<script>alert(1)</script>" not in page

    posted = console.post(
        f"/workflows/{workflow_id}/steps/decide/approve",
        {"choice": "small", "input.size": "two", "input.tags": "[]"},
    )
    assert posted.status_code == 302 and not GateApproval.objects.exists()
    posted = console.post(
        f"/workflows/{workflow_id}/steps/decide/approve",
        {"choice": "small", "input.size": "3", "input.tier": json.dumps("gold"), "input.tags": '["a"]'},
    )
    assert posted.status_code == 302
    approval = GateApproval.objects.get()
    assert (approval.choice, approval.input) == ("small", {"size": 3, "urgent": False, "tier": "gold", "tags": ["a"]})

    other = Client()
    assert other.login(username="reviewer2", password=PASSWORD)
    page = other.get(f"/workflows/{workflow_id}/").content.decode()
    assert 'data-testid="gate-standing"' in page and 'name="input_json"' in page
    other.post(
        f"/workflows/{workflow_id}/steps/decide/approve",
        {"choice": "small", "input_json": json.dumps(approval.input)},
    )
    assert Workflow.objects.get(pk=workflow_id).status == "RUNNING"


def test_the_migration_gives_a_planned_plan_with_a_review_its_new_hash(api):
    from django.apps import apps

    rehash = importlib.import_module("workflows.migrations.0036_typed_gates").rehash_planned_reviews
    plan = typed_plan() | {"review": {"deadline_seconds": 600}}
    workflow = Workflow.objects.get(pk=api["agent"].post("/workflows", plan).json()["id"])
    old = sha256_hex(canonical_json(workflow.plan))  # as plans were hashed before the review joined
    Workflow.objects.filter(pk=workflow.pk).update(plan_hash=old)

    rehash(apps, None)

    workflow.refresh_from_db()
    assert workflow.plan_hash != old
    assert workflow.plan_hash == binding.stored_hashes([(workflow.pk, 0)])[workflow.pk, 0]


def test_a_typed_gate_is_decided_in_the_console_not_by_a_chat_button(api):
    workflow_id = at_gate(api)
    shown = blocks.render(ChatMessage(workflow_id=workflow_id, kind=ChatMessage.Kind.GATE, key="decide"))
    assert "decide in the console" in json.dumps(shown.blocks)
    assert buttons.GATE_APPROVE not in json.dumps(shown.blocks)
