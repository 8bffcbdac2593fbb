"""Gates in the middle of a plan (docs/explanation/review.md#review): the run goes up to a gated
step and waits (WAITING_GATE) until N reviewers approve the gate, having
seen the results before it; a rejected gate ends the workflow REJECTED with
compensation of what completed on offer; a gate waiting past the deadline
expires the workflow. Gates are part of the plan hash, and a worker killed
while the workflow waits changes nothing."""

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from tests.support.personas import PASSWORD
from tests.support.plans import gated_plan
from tests.support.running import run_until, wait_for_status
from tests.support.seeing import Client
from workflows.engine import binding, expiry, gates
from workflows.engine import policy as policies
from workflows.models import AuditEvent, GateApproval, Step, Workflow
from workflows.states import StepStatus
from workflows.webhooks.models import WebhookDelivery


def approved(api, **options) -> str:
    submitted = api["agent"].post("/workflows", gated_plan(**options))
    assert submitted.status_code == 201, submitted.content
    workflow_id = submitted.json()["id"]
    answer = api["reviewer"].post(f"/workflows/{workflow_id}/approve", {})
    assert answer.status_code == 200, answer.content
    # A live worker, woken by the approval's commit, may have started the plan
    # before the answer was written.
    assert answer.json()["status"] in {"APPROVED", "RUNNING", "WAITING_GATE"}
    return workflow_id


def at_gate(api, desk, **options) -> str:
    workflow_id = approved(api, **options)
    run_until(workflow_id, "WAITING_GATE")
    return workflow_id


def test_the_run_pauses_before_the_gated_step_and_shows_what_the_approvers_bind(api, desk):
    workflow_id = at_gate(api, desk)

    body = api["agent"].get(f"/workflows/{workflow_id}").json()
    steps = {step["key"]: step for step in body["steps"]}
    assert body["status"] == "WAITING_GATE"
    assert (steps["open"]["status"], steps["close"]["status"]) == ("COMPLETE", "WAITING_GATE")
    assert steps["close"]["gate"] == {"approvals": 1, "note": "Check the ticket before closing it"}
    assert not steps["close"]["attempts"]
    ticket = desk.tickets()[0]
    assert body["gate"]["step"] == "close" and (body["gate"]["approvals"], body["gate"]["required"]) == (0, 1)
    assert body["gate"]["results_digest"] == gates.results_digest(
        Step.objects.get(workflow_id=workflow_id, key="close")
    )
    assert ticket["status"] == "open"
    assert AuditEvent.objects.filter(workflow_id=workflow_id, verb="workflow.waiting_gate").count() == 1


def test_two_reviewers_open_a_two_approval_gate_and_the_run_completes(api, desk):
    workflow_id = at_gate(api, desk, approvals=2)
    gate = api["reviewer"].get(f"/workflows/{workflow_id}").json()["gate"]

    first = api["reviewer"].post(
        f"/workflows/{workflow_id}/steps/close/approve",
        {"comment": "ticket looks right", "results_digest": gate["results_digest"]},
    )
    assert first.status_code == 200 and first.json()["status"] == "WAITING_GATE"
    assert first.json()["gate"]["approvals"] == 1
    assert api["reviewer"].post(f"/workflows/{workflow_id}/steps/close/approve", {}).status_code == 409  # once
    second = api["reviewer2"].post(f"/workflows/{workflow_id}/steps/close/approve", {})
    assert second.json()["status"] == "RUNNING"

    assert run_until(workflow_id, "COMPLETE") == "COMPLETE"
    assert desk.tickets()[0]["status"] == "closed"
    assert GateApproval.objects.filter(workflow_id=workflow_id).count() == 2
    assert AuditEvent.objects.filter(workflow_id=workflow_id, verb="gate.opened").count() == 1


def test_the_submitter_and_non_reviewers_cannot_decide_a_gate(api, desk):
    workflow_id = at_gate(api, desk)
    for persona in ("agent", "operator", "auditor"):
        assert api[persona].post(f"/workflows/{workflow_id}/steps/close/approve", {}).status_code == 403, persona
        assert api[persona].post(f"/workflows/{workflow_id}/steps/close/reject", {}).status_code == 403, persona
    assert api["reviewer"].post(f"/workflows/{workflow_id}/steps/open/approve", {}).status_code == 409  # no gate
    assert api["reviewer"].post(f"/workflows/{workflow_id}/steps/nope/approve", {}).status_code == 404
    assert not GateApproval.objects.exists()


def test_an_approval_of_results_that_changed_is_refused(api, desk):
    workflow_id = at_gate(api, desk)
    refused = api["reviewer"].post(f"/workflows/{workflow_id}/steps/close/approve", {"results_digest": "0" * 64})
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "results_changed"
    assert not GateApproval.objects.exists()
    assert Workflow.objects.get(pk=workflow_id).status == "WAITING_GATE"


def test_a_gate_approval_no_longer_valid_blocks_the_step_at_the_recheck(api, desk, people):
    """The recheck before the gated step's attempt counts the gate's
    approvals again: an approver deactivated since no longer counts."""
    workflow_id = at_gate(api, desk)
    api["reviewer2"].post(f"/workflows/{workflow_id}/steps/close/approve", {})
    people["reviewer2"].is_active = False
    people["reviewer2"].save()

    run_until(workflow_id, {"FAILED", "COMPLETE"})

    step = Step.objects.get(workflow_id=workflow_id, key="close")
    assert step.status == StepStatus.BLOCKED and not step.attempts.exists()
    problems = AuditEvent.objects.filter(verb="step.blocked", object_id=str(step.pk)).last().data["problems"]
    assert any(problem.startswith("gate approved") for problem in problems), problems
    assert desk.tickets()[0]["status"] == "open"


def test_a_rejected_gate_ends_the_workflow_rejected_and_offers_compensation(api, desk):
    workflow_id = at_gate(api, desk)
    rejected = api["reviewer"].post(f"/workflows/{workflow_id}/steps/close/reject", {"comment": "wrong ticket"})
    assert rejected.status_code == 200 and rejected.json()["status"] == "REJECTED"
    assert Step.objects.get(workflow_id=workflow_id, key="close").status == "PENDING"  # never runs

    requested = api["operator"].post(f"/workflows/{workflow_id}/compensations", {"reason": "undo the ticket"})
    assert requested.status_code in (200, 201), requested.content
    compensation = requested.json()
    authorized = api["reviewer2"].post(f"/compensations/{compensation['id']}/authorize", {})
    assert authorized.status_code == 200, authorized.content
    assert run_until(workflow_id, "COMPENSATED") == "COMPENSATED"
    assert desk.tickets()[0]["status"] == "closed"  # closed by the compensation, once
    assert [e["path"] for e in desk.ledger()].count(f"/tickets/{desk.tickets()[0]['id']}/close") == 1


def test_a_gate_waiting_past_the_deadline_expires_the_workflow(api, desk):
    workflow_id = at_gate(api, desk)
    Workflow.objects.filter(pk=workflow_id).update(deadline=timezone.now() - timedelta(seconds=1))

    assert expiry.expire_overdue() == 1

    assert Workflow.objects.get(pk=workflow_id).status == "EXPIRED"
    assert Step.objects.get(workflow_id=workflow_id, key="close").status == "PENDING"
    assert api["reviewer"].post(f"/workflows/{workflow_id}/steps/close/approve", {}).status_code == 409
    assert expiry.expire_overdue() == 0  # once


def test_an_operator_cancels_a_workflow_waiting_at_a_gate(api, desk):
    workflow_id = at_gate(api, desk)
    cancelled = api["operator"].post(f"/workflows/{workflow_id}/cancel", {"reason": "not needed"})
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "CANCELLED"
    assert Step.objects.get(workflow_id=workflow_id, key="close").status == "PENDING"


def test_the_agent_is_told_the_workflow_waits_at_a_gate(api, desk):
    from tests.support.webhooks import secret_for

    secret_for("agent")
    body = {**gated_plan(), "callback_url": "https://hooks.example.com/in"}
    workflow_id = api["agent"].post("/workflows", body).json()["id"]
    api["reviewer"].post(f"/workflows/{workflow_id}/approve", {})
    run_until(workflow_id, "WAITING_GATE")
    event = json.loads(WebhookDelivery.objects.get(event="workflow.waiting_gate").body)
    assert event["data"]["workflow"]["gate"]["step"] == "close"


@pytest.mark.parametrize(
    "gate, field",
    [
        ({"approvals": 0}, "steps.1.gate.approvals"),
        ({"approvals": 11}, "steps.1.gate.approvals"),
        ({"approvals": "2"}, "steps.1.gate.approvals"),
        ({"approvals": True}, "steps.1.gate.approvals"),
        ({"approvals": 1, "note": 5}, "steps.1.gate.note"),
        ({"approvals": 1, "note": "x" * 2001}, "steps.1.gate.note"),
        ({"approvals": 1, "quorum": 2}, "steps.1.gate.quorum"),
        ({"note": "n"}, "steps.1.gate.approvals"),
    ],
)
def test_a_malformed_gate_is_refused_with_its_field_and_nothing_is_stored(api, gate, field):
    body = gated_plan()
    body["steps"][1]["gate"] = gate
    answer = api["agent"].post("/workflows", body)
    assert answer.status_code == 400, answer.content
    assert field in answer.json()["error"]["fields"], answer.json()
    assert not Workflow.objects.exists()


def test_a_gate_on_the_first_step_is_refused(api):
    body = gated_plan()
    body["steps"][0]["gate"] = {"approvals": 1}
    answer = api["agent"].post("/workflows", body)
    assert answer.status_code == 400 and "steps.0.gate" in answer.json()["error"]["fields"]


def test_gates_are_part_of_the_plan_hash_and_a_plan_without_gates_hashes_as_before(api):
    with_gate = api["agent"].post("/workflows", gated_plan("a")).json()
    plain = gated_plan("b")
    del plain["steps"][1]["gate"]
    without = api["agent"].post("/workflows", plain).json()
    assert with_gate["plan_hash"] != without["plan_hash"]
    entries = [binding.entry(s["key"], s["action"], s["args"], s.get("compensation")) for s in plain["steps"]]
    assert without["plan_hash"] == binding.plan_hash(entries)
    assert "gate" not in Workflow.objects.get(pk=without["id"]).plan[1]  # stored as submitted


def test_a_worker_killed_while_the_workflow_waits_at_the_gate_changes_nothing(api, start_worker, desk):
    worker = start_worker(name="before-the-gate")
    workflow_id = approved(api)
    wait_for_status(workflow_id, "WAITING_GATE")
    worker.kill()  # SIGKILL while the workflow waits

    api["reviewer2"].post(f"/workflows/{workflow_id}/steps/close/approve", {"comment": "go on"})
    start_worker(name="after-the-gate")
    wait_for_status(workflow_id, "COMPLETE")

    assert [(t["status"], t["idempotency_key"]) for t in desk.tickets()] == [
        ("closed", Step.objects.get(workflow_id=workflow_id, key="open").operation_key)
    ]
    close = Step.objects.get(workflow_id=workflow_id, key="close")
    assert close.attempts.count() == 1 and close.gate_opened_at is not None


def test_the_console_shows_the_gate_and_a_reviewer_decides_it(api, desk):
    workflow_id = at_gate(api, desk)
    reviewer = Client()
    assert reviewer.login(username="reviewer2", password=PASSWORD)
    assert workflow_id in reviewer.get("/").content.decode()  # the inbox lists gates awaiting a decision
    page = reviewer.get(f"/workflows/{workflow_id}/").content.decode()
    assert 'data-testid="gate"' in page and "Check the ticket before closing it" in page
    reviewer.post(f"/workflows/{workflow_id}/steps/close/approve", {"comment": "fine"})
    assert Workflow.objects.get(pk=workflow_id).status == "RUNNING"
    agent = Client()
    assert agent.login(username="agent", password=PASSWORD)
    assert 'data-testid="gate-decision"' not in agent.get(f"/workflows/{workflow_id}/").content.decode()


def test_the_recheck_names_the_gate(api, desk):
    workflow_id = at_gate(api, desk)
    step = Step.objects.select_related("workflow").get(workflow_id=workflow_id, key="close")
    names = [check.name for check in policies.evaluate(step)]
    assert "gate approved" in names


def test_a_step_before_the_gate_replayed_from_its_dead_letter_still_stops_at_the_gate(api, desk):
    desk.fault(mode="error", status=403, count=1)  # the first create is refused: not retried, dead-lettered
    workflow_id = approved(api)
    assert run_until(workflow_id, {"FAILED", "WAITING_GATE"}) == "FAILED"
    [dead] = api["operator"].get("/dead-letters", workflow=workflow_id).json()["items"]

    assert api["operator"].post(f"/dead-letters/{dead['id']}/replay", {"reason": "desk fixed"}).status_code == 202

    assert run_until(workflow_id, {"WAITING_GATE", "COMPLETE"}) == "WAITING_GATE"
    assert desk.tickets()[0]["status"] == "open"  # the close waits for the gate
    api["reviewer2"].post(f"/workflows/{workflow_id}/steps/close/approve", {})
    assert run_until(workflow_id, "COMPLETE") == "COMPLETE"
